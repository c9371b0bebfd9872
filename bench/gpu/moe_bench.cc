#include "bench/gpu/moe_bench.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/gpu/bench_util.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/layers/sparse_mlp.h"

namespace tessera::bench {
namespace {

using parallel::ExpertGemm;
using parallel::SparseMlpWeights;

constexpr int64_t kHidden = 1024, kFfn = 3584, kExperts = 8;

SparseMlpWeights MakeWeights(const at::TensorOptions& o, bool idle_expert) {
  at::manual_seed(21);
  SparseMlpWeights w;
  auto param = [&](int64_t rows, int64_t cols) {
    return (at::randn({rows, cols}, o.dtype(at::kFloat)) / std::sqrt(static_cast<double>(cols)))
        .to(o.dtype().toScalarType())
        .requires_grad_(true);
  };
  w.router = param(kExperts, kHidden);
  for (int e = 0; e < kExperts; ++e) {
    w.gate.push_back(param(kFfn, kHidden));
    w.up.push_back(param(kFfn, kHidden));
    w.down.push_back(param(kHidden, kFfn));
  }
  if (idle_expert) {
    std::vector<float> bias(kExperts, 0.0f);
    bias[kExperts - 1] = -100.0f;
    w.router_bias = at::tensor(bias).to(o.device());
  }
  return w;
}

std::vector<at::Tensor> Grads(const SparseMlpWeights& w) {
  std::vector<at::Tensor> g = {w.router.grad()};
  for (int e = 0; e < kExperts; ++e) g.insert(g.end(), {w.gate[e].grad(), w.up[e].grad(), w.down[e].grad()});
  return g;
}

void ClearGrads(SparseMlpWeights& w) {
  w.router.mutable_grad().reset();
  for (int e = 0; e < kExperts; ++e) {
    for (at::Tensor* p : {&w.gate[e], &w.up[e], &w.down[e]}) p->mutable_grad().reset();
  }
}

}  // namespace

int MoeBench(int argc, char** argv) {
  const bool cuda = Arg(argc, argv, "device", "cuda") == "cuda";
  const at::Device d = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  const int64_t tokens = std::stoll(Arg(argc, argv, "tokens", cuda ? "16384" : "512"));
  const at::TensorOptions o = at::TensorOptions().dtype(at::kBFloat16).device(d);
  auto tp = std::make_shared<parallel::SelfCommunicator>(0, "tp[0]");
  at::manual_seed(22);
  const at::Tensor x0 = at::randn({1, tokens, kHidden}, o);
  const at::Tensor probe = at::randn({1, tokens, kHidden}, o);
  auto run = [&](SparseMlpWeights& w, ExpertGemm gemm, at::Tensor* x) {
    parallel::SparseMlpOptions options{2, true, 0};
    options.gemm = gemm;
    *x = x0.clone().requires_grad_(true);
    auto stats = c10::make_intrusive<parallel::RouterStats>(kExperts);
    at::Tensor y = parallel::SparseMlp(*x, w, options, tp.get(), nullptr, stats.get(), true, 0);
    (y.to(at::kFloat) * probe.to(at::kFloat)).sum().backward();
    return y;
  };
  // The check: loop vs grouped, one expert idle.
  bool ok = true;
  {
    SparseMlpWeights a = MakeWeights(o, true), b = MakeWeights(o, true);
    at::Tensor xa, xb;
    const at::Tensor ya = run(a, ExpertGemm::kLoop, &xa), yb = run(b, ExpertGemm::kGrouped, &xb);
    std::vector<at::Tensor> ga = Grads(a), gb = Grads(b);
    ga.insert(ga.begin(), {ya, xa.grad()});
    gb.insert(gb.begin(), {yb, xb.grad()});
    double worst = 0;
    for (size_t i = 0; i < ga.size(); ++i) {
      if (!ga[i].defined() || !gb[i].defined()) {
        std::printf("moe_check tensor %zu undefined\n", i);
        ok = false;
        continue;
      }
      const at::Tensor p = ga[i].to(at::kFloat), q = gb[i].to(at::kFloat);
      // bf16 GEMMs over the same rows grouped otherwise: relative to the tensor's largest magnitude.
      const double err = (p - q).abs().max().item<double>() / std::max(p.abs().max().item<double>(), 1e-30);
      worst = std::max(worst, err);
    }
    const std::vector<at::Tensor> idle = {b.gate.back().grad(), b.up.back().grad(), b.down.back().grad()};
    bool zero = true;
    for (const at::Tensor& g : idle) zero = zero && g.defined() && g.eq(0).all().item<bool>();
    ok = ok && worst < 2e-2 && zero;
    std::printf("moe_check tokens %lld worst_rel_err %.2e idle_expert_grad_zero %d %s\n", static_cast<long long>(tokens),
                worst, zero ? 1 : 0, ok ? "ok" : "FAILED");
  }
  // The timing: balanced routing (no bias), forward + backward, median of 10.
  double times[2];
  for (const ExpertGemm gemm : {ExpertGemm::kLoop, ExpertGemm::kGrouped}) {
    SparseMlpWeights w = MakeWeights(o, false);
    at::Tensor x;
    times[gemm == ExpertGemm::kGrouped] = TimeIt(d, [&] {
      run(w, gemm, &x);
      ClearGrads(w);
    });
  }
  // Forward + backward GEMM FLOPs of the experts: 3 linears, 2·h·f each per row, 3x for backward, k rows per token.
  const double flops = 3.0 * 2.0 * kHidden * kFfn * 3.0 * 2.0 * tokens;
  std::printf("moe_block tokens %lld loop_ms %.2f grouped_ms %.2f speedup %.2f grouped_expert_TFLOPs %.1f\n",
              static_cast<long long>(tokens), times[0] * 1e3, times[1] * 1e3, times[0] / times[1],
              flops / times[1] / 1e12);
  return ok ? 0 : 1;
}

}  // namespace tessera::bench
