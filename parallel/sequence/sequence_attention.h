// Causal self-attention over a sequence split across the ranks of an sp group: rank r holds
// positions [r·Tl, (r+1)·Tl) of every sample. Both functions take this rank's q, k, v as
// [B, H, Tl, head_dim] and return its attention output [B, H, Tl, head_dim], equal (up to rounding)
// to the rows of causal attention over the whole sequence. Autograd-aware; communication failures
// throw c10::Error. `sp` must outlive the autograd graph.
//
//   ring        (Ring Self-Attention, the paper's sequence parallelism): keys and values travel around
//               the ring in sp−1 hops (the next block's transfer overlaps this block's compute); each
//               block updates a running (online) softmax — maximum, denominator and output. Blocks
//               from later positions are skipped (causal), the own block is masked. Backward
//               recomputes the probabilities from the saved log-sum-exp while keys, values and their
//               gradients travel again, the gradients ending at their owner. On the CPU each block
//               runs ATen's fused (flash) attention kernel, which returns its log-sum-exp, and blocks
//               merge by log-sum-exp (memory O(Tl) per block); elsewhere blocks are explicit
//               products (O(Tl·Tl)). Never O(T·T).
//   all_to_all  (DeepSpeed-Ulysses): an all-to-all turns the sequence split into a head split (each
//               rank gets all T positions of H/sp heads), attention runs locally, a second all-to-all
//               turns it back. Needs H % sp == 0.
//
// Packed sequences: `runs` [B, T] (the whole sequence's, on every rank) numbers the run each position
// belongs to; a query attends only to earlier keys of its own run (Decoder::set_positions). Undefined:
// plain causal attention.
#ifndef TESSERA_PARALLEL_SEQUENCE_SEQUENCE_ATTENTION_H_
#define TESSERA_PARALLEL_SEQUENCE_SEQUENCE_ATTENTION_H_

#include <ATen/core/Tensor.h>

#include "layout/modes.h"
#include "parallel/comm/communicator.h"

namespace tessera::parallel {

using layout::SpMode;  // kRing or kAllToAll.

at::Tensor RingSelfAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, Communicator* sp,
                             const at::Tensor& runs = {});
at::Tensor UlyssesSelfAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, Communicator* sp,
                                const at::Tensor& runs = {});

inline at::Tensor SequenceParallelAttention(SpMode mode, const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v, Communicator* sp, const at::Tensor& runs = {}) {
  return mode == SpMode::kRing ? RingSelfAttention(q, k, v, sp, runs) : UlyssesSelfAttention(q, k, v, sp, runs);
}

// Which keys each query may see: [B, 1, Tq, Tk] (true: allowed) for queries at positions
// [q_first, q_first + Tq) and keys at [k_first, k_first + Tk) of sequences numbered into runs by
// `runs` [B, T]: an earlier or the same position, in the same run.
at::Tensor RunCausalMask(const at::Tensor& runs, int64_t q_first, int64_t Tq, int64_t k_first, int64_t Tk);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_SEQUENCE_SEQUENCE_ATTENTION_H_
