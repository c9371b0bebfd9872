// Benchmark: CPU AdamW over N fp32 parameters — kernels::CpuAdamW (each SIMD level) against the same
// update in ATen ops (torch's single-tensor AdamW in C++), and the machine's memory bandwidth from a
// large copy measured in the same run. AdamW moves 28 bytes per parameter (reads p, g, m, v; writes
// p, m, v); the bound is N·28 bytes at the copy bandwidth. Prints JSON (bench/cpu_adam.py adds
// PyTorch's Python optimizers and prints the table).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "kernels/cpu_adam.h"

namespace {

using Clock = std::chrono::steady_clock;

template <typename Fn>
double BestSeconds(int reps, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::stoll(argv[1]) : 100'000'000;
  const int reps = argc > 2 ? std::stoi(argv[2]) : 5;
  at::Tensor p = at::randn({n}), g = at::randn({n}) * 0.01, m = at::zeros({n}), v = at::zeros({n});
  // Copy bandwidth: bytes read + written per second by a parallel memcpy of 4·N bytes, one large
  // block per thread (glibc then uses non-temporal stores: no read-for-ownership traffic, so 2
  // transfers per byte is the true traffic).
  at::Tensor src = at::randn({n}), dst = at::zeros({n});
  const int64_t block = (n + at::get_num_threads() - 1) / at::get_num_threads();
  const double copy_s = BestSeconds(reps, [&] {
    at::parallel_for(0, n, block, [&](int64_t b, int64_t e) {
      std::memcpy(dst.data_ptr<float>() + b, src.data_ptr<float>() + b, (e - b) * 4);
    });
  });
  const double bandwidth = 2.0 * 4 * n / copy_s;
  std::printf("{\"n\": %lld, \"threads\": %d, \"copy_bandwidth_bytes_per_s\": %.4g", static_cast<long long>(n),
              at::get_num_threads(), bandwidth);
  int64_t step = 0;
  for (auto simd : {tessera::kernels::Simd::kScalar, tessera::kernels::Simd::kAvx2, tessera::kernels::Simd::kAvx512}) {
    if (static_cast<int>(simd) > static_cast<int>(tessera::kernels::DetectSimd())) continue;
    const double s = BestSeconds(reps, [&] {
      tessera::kernels::AdamWStep st{1e-3, 0.9, 0.95, 1e-8, 0.1, ++step};
      tessera::kernels::CpuAdamW(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), n,
                                 st, simd);
    });
    std::printf(", \"tessera_%s_params_per_s\": %.4g", tessera::kernels::SimdName(simd), n / s);
  }
  const double aten_s = BestSeconds(reps, [&] {
    ++step;
    p.mul_(1 - 1e-3 * 0.1);
    m.lerp_(g, 0.1);
    v.mul_(0.95).addcmul_(g, g, 0.05);
    at::Tensor denom = (v.sqrt() / std::sqrt(1 - std::pow(0.95, step))).add_(1e-8);
    p.addcdiv_(m, denom, -1e-3 / (1 - std::pow(0.9, step)));
  });
  std::printf(", \"torch_cpp_ops_params_per_s\": %.4g, \"bound_params_per_s\": %.4g}\n", n / aten_s, bandwidth / 28);
  return 0;
}
