// Benchmark: CPU AdamW over N fp32 parameters — kernels::CpuAdamW (each SIMD level) against the same
// update in ATen ops (torch's single-tensor AdamW in C++), and the machine's memory bandwidth measured
// in the same run. AdamW moves 28 bytes per parameter (reads p, g, m, v; writes p, m, v in place).
// Two bounds, in parameters per second:
//   copy    N·28 bytes at the bandwidth of a large parallel memcpy (bytes read + written);
//   stream  the same traffic as AdamW — four arrays read, three of them written in place — with one
//           multiply-add per array instead of Adam's arithmetic: what any kernel of AdamW's access
//           pattern can reach here (a write to memory just read costs no extra read for ownership,
//           which a copy's destination may).
// Also: bf16 gradients times a factor read in the update's pass vs converted and scaled first.
// Prints JSON (bench/cpu_adam.py adds PyTorch's Python optimizers and prints the table).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

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

// The stream bound's kernel: AdamW's loads and stores, almost none of its arithmetic (v stays ≥ 0).
// Written with vector types (8 floats) so that the compiler's cost model cannot leave it scalar, and
// compiled for AVX2 too: with 16-byte SSE instructions alone it stays below what AVX2 AdamW reaches.
inline __attribute__((always_inline)) void StreamBody(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n,
            float a) {
  typedef float Vec __attribute__((vector_size(32)));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    Vec gi, pi, mi, vi;
    std::memcpy(&gi, g + i, sizeof(Vec));
    std::memcpy(&pi, p + i, sizeof(Vec));
    std::memcpy(&mi, m + i, sizeof(Vec));
    std::memcpy(&vi, v + i, sizeof(Vec));
    pi += a * gi;
    mi += a * gi;
    vi += a * gi * gi;
    std::memcpy(p + i, &pi, sizeof(Vec));
    std::memcpy(m + i, &mi, sizeof(Vec));
    std::memcpy(v + i, &vi, sizeof(Vec));
  }
  for (; i < n; ++i) {
    p[i] += a * g[i];
    m[i] += a * g[i];
    v[i] += a * g[i] * g[i];
  }
}

__attribute__((target("avx2,fma"))) void StreamAvx2(float* p, const float* g, float* m, float* v, int64_t n, float a) {
  StreamBody(p, g, m, v, n, a);
}

void Stream(float* p, const float* g, float* m, float* v, int64_t n, float a) {
  if (static_cast<int>(tessera::kernels::DetectSimd()) >= static_cast<int>(tessera::kernels::Simd::kAvx2)) {
    StreamAvx2(p, g, m, v, n, a);
  } else {
    StreamBody(p, g, m, v, n, a);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::stoll(argv[1]) : 100'000'000;
  const int reps = argc > 2 ? std::stoi(argv[2]) : 5;
  at::Tensor p = at::randn({n}), g = at::randn({n}) * 0.01, m = at::zeros({n}), v = at::zeros({n});
  at::Tensor src = at::randn({n}), dst = at::zeros({n});
  using tessera::kernels::Simd;
  int64_t step = 0;

  // Every implementation once per round, `reps` rounds, the best time of each: all of them see the
  // same moments of a shared machine.
  std::vector<std::pair<std::string, std::function<void()>>> runs;
  // Copy: a parallel memcpy of 4·N bytes, one large block per thread (glibc then uses non-temporal
  // stores: no read-for-ownership traffic, so 2 transfers per byte is the true traffic).
  const int64_t block = (n + at::get_num_threads() - 1) / at::get_num_threads();
  runs.push_back({"copy", [&] {
                    at::parallel_for(0, n, block, [&](int64_t b, int64_t e) {
                      std::memcpy(dst.data_ptr<float>() + b, src.data_ptr<float>() + b, (e - b) * 4);
                    });
                  }});
  // Stream: the same chunking over threads as CpuAdamW (64k elements).
  constexpr int64_t kChunk = 1 << 16;
  runs.push_back({"stream", [&] {
                    at::parallel_for(0, (n + kChunk - 1) / kChunk, 1, [&](int64_t b, int64_t e) {
                      const int64_t lo = b * kChunk, hi = std::min(n, e * kChunk);
                      Stream(p.data_ptr<float>() + lo, g.data_ptr<float>() + lo, m.data_ptr<float>() + lo,
                             v.data_ptr<float>() + lo, hi - lo, 1e-3f);
                    });
                  }});
  for (Simd simd : {Simd::kScalar, Simd::kAvx2, Simd::kAvx512}) {
    if (static_cast<int>(simd) > static_cast<int>(tessera::kernels::DetectSimd())) continue;
    runs.push_back({std::string("tessera_") + tessera::kernels::SimdName(simd), [&, simd] {
                      tessera::kernels::AdamWStep st{1e-3, 0.9, 0.95, 1e-8, 0.1, ++step};
                      tessera::kernels::CpuAdamW(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(),
                                                 v.data_ptr<float>(), n, st, simd);
                    }});
  }
  runs.push_back({"torch_cpp_ops", [&] {
                    ++step;
                    p.mul_(1 - 1e-3 * 0.1);
                    m.lerp_(g, 0.1);
                    v.mul_(0.95).addcmul_(g, g, 0.05);
                    at::Tensor denom = (v.sqrt() / std::sqrt(1 - std::pow(0.95, step))).add_(1e-8);
                    p.addcdiv_(m, denom, -1e-3 / (1 - std::pow(0.9, step)));
                  }});
  // bf16 gradients times a factor (a clip coefficient, 1 / a loss scale), the ZeRO host step's common
  // case: read in the kernel's own pass, against converting and scaling them first in ATen (what the
  // host step did before, two more passes and two fresh tensors).
  at::Tensor g16 = g.to(at::kBFloat16);
  const Simd widest = tessera::kernels::DetectSimd();
  runs.push_back({"lowp_in_pass", [&] {
                    tessera::kernels::AdamWStep st{1e-3, 0.9, 0.95, 1e-8, 0.1, ++step};
                    tessera::kernels::CpuAdamW(p.data_ptr<float>(),
                                               {g16.data_ptr(), tessera::kernels::GradType::kBf16, 0.5f},
                                               m.data_ptr<float>(), v.data_ptr<float>(), n, st, widest);
                  }});
  runs.push_back({"lowp_converted_first", [&] {
                    tessera::kernels::AdamWStep st{1e-3, 0.9, 0.95, 1e-8, 0.1, ++step};
                    const at::Tensor g32 = g16.to(at::kFloat) * 0.5;
                    tessera::kernels::CpuAdamW(p.data_ptr<float>(), g32.data_ptr<float>(), m.data_ptr<float>(),
                                               v.data_ptr<float>(), n, st, widest);
                  }});
  std::map<std::string, double> best;
  for (int r = 0; r < reps; ++r) {
    for (auto& [name, fn] : runs) {
      const double s = BestSeconds(1, fn);
      if (!best.count(name) || s < best[name]) best[name] = s;
    }
  }

  const double bandwidth = 2.0 * 4 * n / best["copy"];
  std::printf("{\"n\": %lld, \"threads\": %d, \"simd\": \"%s\", \"copy_bandwidth_bytes_per_s\": %.4g, "
              "\"stream_bandwidth_bytes_per_s\": %.4g, \"stream_params_per_s\": %.4g, \"bound_params_per_s\": %.4g",
              static_cast<long long>(n), at::get_num_threads(), tessera::kernels::SimdName(widest), bandwidth,
              28.0 * n / best["stream"], n / best["stream"], bandwidth / 28);
  for (const auto& [name, fn] : runs) {
    if (name != "copy" && name != "stream") std::printf(", \"%s_params_per_s\": %.4g", name.c_str(), n / best[name]);
  }
  std::printf("}\n");
  return 0;
}
