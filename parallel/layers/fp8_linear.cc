#include "parallel/layers/fp8_linear.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/fused_kernels.h"
#include "parallel/layers/weight_grad_store.h"

namespace tessera::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

thread_local const Fp8Options* current_fp8 = nullptr;

constexpr double kAmaxFloor = 1e-12;

double Fp8Max(at::ScalarType fp8) {
  switch (fp8) {
    case at::kFloat8_e4m3fn: return 448.0;
    case at::kFloat8_e5m2: return 57344.0;
    default: TORCH_CHECK(false, "QuantizeFp8: ", fp8, " is not an FP8 type (Float8_e4m3fn or Float8_e5m2)");
  }
}

bool ColumnMajor(const at::Tensor& t) { return t.stride(0) == 1 && t.stride(1) == t.size(0); }

// Whether torch's _scaled_mm takes these operands: one scale each on any device; rowwise scales on CUDA
// only, and there only for a bf16 product of two e4m3 operands.
bool ScaledMmTakes(const Fp8Tensor& a, const Fp8Tensor& b, at::ScalarType out_dtype) {
  const bool tensorwise = a.inv_scale.numel() == 1 && b.inv_scale.numel() == 1;
  if (tensorwise) return true;
  return a.data.is_cuda() && out_dtype == at::kBFloat16 && a.data.scalar_type() == at::kFloat8_e4m3fn &&
         b.data.scalar_type() == at::kFloat8_e4m3fn;
}

at::Tensor Flat(const at::Tensor& x) { return x.reshape({-1, x.size(-1)}); }

bool Pow2(Fp8Recipe r) { return r == Fp8Recipe::kRowwise; }
int64_t Axis(Fp8Recipe r, int64_t dim) { return r == Fp8Recipe::kTensorwise ? -1 : dim; }

// ScaledMatmul, with CUDA's faster accumulation in the tensor cores where `fast_accum` (cuBLASLt's
// fast-accumulation mode: partial sums promoted to fp32 less often). The forward GEMM uses it, as
// torchao's recipes do; the two gradient GEMMs do not.
at::Tensor ScaledMatmulAccumulating(const Fp8Tensor& a, const Fp8Tensor& b, at::ScalarType out_dtype, bool fast_accum);

Fp8Tensor Transposed(const Fp8Tensor& t) { return {t.data.t(), t.inv_scale.numel() == 1 ? t.inv_scale : t.inv_scale.t()}; }

// Tensorwise quantisation of a 2-D tensor: its row-major data and, where `transposed`, the transpose
// too (data_t, contiguous), with one scale; on CUDA one kernel writes both (no transposing copy later).
kernels::Fp8Transposed QuantizeTensorwise(const at::Tensor& t, at::ScalarType fp8, bool transposed) {
  if (!transposed) {
    Fp8Tensor q = QuantizeFp8(t, fp8, -1, false);
    return {q.data, at::Tensor(), q.inv_scale};
  }
  const kernels::FusedKernels* cuda = t.is_cuda() ? kernels::CudaKernels() : nullptr;
  return (cuda != nullptr ? *cuda : kernels::CompositeKernels()).QuantizeFp8TensorwiseTransposed(t, fp8);
}

// Which backward GEMMs a forward prepares for (Fp8Linear: grad mode on and the input's or the weight's
// requires_grad): the input gradient needs Wᵀ's quantised layout, the weight gradient xᵀ's.
constexpr int64_t kGradInput = 1, kGradWeight = 2;

// Forward: y [M, N] = x [M, K] · Wᵀ, x scaled per row (over K), W per row (over K). Saved: tensorwise,
// the quantised transposes the gradients' GEMMs take as K-contiguous operands (xᵀ for grad_W where the
// weight needs a gradient, Wᵀ for grad_x where the input does) and their scales; rowwise, x and W
// themselves (each GEMM scales them along its own contraction).
at::Tensor Fp8Forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, Fp8Recipe recipe, int64_t grads) {
  at::Tensor x2 = Flat(x);
  ctx->saved_data["recipe"] = static_cast<int64_t>(recipe);
  ctx->saved_data["x_sizes"] = x.sizes().vec();
  Fp8Tensor xq, wq;
  if (recipe == Fp8Recipe::kTensorwise) {
    kernels::Fp8Transposed xt = QuantizeTensorwise(x2, at::kFloat8_e4m3fn, (grads & kGradWeight) != 0);
    kernels::Fp8Transposed wt = QuantizeTensorwise(w, at::kFloat8_e4m3fn, (grads & kGradInput) != 0);
    xq = {xt.data, xt.inv_scale};
    wq = {wt.data, wt.inv_scale};
    ctx->save_for_backward({xt.data_t, xt.inv_scale, wt.data_t, wt.inv_scale, w});
  } else {
    xq = QuantizeFp8(x2, at::kFloat8_e4m3fn, Axis(recipe, 1), Pow2(recipe));
    wq = QuantizeFp8(w, at::kFloat8_e4m3fn, Axis(recipe, 1), Pow2(recipe));
    ctx->save_for_backward({x2, w});
  }
  at::Tensor y = ScaledMatmulAccumulating(xq, Transposed(wq), x.scalar_type(), /*fast_accum=*/true);
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = w.size(0);
  return y.view(sizes);
}

variable_list Fp8Backward(AutogradContext* ctx, const at::Tensor& grad) {
  const auto recipe = static_cast<Fp8Recipe>(ctx->saved_data["recipe"].toInt());
  const std::vector<int64_t> x_sizes = ctx->saved_data["x_sizes"].toIntVector();
  auto saved = ctx->get_saved_variables();
  const int64_t out = grad.size(-1);
  at::Tensor g = grad.reshape({-1, out});
  at::Tensor gx, gw;
  const at::ScalarType x_dtype = grad.scalar_type();
  if (recipe == Fp8Recipe::kTensorwise) {
    // xᵀ [K, M] and Wᵀ [K, N] quantised in the forward, row-major: their .t() views are the column-major
    // right operands _scaled_mm takes without a copy.
    const at::Tensor &xt = saved[0], &x_inv = saved[1], &wt = saved[2], &w_inv = saved[3], &w = saved[4];
    const bool want_gx = ctx->needs_input_grad(0), want_gw = ctx->needs_input_grad(1);
    TORCH_CHECK((!want_gx || wt.defined()) && (!want_gw || xt.defined()),
                "Fp8Linear: a gradient is wanted that the forward did not prepare for (grad mode changed?)");
    kernels::Fp8Transposed gq = QuantizeTensorwise(g, at::kFloat8_e5m2, want_gw);
    // grad_x [M, K] = g [M, N] · W [N, K].
    if (want_gx) gx = ScaledMatmul({gq.data, gq.inv_scale}, {wt.t(), w_inv}, x_dtype).view(x_sizes);
    if (want_gw) {
      // grad_W [N, K] = gᵀ [N, M] · x [M, K].
      Fp8Tensor gtq{gq.data_t, gq.inv_scale}, xq{xt.t(), x_inv};
      auto compute = [gtq, xq, w]() { return ScaledMatmul(gtq, xq, w.scalar_type()); };
      if (WeightGradStore* store = WeightGradStore::current()) {
        store->Defer(w, std::move(compute), {gtq.data, xt});
      } else {
        gw = compute();
      }
    }
  } else {
    const at::Tensor &x2 = saved[0], &w = saved[1];
    if (ctx->needs_input_grad(0)) {
      Fp8Tensor g_rows = QuantizeFp8(g, at::kFloat8_e4m3fn, 1, true);   // Over N, per row of g.
      Fp8Tensor w_cols = QuantizeFp8(w, at::kFloat8_e4m3fn, 0, true);   // Over N, per column of W.
      gx = ScaledMatmul(g_rows, w_cols, x_dtype).view(x_sizes);
    }
    if (ctx->needs_input_grad(1)) {
      auto compute = [g, x2, w]() {
        Fp8Tensor gt_rows = QuantizeFp8(g.t(), at::kFloat8_e4m3fn, 1, true);  // Over M, per row of gᵀ.
        Fp8Tensor x_cols = QuantizeFp8(x2, at::kFloat8_e4m3fn, 0, true);      // Over M, per column of x.
        return ScaledMatmul(gt_rows, x_cols, w.scalar_type());
      };
      if (WeightGradStore* store = WeightGradStore::current()) {
        store->Defer(w, std::move(compute), {g, x2});
      } else {
        gw = compute();
      }
    }
  }
  return {gx, gw, at::Tensor(), at::Tensor()};
}

struct Fp8LinearFn : public torch::autograd::Function<Fp8LinearFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, int64_t recipe,
                            int64_t grads) {
    return Fp8Forward(ctx, x, w, static_cast<Fp8Recipe>(recipe), grads);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return Fp8Backward(ctx, grads[0]);
  }
};

}  // namespace

Fp8Scope::Fp8Scope(const Fp8Options* options) : previous_(current_fp8) { current_fp8 = options; }
Fp8Scope::~Fp8Scope() { current_fp8 = previous_; }
const Fp8Options* Fp8Scope::current() { return current_fp8; }

Fp8Tensor QuantizeFp8(const at::Tensor& t, at::ScalarType fp8, int64_t reduce_dim, bool power_of_two_scales) {
  TORCH_CHECK(t.dim() == 2, "QuantizeFp8: a 2-D tensor, got ", t.dim(), " dimensions");
  const double max = Fp8Max(fp8);
  if (reduce_dim < 0 && !power_of_two_scales) {  // One pass for the amax, one to cast, on CUDA.
    const kernels::FusedKernels* cuda = t.is_cuda() ? kernels::CudaKernels() : nullptr;
    auto [data, inv_scale] = (cuda != nullptr ? *cuda : kernels::CompositeKernels()).QuantizeFp8Tensorwise(t, fp8);
    return {data, inv_scale};
  }
  at::NoGradGuard no_grad;
  at::Tensor amax = reduce_dim < 0 ? t.abs().max() : std::get<0>(t.abs().max(reduce_dim, /*keepdim=*/true));
  // As torchao: the scale in double, then fp32.
  at::Tensor scale = (max / amax.to(at::kDouble).clamp_min(kAmaxFloor)).to(at::kFloat);
  if (power_of_two_scales) scale = at::exp2(at::floor(at::log2(scale)));
  at::Tensor q = (t.to(at::kFloat) * scale).clamp(-max, max).to(fp8);
  return {q, scale.reciprocal()};
}

at::Tensor EmulatedScaledMatmul(const Fp8Tensor& a, const Fp8Tensor& b, at::ScalarType out_dtype) {
  at::NoGradGuard no_grad;
  return at::mm(a.data.to(at::kFloat) * a.inv_scale, b.data.to(at::kFloat) * b.inv_scale).to(out_dtype);
}

at::Tensor ScaledMatmul(const Fp8Tensor& a, const Fp8Tensor& b, at::ScalarType out_dtype) {
  return ScaledMatmulAccumulating(a, b, out_dtype, /*fast_accum=*/false);
}

namespace {

at::Tensor ScaledMatmulAccumulating(const Fp8Tensor& a, const Fp8Tensor& b, at::ScalarType out_dtype, bool fast_accum) {
  // On the CPU the product of the scaled operands in fp32, rounded once: what torch's own CPU fallback
  // for _scaled_mm computes. torch 2.11's CPU _scaled_mm takes oneDNN's FP8 path on CPUs that have
  // AVX512-FP16/AMX, which was 400x slower than a bf16 GEMM of the same shape and 1.6e-3 (relative) off
  // the fp32 product on a Xeon (Sapphire Rapids; measured in the 39th session), so it is not called.
  if (!a.data.is_cuda() || !ScaledMmTakes(a, b, out_dtype)) return EmulatedScaledMatmul(a, b, out_dtype);
  at::Tensor lhs = a.data.contiguous();
  at::Tensor rhs = ColumnMajor(b.data) ? b.data : b.data.t().contiguous().t();
  at::Tensor sa = a.inv_scale.numel() == 1 ? a.inv_scale.reshape({}) : a.inv_scale.contiguous();
  at::Tensor sb = b.inv_scale.numel() == 1 ? b.inv_scale.reshape({}) : b.inv_scale.contiguous();
  return at::_scaled_mm(lhs, rhs, sa, sb, std::nullopt, std::nullopt, out_dtype, fast_accum);
}

}  // namespace

bool Fp8Applies(const at::Tensor& x, const at::Tensor& w, const Fp8Options& options) {
  if (x.scalar_type() != at::kBFloat16 && x.scalar_type() != at::kHalf) return false;
  if (w.dim() != 2 || x.dim() < 1) return false;
  const int64_t n = w.size(0), k = w.size(1);
  if (n < options.min_dim || k < options.min_dim || n % 16 != 0 || k % 16 != 0) return false;
  const int64_t rows = k == 0 ? 0 : x.numel() / k;
  return rows > 0 && rows % 16 == 0;
}

at::Tensor Fp8Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const Fp8Options& options) {
  const bool grad_mode = at::GradMode::is_enabled();
  const int64_t grads =
      (grad_mode && x.requires_grad() ? kGradInput : 0) | (grad_mode && w.requires_grad() ? kGradWeight : 0);
  at::Tensor y = Fp8LinearFn::apply(x, w, static_cast<int64_t>(options.recipe), grads);
  return b.defined() ? y + b : y;
}

}  // namespace tessera::parallel
