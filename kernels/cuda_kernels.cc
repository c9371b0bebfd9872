// The CUDA implementation of FusedKernels: checks arguments, launches kernels/cuda on the current
// stream of the tensors' device, and turns CUDA errors into c10::Error (which the rank process reports
// as one line). Registers itself at start-up; link //kernels:cuda_kernels to have it.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cmath>
#include <cstring>

#include "kernels/cuda/launch.h"
#include "kernels/fused_kernels.h"

namespace tessera::kernels {
namespace {

cuda::DType ToDType(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return cuda::DType::kFloat;
    case at::kHalf: return cuda::DType::kHalf;
    case at::kBFloat16: return cuda::DType::kBFloat16;
    default: TORCH_CHECK(false, "fused kernels take float, half or bfloat16 tensors, not ", t.scalar_type());
  }
  return cuda::DType::kFloat;
}

void Check(cudaError_t e, const char* what) {
  TORCH_CHECK(e == cudaSuccess, what, " failed: ", cudaGetErrorString(e));
}

void CheckSame(const at::Tensor& a, const at::Tensor& b, const char* what) {
  TORCH_CHECK(a.is_cuda() && b.device() == a.device(), what, ": tensors must be on the same CUDA device");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), what, ": dtypes differ (", a.scalar_type(), " vs ",
              b.scalar_type(), ")");
  TORCH_CHECK(a.is_contiguous() && b.is_contiguous(), what, ": tensors must be contiguous");
}

cudaStream_t StreamOf(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

class Cuda final : public FusedKernels {
 public:
  const char* name() const override { return "cuda"; }

  LayerNormResult LayerNormForward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                   double eps) const override {
    CheckSame(x, weight, "layer_norm");
    CheckSame(x, bias, "layer_norm");
    const int64_t h = x.size(-1);
    TORCH_CHECK(weight.numel() == h && bias.numel() == h, "layer_norm: weight and bias need ", h, " elements");
    c10::cuda::CUDAGuard guard(x.device());
    const int64_t rows = x.numel() / h;
    at::Tensor y = at::empty_like(x);
    at::Tensor mean = at::empty({rows}, x.options().dtype(at::kFloat));
    at::Tensor rstd = at::empty({rows}, x.options().dtype(at::kFloat));
    Check(cuda::LayerNormForward(ToDType(x), x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(),
                                 mean.data_ptr<float>(), rstd.data_ptr<float>(), rows, h, static_cast<float>(eps),
                                 StreamOf(x)),
          "layer_norm forward kernel");
    return {y, mean, rstd};
  }

  LayerNormGrads LayerNormBackward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean,
                                   const at::Tensor& rstd, const at::Tensor& weight) const override {
    CheckSame(x, dy, "layer_norm backward");
    CheckSame(x, weight, "layer_norm backward");
    c10::cuda::CUDAGuard guard(x.device());
    const int64_t h = x.size(-1);
    const int64_t rows = x.numel() / h;
    at::Tensor dx = at::empty_like(x);
    const int64_t parts = cuda::LayerNormPartialRows(rows);
    at::Tensor dw_partial = at::empty({parts, h}, x.options().dtype(at::kFloat));
    at::Tensor db_partial = at::empty({parts, h}, x.options().dtype(at::kFloat));
    Check(cuda::LayerNormBackward(ToDType(x), dy.data_ptr(), x.data_ptr(), mean.data_ptr<float>(),
                                  rstd.data_ptr<float>(), weight.data_ptr(), dx.data_ptr(),
                                  dw_partial.data_ptr<float>(), db_partial.data_ptr<float>(), rows, h, StreamOf(x)),
          "layer_norm backward kernel");
    return {dx, dw_partial.sum(0), db_partial.sum(0)};
  }

  at::Tensor BiasGeluForward(const at::Tensor& x, const at::Tensor& bias) const override {
    CheckSame(x, bias, "bias_gelu");
    TORCH_CHECK(bias.numel() == x.size(-1), "bias_gelu: bias needs ", x.size(-1), " elements");
    c10::cuda::CUDAGuard guard(x.device());
    at::Tensor y = at::empty_like(x);
    Check(cuda::BiasGeluForward(ToDType(x), x.data_ptr(), bias.data_ptr(), y.data_ptr(), x.numel(), bias.numel(),
                                StreamOf(x)),
          "bias_gelu forward kernel");
    return y;
  }

  at::Tensor BiasGeluBackward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& bias) const override {
    CheckSame(x, dy, "bias_gelu backward");
    CheckSame(x, bias, "bias_gelu backward");
    c10::cuda::CUDAGuard guard(x.device());
    at::Tensor du = at::empty_like(x);
    Check(cuda::BiasGeluBackward(ToDType(x), dy.data_ptr(), x.data_ptr(), bias.data_ptr(), du.data_ptr(), x.numel(),
                                 bias.numel(), StreamOf(x)),
          "bias_gelu backward kernel");
    return du;
  }

  at::Tensor CausalSoftmaxForward(const at::Tensor& scores, double scale) const override {
    CheckSame(scores, scores, "causal_softmax");
    const int64_t t = scores.size(-1);
    TORCH_CHECK(scores.dim() >= 2 && scores.size(-2) == t, "causal_softmax: scores must be [..., T, T]");
    c10::cuda::CUDAGuard guard(scores.device());
    at::Tensor y = at::empty_like(scores);
    Check(cuda::CausalSoftmaxForward(ToDType(scores), scores.data_ptr(), y.data_ptr(), scores.numel() / (t * t), t,
                                     static_cast<float>(scale), StreamOf(scores)),
          "causal_softmax forward kernel");
    return y;
  }

  at::Tensor CausalSoftmaxBackward(const at::Tensor& dy, const at::Tensor& y, double scale) const override {
    CheckSame(y, dy, "causal_softmax backward");
    const int64_t t = y.size(-1);
    c10::cuda::CUDAGuard guard(y.device());
    at::Tensor dx = at::empty_like(y);
    Check(cuda::CausalSoftmaxBackward(ToDType(y), dy.data_ptr(), y.data_ptr(), dx.data_ptr(), y.numel() / (t * t), t,
                                      static_cast<float>(scale), StreamOf(y)),
          "causal_softmax backward kernel");
    return dx;
  }

  SoftmaxStats CrossEntropyForward(const at::Tensor& logits) const override {
    CheckSame(logits, logits, "cross_entropy");
    TORCH_CHECK(logits.dim() == 2, "cross_entropy: logits must be [rows, v]");
    const int64_t rows = logits.size(0), v = logits.size(1);
    TORCH_CHECK(rows < (int64_t{1} << 31), "cross_entropy: ", rows, " rows exceed one launch");
    c10::cuda::CUDAGuard guard(logits.device());
    at::Tensor max = at::empty({rows}, logits.options().dtype(at::kFloat));
    at::Tensor sum_exp = at::empty({rows}, logits.options().dtype(at::kFloat));
    Check(cuda::CrossEntropyForward(ToDType(logits), logits.data_ptr(), max.data_ptr<float>(),
                                    sum_exp.data_ptr<float>(), rows, v, StreamOf(logits)),
          "cross_entropy forward kernel");
    return {max, sum_exp};
  }

  at::Tensor CrossEntropyBackward(const at::Tensor& logits, const at::Tensor& lse, const at::Tensor& target,
                                  const at::Tensor& dloss) const override {
    CheckSame(logits, logits, "cross_entropy backward");
    TORCH_CHECK(logits.dim() == 2, "cross_entropy backward: logits must be [rows, v]");
    const int64_t rows = logits.size(0), v = logits.size(1);
    TORCH_CHECK(rows < (int64_t{1} << 31), "cross_entropy backward: ", rows, " rows exceed one launch");
    for (const at::Tensor* t : {&lse, &target, &dloss}) {
      TORCH_CHECK(t->device() == logits.device() && t->is_contiguous() && t->numel() == rows,
                  "cross_entropy backward: lse, target and dloss must be contiguous [", rows, "] on ",
                  logits.device());
    }
    TORCH_CHECK(lse.scalar_type() == at::kFloat && dloss.scalar_type() == at::kFloat &&
                    target.scalar_type() == at::kLong,
                "cross_entropy backward: lse and dloss fp32, target int64");
    c10::cuda::CUDAGuard guard(logits.device());
    at::Tensor dlogits = at::empty_like(logits);
    Check(cuda::CrossEntropyBackward(ToDType(logits), logits.data_ptr(), lse.data_ptr<float>(),
                                     target.data_ptr<int64_t>(), dloss.data_ptr<float>(), dlogits.data_ptr(), rows,
                                     v, StreamOf(logits)),
          "cross_entropy backward kernel");
    return dlogits;
  }

  std::pair<at::Tensor, at::Tensor> QuantizeFp8Tensorwise(const at::Tensor& x_in, at::ScalarType fp8) const override {
    TORCH_CHECK(fp8 == at::kFloat8_e4m3fn || fp8 == at::kFloat8_e5m2, "quantize_fp8: ", fp8, " is not an FP8 type");
    if (x_in.numel() == 0) return CompositeKernels().QuantizeFp8Tensorwise(x_in, fp8);
    at::Tensor x = x_in.contiguous();
    CheckSame(x, x, "quantize_fp8");
    c10::cuda::CUDAGuard guard(x.device());
    at::Tensor out = at::empty(x.sizes(), x.options().dtype(fp8));
    // Two allocations: cuBLASLt refuses a scale pointer that is not at the start of an allocation's
    // alignment (an inv_scale viewed at offset 1 of one buffer gave CUBLAS_STATUS_NOT_SUPPORTED).
    at::Tensor amax = at::empty({}, x.options().dtype(at::kFloat));
    at::Tensor inv_scale = at::empty({}, x.options().dtype(at::kFloat));
    Check(cuda::QuantizeFp8Tensorwise(ToDType(x), x.data_ptr(), out.data_ptr(), amax.data_ptr<float>(),
                                      inv_scale.data_ptr<float>(), x.numel(), fp8 == at::kFloat8_e5m2, StreamOf(x)),
          "quantize_fp8 kernels");
    return {out, inv_scale};
  }

  Fp8Transposed QuantizeFp8TensorwiseTransposed(const at::Tensor& x_in, at::ScalarType fp8) const override {
    TORCH_CHECK(fp8 == at::kFloat8_e4m3fn || fp8 == at::kFloat8_e5m2, "quantize_fp8_transposed: ", fp8,
                " is not an FP8 type");
    TORCH_CHECK(x_in.dim() == 2, "quantize_fp8_transposed: a 2-D tensor, got ", x_in.dim(), " dimensions");
    if (!x_in.is_cuda() || (x_in.scalar_type() != at::kHalf && x_in.scalar_type() != at::kBFloat16)) {
      return CompositeKernels().QuantizeFp8TensorwiseTransposed(x_in, fp8);
    }
    at::Tensor x = x_in.contiguous();
    const int64_t rows = x.size(0), cols = x.size(1);
    c10::cuda::CUDAGuard guard(x.device());
    at::Tensor out = at::empty({rows, cols}, x.options().dtype(fp8));
    at::Tensor out_t = at::empty({cols, rows}, x.options().dtype(fp8));
    if (!cuda::CanQuantizeFp8Transposed(ToDType(x), x.data_ptr(), out.data_ptr(), out_t.data_ptr(),
                                                        rows, cols)) {
      return CompositeKernels().QuantizeFp8TensorwiseTransposed(x_in, fp8);  // Unaligned or odd shapes.
    }
    at::Tensor amax = at::empty({}, x.options().dtype(at::kFloat));
    at::Tensor inv_scale = at::empty({}, x.options().dtype(at::kFloat));  // Its own allocation: see above.
    Check(cuda::QuantizeFp8TensorwiseTransposed(ToDType(x), x.data_ptr(), out.data_ptr(), out_t.data_ptr(),
                                                amax.data_ptr<float>(), inv_scale.data_ptr<float>(), rows, cols,
                                                fp8 == at::kFloat8_e5m2, StreamOf(x)),
          "quantize_fp8_transposed kernels");
    return {out, out_t, inv_scale};
  }

  void AdamW(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
             const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
             const AdamWStep& s) const override {
    if (params.empty()) return;
    TORCH_CHECK(grads.size() == params.size() && exp_avgs.size() == params.size() &&
                    exp_avg_sqs.size() == params.size(),
                "adamw: tensor lists differ in length");
    const at::Device device = params[0].device();
    c10::cuda::CUDAGuard guard(device);
    // Host tables: the tensors, then for every chunk its tensor index and first element.
    std::vector<cuda::AdamWTensor> tensors;
    std::vector<int32_t> chunk_tensor;
    std::vector<int64_t> chunk_start;
    for (size_t i = 0; i < params.size(); ++i) {
      for (const at::Tensor* t : {&params[i], &grads[i], &exp_avgs[i], &exp_avg_sqs[i]}) {
        TORCH_CHECK(t->device() == device && t->scalar_type() == at::kFloat && t->is_contiguous() &&
                        t->numel() == params[i].numel(),
                    "adamw: tensor ", i, " must be contiguous fp32 on ", device, " and shaped as its parameter");
      }
      tensors.push_back({params[i].data_ptr<float>(), grads[i].data_ptr<float>(), exp_avgs[i].data_ptr<float>(),
                         exp_avg_sqs[i].data_ptr<float>(), params[i].numel()});
      for (int64_t start = 0; start < params[i].numel(); start += cuda::kAdamWChunk) {
        chunk_tensor.push_back(static_cast<int32_t>(i));
        chunk_start.push_back(start);
      }
    }
    // One device buffer: [tensors | chunk_start | chunk_tensor], copied from pinned memory on the stream.
    const int64_t tensor_bytes = static_cast<int64_t>(tensors.size() * sizeof(cuda::AdamWTensor));
    const int64_t start_bytes = static_cast<int64_t>(chunk_start.size() * sizeof(int64_t));
    const int64_t index_bytes = static_cast<int64_t>(chunk_tensor.size() * sizeof(int32_t));
    at::Tensor host = at::empty({tensor_bytes + start_bytes + index_bytes},
                                at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    uint8_t* h = host.data_ptr<uint8_t>();
    std::memcpy(h, tensors.data(), tensor_bytes);
    std::memcpy(h + tensor_bytes, chunk_start.data(), start_bytes);
    std::memcpy(h + tensor_bytes + start_bytes, chunk_tensor.data(), index_bytes);
    at::Tensor table = host.to(device, /*non_blocking=*/true);
    const uint8_t* d = table.data_ptr<uint8_t>();
    const double bias_correction1 = 1 - std::pow(s.beta1, static_cast<double>(s.step));
    const double bias_correction2 = 1 - std::pow(s.beta2, static_cast<double>(s.step));
    cuda::AdamWScalars scalars{static_cast<float>(1 - s.lr * s.weight_decay),
                               static_cast<float>(1 - s.beta1),
                               static_cast<float>(s.beta2),
                               static_cast<float>(1 - s.beta2),
                               static_cast<float>(s.lr / bias_correction1),
                               static_cast<float>(std::sqrt(bias_correction2)),
                               static_cast<float>(s.eps)};
    Check(cuda::MultiTensorAdamW(reinterpret_cast<const cuda::AdamWTensor*>(d),
                                 reinterpret_cast<const int32_t*>(d + tensor_bytes + start_bytes),
                                 reinterpret_cast<const int64_t*>(d + tensor_bytes),
                                 static_cast<int64_t>(chunk_start.size()), scalars, StreamOf(params[0])),
          "multi-tensor adamw kernel");
    // ATen's non-blocking copy from pinned memory records itself with the caching host allocator, so
    // `host` is not reused before the copy ran.
  }
};

const bool registered = [] {
  static const Cuda kernels;
  RegisterCudaKernels(&kernels);
  return true;
}();

}  // namespace
}  // namespace tessera::kernels
