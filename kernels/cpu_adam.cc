#include "kernels/cpu_adam.h"

#include <immintrin.h>

#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tessera::kernels {
namespace {

// Per-step constants, each rounded to float once.
struct Consts {
  float decay;      // 1 − lr·wd
  float w1;         // 1 − β1
  float beta2;
  float w2;         // 1 − β2
  float bc2_sqrt;   // √(1 − β2ᵗ)
  float eps;
  float neg_step;   // −lr / (1 − β1ᵗ)
};

Consts MakeConsts(const AdamWStep& s) {
  const double t = static_cast<double>(s.step);
  return {static_cast<float>(1 - s.lr * s.weight_decay), static_cast<float>(1 - s.beta1),
          static_cast<float>(s.beta2),                   static_cast<float>(1 - s.beta2),
          static_cast<float>(std::sqrt(1 - std::pow(s.beta2, t))), static_cast<float>(s.eps),
          static_cast<float>(-s.lr / (1 - std::pow(s.beta1, t)))};
}

inline uint16_t ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN stays NaN.
  bits += 0x7fff + ((bits >> 16) & 1);  // Round to nearest even.
  return static_cast<uint16_t>(bits >> 16);
}

// Where the 16-bit copy goes (data null: none).
struct Out16 {
  uint16_t* data;
  Copy16 type;
};

inline uint16_t ToFp16(float f) { return c10::Half(f).x; }  // c10's IEEE round to nearest even.

inline void Store16(const Out16& out, int64_t i, float f) {
  out.data[i] = out.type == Copy16::kBf16 ? ToBf16(f) : ToFp16(f);
}

// Element i of the gradients, widened to float and scaled (one rounding, as g.to(float) * scale).
template <GradType G>
inline float LoadGrad(const GradIn& g, int64_t i) {
  float f;
  if constexpr (G == GradType::kF32) {
    f = static_cast<const float*>(g.data)[i];
  } else if constexpr (G == GradType::kBf16) {
    const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(g.data)[i]) << 16;
    std::memcpy(&f, &bits, 4);
  } else {
    f = c10::Half(static_cast<const uint16_t*>(g.data)[i], c10::Half::from_bits());
  }
  return f * g.scale;
}

template <GradType G>
void Scalar(float* p, const GradIn& g, float* m, float* v, int64_t begin, int64_t end, const Consts& c, Out16 out) {
  for (int64_t i = begin; i < end; ++i) {
    float pi = p[i] * c.decay;
    const float gi = LoadGrad<G>(g, i);
    // torch.lerp with weight < 0.5: self + weight·(end − self); one rounding, as ATen's fmadd.
    const float mi = std::fma(c.w1, gi - m[i], m[i]);
    const float vi = std::fma(c.w2 * gi, gi, v[i] * c.beta2);  // torch.addcmul: fma(value·t1, t2, self).
    const float denom = std::sqrt(vi) / c.bc2_sqrt + c.eps;
    pi = pi + c.neg_step * mi / denom;  // torch.addcdiv: self + (value·t1) / t2.
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if (out.data != nullptr) Store16(out, i, pi);
  }
}

// ToBf16 on 8 floats (the same bits: round to nearest even, NaN kept quiet), stored as 8 uint16.
__attribute__((target("avx2"))) inline void StoreBf16x8(uint16_t* out, __m256 f) {
  const __m256i bits = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x400000));
  const __m256i high = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, nan), 16);
  // packus works within 128-bit lanes: [h0..h3 h0..h3 | h4..h7 h4..h7]; quads 0 and 2 hold h0..h7.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(high, high), 0xD8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(packed));
}

// The same on 16 floats.
__attribute__((target("avx512f"))) inline void StoreBf16x16(uint16_t* out, __m512 f) {
  const __m512i bits = _mm512_castps_si512(f);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
  const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(bits, _mm512_set1_epi32(0x400000));
  const __m512i high = _mm512_srli_epi32(_mm512_mask_blend_epi32(nan, rounded, quiet), 16);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(high));
}

template <GradType G>
__attribute__((target("avx2,fma,f16c"))) inline __m256 LoadGrad8(const GradIn& g, int64_t i, __m256 scale) {
  __m256 f;
  if constexpr (G == GradType::kF32) {
    f = _mm256_loadu_ps(static_cast<const float*>(g.data) + i);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(g.data) + i));
    if constexpr (G == GradType::kBf16) {
      f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      f = _mm256_cvtph_ps(h);
    }
  }
  return _mm256_mul_ps(f, scale);
}

// GCC 12's vector intrinsics initialise their undefined operands from themselves (_mm256_undefined_si256,
// _mm512_undefined_ps), which -Wmaybe-uninitialized reports at every use; nothing here is uninitialised.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <GradType G>
__attribute__((target("avx2,fma,f16c"))) void Avx2(float* p, const GradIn& g, float* m, float* v, int64_t begin,
                                                   int64_t end, const Consts& c, Out16 out) {
  const __m256 decay = _mm256_set1_ps(c.decay), w1 = _mm256_set1_ps(c.w1), beta2 = _mm256_set1_ps(c.beta2),
               w2 = _mm256_set1_ps(c.w2), bc2 = _mm256_set1_ps(c.bc2_sqrt), eps = _mm256_set1_ps(c.eps),
               neg_step = _mm256_set1_ps(c.neg_step), scale = _mm256_set1_ps(g.scale);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    __m256 pi = _mm256_mul_ps(_mm256_loadu_ps(p + i), decay);
    const __m256 gi = LoadGrad8<G>(g, i, scale);
    const __m256 m0 = _mm256_loadu_ps(m + i);
    const __m256 mi = _mm256_fmadd_ps(w1, _mm256_sub_ps(gi, m0), m0);
    const __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(w2, gi), gi, _mm256_mul_ps(_mm256_loadu_ps(v + i), beta2));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
    pi = _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(neg_step, mi), denom));
    _mm256_storeu_ps(p + i, pi);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    if (out.data != nullptr && out.type == Copy16::kFp16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out.data + i), _mm256_cvtps_ph(pi, _MM_FROUND_TO_NEAREST_INT));
    } else if (out.data != nullptr) {
      StoreBf16x8(out.data + i, pi);
    }
  }
  Scalar<G>(p, g, m, v, i, end, c, out);
}

template <GradType G>
__attribute__((target("avx512f"))) inline __m512 LoadGrad16(const GradIn& g, int64_t i, __m512 scale) {
  __m512 f;
  if constexpr (G == GradType::kF32) {
    f = _mm512_loadu_ps(static_cast<const float*>(g.data) + i);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(g.data) + i));
    if constexpr (G == GradType::kBf16) {
      f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      f = _mm512_cvtph_ps(h);
    }
  }
  return _mm512_mul_ps(f, scale);
}

template <GradType G>
__attribute__((target("avx512f"))) void Avx512(float* p, const GradIn& g, float* m, float* v, int64_t begin,
                                               int64_t end, const Consts& c, Out16 out) {
  const __m512 decay = _mm512_set1_ps(c.decay), w1 = _mm512_set1_ps(c.w1), beta2 = _mm512_set1_ps(c.beta2),
               w2 = _mm512_set1_ps(c.w2), bc2 = _mm512_set1_ps(c.bc2_sqrt), eps = _mm512_set1_ps(c.eps),
               neg_step = _mm512_set1_ps(c.neg_step), scale = _mm512_set1_ps(g.scale);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    __m512 pi = _mm512_mul_ps(_mm512_loadu_ps(p + i), decay);
    const __m512 gi = LoadGrad16<G>(g, i, scale);
    const __m512 m0 = _mm512_loadu_ps(m + i);
    const __m512 mi = _mm512_fmadd_ps(w1, _mm512_sub_ps(gi, m0), m0);
    const __m512 vi = _mm512_fmadd_ps(_mm512_mul_ps(w2, gi), gi, _mm512_mul_ps(_mm512_loadu_ps(v + i), beta2));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2), eps);
    pi = _mm512_add_ps(pi, _mm512_div_ps(_mm512_mul_ps(neg_step, mi), denom));
    _mm512_storeu_ps(p + i, pi);
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    if (out.data != nullptr && out.type == Copy16::kFp16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.data + i), _mm512_cvtps_ph(pi, _MM_FROUND_TO_NEAREST_INT));
    } else if (out.data != nullptr) {
      StoreBf16x16(out.data + i, pi);
    }
  }
  Scalar<G>(p, g, m, v, i, end, c, out);
}

#pragma GCC diagnostic pop

// One range of elements at SIMD level `simd`, gradients of type G.
template <GradType G>
void Run(Simd simd, float* p, const GradIn& g, float* m, float* v, int64_t begin, int64_t end, const Consts& c,
         Out16 out) {
  switch (simd) {
    case Simd::kAvx512: Avx512<G>(p, g, m, v, begin, end, c, out); break;
    case Simd::kAvx2: Avx2<G>(p, g, m, v, begin, end, c, out); break;
    case Simd::kScalar: Scalar<G>(p, g, m, v, begin, end, c, out); break;
  }
}

}  // namespace

Simd DetectSimd() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return Simd::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    return Simd::kAvx2;
  }
  return Simd::kScalar;
}

const char* SimdName(Simd simd) {
  switch (simd) {
    case Simd::kScalar: return "scalar";
    case Simd::kAvx2: return "avx2";
    case Simd::kAvx512: return "avx512";
  }
  return "?";
}

void CpuAdamW(float* param, const GradIn& grad, float* exp_avg, float* exp_avg_sq, int64_t n, const AdamWStep& step,
              Simd simd, bool parallel, uint16_t* out16, Copy16 out16_type) {
  const Out16 out{out16, out16_type};
  const Consts c = MakeConsts(step);
  const Simd have = DetectSimd();
  if (static_cast<int>(simd) > static_cast<int>(have)) simd = have;
  auto run = [&](int64_t begin, int64_t end) {
    switch (grad.type) {
      case GradType::kF32: Run<GradType::kF32>(simd, param, grad, exp_avg, exp_avg_sq, begin, end, c, out); break;
      case GradType::kBf16: Run<GradType::kBf16>(simd, param, grad, exp_avg, exp_avg_sq, begin, end, c, out); break;
      case GradType::kFp16: Run<GradType::kFp16>(simd, param, grad, exp_avg, exp_avg_sq, begin, end, c, out); break;
    }
  };
  // Chunks of 64k elements (a multiple of every vector width) keep threads on separate cache lines.
  constexpr int64_t kGrain = 1 << 16;
  if (parallel && n > kGrain) {
    at::parallel_for(0, (n + kGrain - 1) / kGrain, 1, [&](int64_t b, int64_t e) {
      run(b * kGrain, std::min(n, e * kGrain));
    });
  } else {
    run(0, n);
  }
}

}  // namespace tessera::kernels
