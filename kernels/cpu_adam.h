// CPU AdamW over fp32 arrays, vectorised (AVX-512 or AVX2+FMA, chosen at run time; scalar fallback)
// and split over ATen's intra-op threads. One pass reads param, grad (fp32, bf16 or fp16, scaled as
// read), m, v and writes param, m, v (and optionally a bf16 or fp16 copy of the new param), with
// PyTorch's AdamW arithmetic per element:
//   p ← p·(1 − lr·wd)
//   m ← m + (1−β1)·(g − m)                      (torch.lerp; fused multiply-add as ATen's AVX path)
//   v ← fma((1−β2)·g, g, v·β2)                  (torch.addcmul, contracted as ATen's AVX path)
//   p ← p + ((−lr/(1−β1ᵗ)) · m) / (√v / √(1−β2ᵗ) + ε)    (torch.addcdiv's order)
// Scalars are computed in double and rounded to float once, as ATen does for a float tensor.
#ifndef TESSERA_KERNELS_CPU_ADAM_H_
#define TESSERA_KERNELS_CPU_ADAM_H_

#include <cstdint>

namespace tessera::kernels {

enum class Simd { kScalar, kAvx2, kAvx512 };

// The widest level this CPU supports.
Simd DetectSimd();
const char* SimdName(Simd simd);

struct AdamWStep {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // 0 for tensors without decay.
  int64_t step = 1;           // Counts from 1.
};

// The 16-bit copy of the updated parameters that CpuAdamW can write in the same pass.
enum class Copy16 { kBf16, kFp16 };

// The gradients CpuAdamW reads: `n` elements of fp32, bfloat16 or IEEE half, each widened to float and
// multiplied by `scale` in float as it is read — the same single rounding as ATen's g.to(float) * scale
// (a clip coefficient, 1 / loss scale), without the two passes over memory those take.
enum class GradType { kF32, kBf16, kFp16 };
struct GradIn {
  const void* data = nullptr;
  GradType type = GradType::kF32;
  float scale = 1.0f;
};

// Updates n elements in place. `grad`: see GradIn (a float pointer: fp32, scale 1). `out16` (may be
// null) receives the updated parameters rounded to `out16_type` (bfloat16 or IEEE half; round to
// nearest even, as ATen's conversions). `simd` above DetectSimd() is lowered to what the CPU has.
// `parallel`: split over ATen's intra-op threads (false: the calling thread only).
void CpuAdamW(float* param, const GradIn& grad, float* exp_avg, float* exp_avg_sq, int64_t n, const AdamWStep& step,
              Simd simd, bool parallel = true, uint16_t* out16 = nullptr, Copy16 out16_type = Copy16::kBf16);
inline void CpuAdamW(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                     const AdamWStep& step, Simd simd, bool parallel = true, uint16_t* out16 = nullptr,
                     Copy16 out16_type = Copy16::kBf16) {
  CpuAdamW(param, GradIn{grad}, exp_avg, exp_avg_sq, n, step, simd, parallel, out16, out16_type);
}

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_ADAM_H_
