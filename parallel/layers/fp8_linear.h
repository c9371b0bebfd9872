// FP8 linear layers (train.precision: fp8): y = x·Wᵀ with the forward GEMM and both backward GEMMs in
// 8-bit floating point, scales from the current amax ("current scaling", torchao's Float8Linear recipes):
//  - kTensorwise: one scale per tensor; x and W in e4m3, the output gradient in e5m2.
//  - kRowwise: one scale per row of each GEMM operand along its contraction dimension, e4m3 for all three
//    operands, scales rounded down to a power of two (torchao's "rowwise" recipe).
// A scale s = fp8_max / max(amax, 1e-12) (computed in double, kept as fp32); q = saturate(x·s) rounded to
// nearest even; the GEMM multiplies q's and applies 1/s of each side, accumulating in fp32, and rounds
// the product once to x's dtype. Where torch's _scaled_mm cannot take the operands (rowwise scales on
// the CPU: torch 2.11's CPU kernel is per-tensor only) the same product is computed from the dequantised
// operands in fp32 — the emulation the tests hold every GEMM to.
//
// Under tensor parallelism each rank scales its own shard (its weight shard, its activation rows or
// columns): no amax is reduced across the group, so ranks with different shards quantise independently,
// exactly like a single-process model whose linear layers are those shards.
#ifndef TESSERA_PARALLEL_LAYERS_FP8_LINEAR_H_
#define TESSERA_PARALLEL_LAYERS_FP8_LINEAR_H_

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "layout/modes.h"

namespace tessera::parallel {

using layout::Fp8Options;  // recipe, min_dim (filter: applied by the model, not here).
using layout::Fp8Recipe;

// The FP8 options Linear() consults on this thread while the scope lives (nullptr: none). Scopes nest;
// the model opens one around each transformer block (not the embedding or the output head).
class Fp8Scope {
 public:
  explicit Fp8Scope(const Fp8Options* options);
  ~Fp8Scope();
  Fp8Scope(const Fp8Scope&) = delete;
  Fp8Scope& operator=(const Fp8Scope&) = delete;
  static const Fp8Options* current();

 private:
  const Fp8Options* previous_;
};

// data · inv_scale ≈ the source. inv_scale is fp32: one element (tensorwise), or the source's shape with
// the scaled dimension kept as 1 (rowwise).
struct Fp8Tensor {
  at::Tensor data;
  at::Tensor inv_scale;
};

// Quantises a 2-D tensor to `fp8` (Float8_e4m3fn or Float8_e5m2). reduce_dim < 0: one scale for the
// tensor; else one scale per slice along the other dimension, its amax taken over reduce_dim.
Fp8Tensor QuantizeFp8(const at::Tensor& t, at::ScalarType fp8, int64_t reduce_dim, bool power_of_two_scales);

// a [M, K] · b [K, N] of two quantised operands (a's scale per row or one, b's per column or one), fp32
// accumulation, rounded to out_dtype. _scaled_mm where it takes the operands, else the emulation.
at::Tensor ScaledMatmul(const Fp8Tensor& a, const Fp8Tensor& b, at::ScalarType out_dtype);
// The reference: dequantise both (fp32), multiply in fp32, round to out_dtype.
at::Tensor EmulatedScaledMatmul(const Fp8Tensor& a, const Fp8Tensor& b, at::ScalarType out_dtype);

// Whether Linear(x, w) runs in FP8 under `options`: a bf16 or fp16 input, K and N at least min_dim and
// multiples of 16, the rows (tokens) a multiple of 16 (the weight gradient's contraction).
bool Fp8Applies(const at::Tensor& x, const at::Tensor& w, const Fp8Options& options);

// y = x·Wᵀ (+ b) with the three GEMMs in FP8 (the header's contract); the bias is added in x's dtype.
// While WeightGradStore::splitting(), the weight gradient's GEMM is left to the store.
at::Tensor Fp8Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const Fp8Options& options);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_LAYERS_FP8_LINEAR_H_
