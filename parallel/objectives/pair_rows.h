// How preference objectives' micro-batches hold their pairs (DpoObjective, RewardObjective; the
// Trainer's preference rows): two rows a pair, or one shared-prompt row a pair — the prompt once,
// then both completions, positioned so that each completion attends to the prompt and to itself and
// never to the other (Decoder::set_positions, PositionSpanEnds) — and which completion each target of
// a shared-prompt row belongs to.
#ifndef TESSERA_PARALLEL_OBJECTIVES_PAIR_ROWS_H_
#define TESSERA_PARALLEL_OBJECTIVES_PAIR_ROWS_H_

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace tessera::parallel {

enum class PairRows {
  // Two samples a pair: prompt + chosen, then prompt + rejected. Any layout.
  kSeparate,
  // One sample a pair (WriteSharedPromptRow); the sample's whole targets on one part (no sequence
  // parallelism). The sample data's last column is the index of the rejected branch's first input in
  // the row: the targets of inputs before it are chosen's.
  kSharedPrompt,
};

// Which targets of a shared-prompt row are trained.
enum class PairTargets {
  kCompletions,  // DPO: every completion token (the log-probabilities summed over them).
  kLastTokens,   // A reward model: one per completion, the target after its last token (the score head's).
};

// A pair as a shared-prompt row of T = seq_len: its ids into row[0 .. 2T + 1] (filled with −1,
// padding, before; SFT data's encoding: an untrained target −id − 1) and, unless null, its inputs'
// positions into positions[0 .. 2T] (filled with 0 before). The prompt but its last token at
// positions 0 .. P − 2; each branch starts with a token at position P − 1 — the prompt's last, or
// without a prompt the completion's first (never scored: no position precedes it, as in TRL) —
// followed by the completion's tokens; so the rejected branch starts at index P + C. kLastTokens adds
// one entry, token 0, after the rejected completion (its last token's trained target). Needs each
// completion non-empty and, with the prompt, at most T + 1 tokens (kCompletions) or T (kLastTokens).
// Positions are capped at T − 1, which only a branch's last input can pass (kCompletions: its target
// is untrained and nothing attends to it).
void WriteSharedPromptRow(const std::vector<int32_t>& prompt, const std::vector<int32_t>& chosen,
                          const std::vector<int32_t>& rejected, int64_t T, PairTargets targets, int64_t* row,
                          int64_t* positions);

// The completion of each target `index` (into [samples · positions], int64, any shape) of a
// micro-batch in `rows` form: kSeparate its sample (chosen 2i, rejected 2i + 1 as the rows are);
// kSharedPrompt 2·row, or 2·row + 1 from the row's rejected start `starts` [samples] (any dtype
// holding integers) on. int64, shaped as index. Completions number 2 · pairs either way.
at::Tensor PairCompletionOf(const at::Tensor& index, int64_t positions, PairRows rows, const at::Tensor& starts);

// A micro-batch's sample data per pair (TargetLosses::sample_data), checked: kSeparate [samples], one
// value a sample (samples = 2 · pairs); kSharedPrompt [samples, 3], the pair's two values and its
// rejected start. Returns the two values a pair, [pairs, 2]; an error naming `who` unless so shaped.
at::Tensor PairValues(const at::Tensor& sample_data, int64_t samples, PairRows rows, const char* who);
// The rejected starts of kSharedPrompt sample data ([samples]); undefined for kSeparate.
at::Tensor PairStarts(const at::Tensor& sample_data, PairRows rows);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_OBJECTIVES_PAIR_ROWS_H_
