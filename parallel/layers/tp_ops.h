// Autograd-aware tensor-parallel communication (Megatron's f/g pairs) and the vocab-parallel layers
// of 1D tensor parallelism. Each forward op's backward is the conjugate collective:
//   CopyToTp:      forward identity,   backward all-reduce (sum) over tp.
//   ReduceFromTp:  forward all-reduce, backward identity.
// `tp` must outlive the autograd graph built with it. Failures inside throw c10::Error.
#ifndef TESSERA_PARALLEL_LAYERS_TP_OPS_H_
#define TESSERA_PARALLEL_LAYERS_TP_OPS_H_

#include <ATen/core/Tensor.h>

#include "kernels/fused_kernels.h"
#include "parallel/comm/communicator.h"

namespace tessera::parallel {

at::Tensor CopyToTp(const at::Tensor& x, Communicator* tp);
at::Tensor ReduceFromTp(const at::Tensor& x, Communicator* tp);

// Embedding whose rows [vocab_start, vocab_start + weight.size(0)) live on this rank: looks up the
// tokens in range, zeros the rest, and sums over tp so every rank gets the full embedding.
at::Tensor VocabParallelEmbedding(const at::Tensor& tokens, const at::Tensor& weight,
                                  int64_t vocab_start, Communicator* tp);

// Per-token cross-entropy from logits split along the vocabulary: `logits` [N, V/tp] holds columns
// [vocab_start, vocab_start + V/tp); `targets` [N] are global ids. Returns [N] losses, identical on
// every tp rank; the full logits are never gathered. Softmax max and sum are reduced over tp.
// Without `kernels`, ATen operations in the logits' dtype (the caller passes fp32 logits), saving the
// softmax for backward; with them (kernels/fused_kernels.h), one read of the logits per pass in their
// own dtype with fp32 arithmetic, fp32 losses, and a gradient in the logits' dtype.
at::Tensor VocabParallelCrossEntropy(const at::Tensor& logits, const at::Tensor& targets,
                                     int64_t vocab_start, Communicator* tp,
                                     const kernels::FusedKernels* kernels = nullptr);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_LAYERS_TP_OPS_H_
