#include "bench/gpu/fp8_bench.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "kernels/fused_kernels.h"
#include "parallel/layers/fp8_linear.h"
#include "parallel/layers/linear.h"

namespace tessera::bench {
namespace {

using parallel::Fp8Options;
using parallel::Fp8Recipe;
using parallel::Fp8Tensor;

double Median(const at::Device& d, const std::function<void()>& fn, int warmup = 3, int reps = 10) {
  for (int i = 0; i < warmup; ++i) fn();
  if (d.is_cuda()) c10::cuda::device_synchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto s = std::chrono::steady_clock::now();
    fn();
    if (d.is_cuda()) c10::cuda::device_synchronize();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double RelErr(const at::Tensor& got, const at::Tensor& want) {
  return ((got.to(at::kDouble) - want.to(at::kDouble)).abs().max() / want.to(at::kDouble).abs().max()).item<double>();
}

// Each of a linear's three GEMMs with the operands quantised as the recipe does, _scaled_mm (or the
// fallback) vs the emulation. fp32 products where _scaled_mm gives them (tensorwise): 1e-6 relative;
// bf16 products (rowwise on CUDA): one bf16 rounding, 2^-8.
bool Check(const at::Device& d) {
  bool ok = true;
  auto o = at::TensorOptions().device(d);
  at::manual_seed(1);
  const int64_t M = 1024, K = 2048, N = 1536;
  at::Tensor x = at::randn({M, K}, o).to(at::kBFloat16), w = (at::randn({N, K}, o) * 0.02).to(at::kBFloat16);
  at::Tensor g = (at::randn({M, N}, o) * 1e-3).to(at::kBFloat16);
  for (Fp8Recipe r : {Fp8Recipe::kTensorwise, Fp8Recipe::kRowwise}) {
    const bool rw = r == Fp8Recipe::kRowwise;
    const char* name = rw ? "rowwise" : "tensorwise";
    const at::ScalarType e4 = at::kFloat8_e4m3fn, grad8 = rw ? e4 : at::kFloat8_e5m2;
    const at::ScalarType out = rw ? at::kBFloat16 : at::kFloat;
    // fp32 products: 1e-6 on the CPU; on Hopper the FP8 tensor cores accumulate with fewer bits than
    // fp32 (measured 1.6e-4 relative on an H200, 2026-11-27), so 2^-10 there. bf16 products: one rounding.
    const double bar = rw ? 1.0 / 256 : (d.is_cuda() ? 1.0 / 1024 : 1e-6);
    struct Gemm {
      const char* name;
      Fp8Tensor a, b;
    };
    auto q = [&](const at::Tensor& t, at::ScalarType f, int64_t dim) { return parallel::QuantizeFp8(t, f, rw ? dim : -1, rw); };
    Fp8Tensor wq = q(w, e4, 1);
    std::vector<Gemm> gemms = {
        {"forward", q(x, e4, 1), {wq.data.t(), rw ? wq.inv_scale.t() : wq.inv_scale}},
        {"grad_input", q(g, grad8, 1), q(w, e4, 0)},
        {"grad_weight", q(g.t().contiguous(), grad8, 1), q(x, e4, 0)},
    };
    for (const Gemm& gm : gemms) {
      const double err = RelErr(parallel::ScaledMatmul(gm.a, gm.b, out), parallel::EmulatedScaledMatmul(gm.a, gm.b, at::kFloat));
      const bool pass = err <= bar;
      ok = ok && pass;
      std::printf("fp8_check recipe %s gemm %s rel_err %.3g bar %.3g %s\n", name, gm.name, err, bar, pass ? "ok" : "FAILED");
    }
  }
  // The CUDA quantisation kernels against the composite: bit-equal data and scale (aligned and odd sizes).
  if (d.is_cuda() && kernels::CudaKernels() != nullptr) {
    for (int64_t n : {int64_t{1} << 20, int64_t{12345}}) {
      at::Tensor t = (at::randn({n}, o) * 3).to(at::kBFloat16);
      for (at::ScalarType f : {at::kFloat8_e4m3fn, at::kFloat8_e5m2}) {
        auto [cd, cs] = kernels::CudaKernels()->QuantizeFp8Tensorwise(t, f);
        auto [rd, rs] = kernels::CompositeKernels().QuantizeFp8Tensorwise(t, f);
        const bool pass = at::equal(cd.view(at::kByte), rd.view(at::kByte)) && at::equal(cs, rs);
        ok = ok && pass;
        std::printf("fp8_check quantize_kernel n %lld %s %s\n", static_cast<long long>(n),
                    f == at::kFloat8_e5m2 ? "e5m2" : "e4m3", pass ? "ok" : "FAILED");
      }
    }
  }
  return ok;
}

// Forward + backward (input and weight gradients) of one linear layer [M, K] -> [M, N].
double TimeLinear(const at::Device& d, int64_t M, int64_t K, int64_t N, const Fp8Options* fp8) {
  auto o = at::TensorOptions().device(d).dtype(at::kBFloat16);
  at::Tensor x = at::randn({M, K}, o).requires_grad_(true);
  at::Tensor w = (at::randn({N, K}, o) * 0.02).requires_grad_(true);
  at::Tensor gy = at::randn({M, N}, o);
  return Median(d, [&] {
    at::Tensor y;
    {
      parallel::Fp8Scope scope(fp8);
      y = parallel::Linear(x, w);
    }
    torch::autograd::backward({y}, {gy});
    x.mutable_grad() = at::Tensor();
    w.mutable_grad() = at::Tensor();
  });
}

}  // namespace

int Fp8Bench(int argc, char** argv) {
  (void)argc, (void)argv;
  const at::Device d = at::hasCUDA() ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  const bool ok = Check(d);
  Fp8Options tw, rw;
  rw.recipe = Fp8Recipe::kRowwise;
  tw.min_dim = rw.min_dim = 16;
  const int64_t M = d.is_cuda() ? 8192 : 256;  // Tokens per micro-batch (4 x 2048).
  struct Shape {
    const char* layer;
    int64_t k, n;
  };
  std::vector<Shape> shapes = {
      {"gpt1.3b_qkv", 2048, 6144}, {"gpt1.3b_out", 2048, 2048}, {"gpt1.3b_fc", 2048, 8192},
      {"gpt1.3b_proj", 8192, 2048}, {"llama1b_q", 2048, 2048}, {"llama1b_kv", 2048, 512},
      {"llama1b_gate_up", 2048, 8192}, {"llama1b_down", 8192, 2048}};
  // Llama 3 8B's layers, on the GPU only: where FP8's GEMMs are larger against its casts.
  const std::vector<Shape> large = {
      {"llama8b_q", 4096, 4096}, {"llama8b_gate_up", 4096, 14336}, {"llama8b_down", 14336, 4096}};
  if (d.is_cuda()) shapes.insert(shapes.end(), large.begin(), large.end());
  for (const Shape& s : shapes) {
    const int64_t k = d.is_cuda() ? s.k : s.k / 8, n = d.is_cuda() ? s.n : s.n / 8;
    double t_bf16 = 0, t_tw = 0, t_rw = 0;
    for (int round = 0; round < 3; ++round) {  // Interleaved rounds; the best of each (noise is one-sided).
      const double a = TimeLinear(d, M, k, n, nullptr), b = TimeLinear(d, M, k, n, &tw), c = TimeLinear(d, M, k, n, &rw);
      t_bf16 = round == 0 ? a : std::min(t_bf16, a);
      t_tw = round == 0 ? b : std::min(t_tw, b);
      t_rw = round == 0 ? c : std::min(t_rw, c);
    }
    const double flops = 6.0 * M * k * n;
    std::printf("fp8_linear layer %s M %lld K %lld N %lld bf16_us %.1f tensorwise_us %.1f rowwise_us %.1f "
                "tensorwise_x %.2f rowwise_x %.2f bf16_TFLOPs %.0f tensorwise_TFLOPs %.0f\n",
                s.layer, static_cast<long long>(M), static_cast<long long>(k), static_cast<long long>(n), t_bf16 * 1e6,
                t_tw * 1e6, t_rw * 1e6, t_bf16 / t_tw, t_bf16 / t_rw, flops / t_bf16 / 1e12, flops / t_tw / 1e12);
  }
  if (d.is_cuda()) {  // The bare GEMM rates: what FP8 can give at most.
    const int64_t n = 8192;
    auto o = at::TensorOptions().device(d);
    at::Tensor a = at::randn({n, n}, o).to(at::kBFloat16), b = at::randn({n, n}, o).to(at::kBFloat16);
    Fp8Tensor qa = parallel::QuantizeFp8(a, at::kFloat8_e4m3fn, -1, false);
    Fp8Tensor qb = parallel::QuantizeFp8(b.t().contiguous(), at::kFloat8_e4m3fn, -1, false);
    Fp8Tensor qbt{qb.data.t(), qb.inv_scale};
    const double t_mm = Median(d, [&] { at::mm(a, b); });
    const double t_f8 = Median(d, [&] { parallel::ScaledMatmul(qa, qbt, at::kBFloat16); });
    const double t_q = Median(d, [&] { parallel::QuantizeFp8(a, at::kFloat8_e4m3fn, -1, false); });
    // Both layouts: one kernel, against one quantisation and ATen's transposing copy.
    const kernels::FusedKernels& k = kernels::CudaKernels() ? *kernels::CudaKernels() : kernels::CompositeKernels();
    const double t_qt = Median(d, [&] { k.QuantizeFp8TensorwiseTransposed(a, at::kFloat8_e4m3fn); });
    const double t_q_copy =
        Median(d, [&] { parallel::QuantizeFp8(a, at::kFloat8_e4m3fn, -1, false).data.t().contiguous(); });
    std::printf("fp8_gemm n %lld bf16_TFLOPs %.0f fp8_TFLOPs %.0f ratio %.2f quantize_us %.1f "
                "quantize_both_layouts_us %.1f quantize_then_transpose_copy_us %.1f\n",
                static_cast<long long>(n), 2.0 * n * n * n / t_mm / 1e12, 2.0 * n * n * n / t_f8 / 1e12, t_mm / t_f8,
                t_q * 1e6, t_qt * 1e6, t_q_copy * 1e6);
  }
  return ok ? 0 : 1;
}

}  // namespace tessera::bench
