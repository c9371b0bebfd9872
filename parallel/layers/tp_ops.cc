#include "parallel/layers/tp_ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/autograd_pointer.h"

namespace tessera::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

Communicator* CommOf(AutogradContext* ctx) { return LoadPointer<Communicator>(ctx, "comm"); }

void SaveComm(AutogradContext* ctx, Communicator* comm) { SavePointer(ctx, "comm", comm); }

at::Tensor AllReduced(const at::Tensor& x, Communicator* comm, ReduceOp op = ReduceOp::kSum) {
  at::Tensor out = x.contiguous().clone();
  if (comm->size() > 1) ThrowIfError(comm->AllReduce(out, op));
  return out;
}

struct CopyToTpFn : public Function<CopyToTpFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Communicator* comm) {
    SaveComm(ctx, comm);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {AllReduced(grads[0], CommOf(ctx)), at::Tensor()};
  }
};

struct ReduceFromTpFn : public Function<ReduceFromTpFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Communicator* comm) {
    return AllReduced(x, comm);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

struct VocabParallelCrossEntropyFn : public Function<VocabParallelCrossEntropyFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            int64_t vocab_start, Communicator* comm) {
    const int64_t local_vocab = logits.size(1);
    at::Tensor max = std::get<0>(logits.max(1));
    if (comm->size() > 1) ThrowIfError(comm->AllReduce(max, ReduceOp::kMax));
    at::Tensor shifted = logits - max.unsqueeze(1);
    at::Tensor exp = shifted.exp();
    at::Tensor sum = AllReduced(exp.sum(1), comm);
    at::Tensor local = targets - vocab_start;
    at::Tensor in_range = (local >= 0).logical_and(local < local_vocab);
    at::Tensor index = local.clamp(0, local_vocab - 1);
    at::Tensor picked = shifted.gather(1, index.unsqueeze(1)).squeeze(1) * in_range.to(shifted.dtype());
    picked = AllReduced(picked, comm);
    at::Tensor loss = sum.log() - picked;
    ctx->save_for_backward({exp.div_(sum.unsqueeze(1)), index, in_range});
    return loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    at::Tensor grad = saved[0].clone();  // softmax
    grad.scatter_add_(1, saved[1].unsqueeze(1), -saved[2].to(grad.dtype()).unsqueeze(1));
    grad.mul_(grads[0].unsqueeze(1));
    return {grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The same losses with the fused kernels (kernels/fused_kernels.h): the statistics of this rank's
// slice are merged over tp (lse = M + log Σ_r s_r·exp(m_r − M)), and only the logits (in their own
// dtype), lse and the local targets are kept for backward — no fp32 copy, no saved softmax.
struct KernelCrossEntropyFn : public Function<KernelCrossEntropyFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            int64_t vocab_start, Communicator* comm, const kernels::FusedKernels* k) {
    at::Tensor x = logits.contiguous();
    const int64_t local_vocab = x.size(1);
    kernels::SoftmaxStats stats = k->CrossEntropyForward(x);
    at::Tensor max = stats.max, sum = stats.sum_exp;
    if (comm->size() > 1) {
      at::Tensor global = AllReduced(max, comm, ReduceOp::kMax);
      sum = AllReduced(sum * (max - global).exp(), comm);
      max = global;
    }
    at::Tensor lse = max + sum.log();
    at::Tensor local = targets - vocab_start;
    at::Tensor in_range = (local >= 0).logical_and(local < local_vocab);
    at::Tensor picked = x.gather(1, local.clamp(0, local_vocab - 1).unsqueeze(1)).squeeze(1).to(at::kFloat) *
                        in_range.to(at::kFloat);
    picked = AllReduced(picked, comm);
    SavePointer(ctx, "kernels", k);
    ctx->save_for_backward({x, lse, at::where(in_range, local, at::full_like(local, -1)).contiguous()});
    return lse - picked;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto* k = LoadPointer<const kernels::FusedKernels>(ctx, "kernels");
    at::Tensor dx = k->CrossEntropyBackward(saved[0], saved[1], saved[2], grads[0].to(at::kFloat).contiguous());
    return {dx, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor CopyToTp(const at::Tensor& x, Communicator* tp) {
  if (tp->size() == 1) return x;
  return CopyToTpFn::apply(x, tp);
}

at::Tensor ReduceFromTp(const at::Tensor& x, Communicator* tp) {
  if (tp->size() == 1) return x;
  return ReduceFromTpFn::apply(x, tp);
}

at::Tensor VocabParallelEmbedding(const at::Tensor& tokens, const at::Tensor& weight,
                                  int64_t vocab_start, Communicator* tp) {
  if (tp->size() == 1) return at::embedding(weight, tokens);
  at::Tensor local = tokens - vocab_start;
  at::Tensor in_range = (local >= 0).logical_and(local < weight.size(0));
  at::Tensor emb = at::embedding(weight, local.clamp(0, weight.size(0) - 1));
  emb = emb * in_range.unsqueeze(-1).to(emb.dtype());
  return ReduceFromTp(emb, tp);
}

at::Tensor VocabParallelCrossEntropy(const at::Tensor& logits, const at::Tensor& targets,
                                     int64_t vocab_start, Communicator* tp,
                                     const kernels::FusedKernels* kernels) {
  if (kernels != nullptr) return KernelCrossEntropyFn::apply(logits, targets, vocab_start, tp, kernels);
  return VocabParallelCrossEntropyFn::apply(logits, targets, vocab_start, tp);
}

}  // namespace tessera::parallel
