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
// Packed sequences and shared prefixes: `ends` [B, T] (the whole sequence's, on every rank;
// PositionSpanEnds) gives each key the end of the span of queries that may see it; a query attends
// only to earlier keys whose span holds it (Decoder::set_positions). Undefined: plain causal attention.
#ifndef TESSERA_PARALLEL_SEQUENCE_SEQUENCE_ATTENTION_H_
#define TESSERA_PARALLEL_SEQUENCE_SEQUENCE_ATTENTION_H_

#include <ATen/core/Tensor.h>

#include "layout/modes.h"
#include "parallel/comm/communicator.h"

namespace tessera::parallel {

using layout::SpMode;  // kRing or kAllToAll.

at::Tensor RingSelfAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, Communicator* sp,
                             const at::Tensor& ends = {});
at::Tensor UlyssesSelfAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, Communicator* sp,
                                const at::Tensor& ends = {});

inline at::Tensor SequenceParallelAttention(SpMode mode, const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v, Communicator* sp, const at::Tensor& ends = {}) {
  return mode == SpMode::kRing ? RingSelfAttention(q, k, v, sp, ends) : UlyssesSelfAttention(q, k, v, sp, ends);
}

// The attention spans of tokens at `positions` [B, T] (int64, any device): for each index k, the first
// later index j whose position is at most k's, or T — [B, T] int64 on positions' device. The tokens at
// k .. end−1 are k's descendants in the tree the positions draw: a token's parent is the nearest
// earlier token with a smaller position. So packed sequences (each restarting at position 0) are
// separate runs, and a row that continues a prefix twice (a prompt at 0 .. P−2, then one completion
// from position P−1, then another from P−1 again: DPO's shared-prompt rows) lets both completions
// see the prefix and neither see the other.
at::Tensor PositionSpanEnds(const at::Tensor& positions);

// Which keys each query may see: [B, 1, Tq, Tk] (true: allowed) for queries at indices
// [q_first, q_first + Tq) and keys at [k_first, k_first + Tk) of rows whose spans are `ends` [B, T]
// (PositionSpanEnds): the key at or before the query, the query before the key's end.
at::Tensor SpanCausalMask(const at::Tensor& ends, int64_t q_first, int64_t Tq, int64_t k_first, int64_t Tk);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_SEQUENCE_SEQUENCE_ATTENTION_H_
