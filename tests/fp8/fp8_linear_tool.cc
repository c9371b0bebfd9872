// fp8_linear_tool IN OUT RECIPE: one FP8 linear layer (parallel/layers/fp8_linear.h) for the torchao
// parity test (tests/python/fp8_torchao_test.py). IN holds x [M, K], w [N, K] and the output's gradient
// gy [M, N] (bf16); OUT gets y = x·wᵀ under an Fp8Scope of RECIPE (tensorwise | rowwise, min_dim 16) and
// the gradients dx, dw of sum(y · gy). Exit 1 with a message on bad arguments or files.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstdio>
#include <map>
#include <string>

#include "parallel/checkpoint/tensor_convert.h"
#include "parallel/layers/fp8_linear.h"
#include "parallel/layers/linear.h"

int main(int argc, char** argv) {
  using namespace tessera::parallel;
  if (argc != 4) return std::fprintf(stderr, "usage: fp8_linear_tool IN OUT tensorwise|rowwise\n"), 1;
  const std::string recipe = argv[3];
  if (recipe != "tensorwise" && recipe != "rowwise") return std::fprintf(stderr, "unknown recipe %s\n", argv[3]), 1;
  auto in = LoadTensors(argv[1]);
  if (!in.ok()) return std::fprintf(stderr, "%s\n", std::string(in.status().message()).c_str()), 1;
  for (const char* name : {"x", "w", "gy"}) {
    if (!in->count(name)) return std::fprintf(stderr, "%s: no tensor %s\n", argv[1], name), 1;
  }
  Fp8Options o;
  o.recipe = recipe == "rowwise" ? Fp8Recipe::kRowwise : Fp8Recipe::kTensorwise;
  o.min_dim = 16;
  at::Tensor x = in->at("x").clone().requires_grad_(true), w = in->at("w").clone().requires_grad_(true);
  at::Tensor y;
  {
    Fp8Scope scope(&o);
    if (!Fp8Applies(x, w, o)) return std::fprintf(stderr, "FP8 does not apply to these shapes/dtypes\n"), 1;
    y = Linear(x, w);
  }
  torch::autograd::backward({y}, {in->at("gy")});
  auto s = SaveTensors(argv[2], {{"y", y.detach()}, {"dx", x.grad()}, {"dw", w.grad()}});
  if (!s.ok()) return std::fprintf(stderr, "%s\n", std::string(s.message()).c_str()), 1;
  return 0;
}
