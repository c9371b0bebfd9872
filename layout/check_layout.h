// CheckLayout: whether a parallel layout can run a model at a batch size — every rule written once
// (divisibility of heads, hidden, vocabulary, sequence and batch by what each axis and mode splits;
// grid shapes; pipeline stages and schedules). The spec's validation, the planner, the Trainer and the
// Decoder all ask it; none keeps a copy. Each problem names the spec field to change. No torch.
//
// Sizes are checked for being ≥ 1 here; upper bounds (security limits on user input) are the spec
// validation's (common/spec/limits.h). Every product is formed in 64 bits.
#ifndef TESSERA_LAYOUT_CHECK_LAYOUT_H_
#define TESSERA_LAYOUT_CHECK_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "layout/model_config.h"
#include "layout/parallel_layout.h"

namespace tessera::layout {

struct BatchShape {
  int64_t micro_batch = 1;   // Samples per forward/backward on one data-parallel rank.
  int64_t global_batch = 1;  // Samples per optimizer step: micro_batch × accumulation × dp.
};

// Micro-batches each data-parallel rank runs per optimizer step (the gradient accumulation count):
// global_batch / (micro_batch · dp). 0 when micro_batch · dp is not ≥ 1 or does not divide global_batch
// (LayoutProblems names that). The one place this is computed.
int64_t MicroBatchesPerStep(const BatchShape& batch, int64_t dp);

struct LayoutProblem {
  std::string field;    // The spec field, e.g. "parallel.tp" or "model.heads".
  std::string message;  // What is wrong with it, with the values involved.
};

// Every problem of running `model` with `layout` at `batch`; empty when it can run.
std::vector<LayoutProblem> LayoutProblems(const ModelConfig& model, const ParallelLayout& layout,
                                          const BatchShape& batch);

// OK, or InvalidArgument whose message lists the problems as "field: message" lines.
absl::Status CheckLayout(const ModelConfig& model, const ParallelLayout& layout, const BatchShape& batch);

// The tensor parallel rules alone (the model's side of them: heads, key/value heads, hidden, MLP width
// and vocabulary over `tp` ranks in `mode`; micro_batch over a grid's sample split unless it is 0),
// as the Decoder's contract.
std::vector<LayoutProblem> TensorParallelProblems(const ModelConfig& model, TpMode mode, int tp, int tp_depth,
                                                  int64_t micro_batch);

// "field: message" lines of `problems`, InvalidArgument; OK when empty.
absl::Status ToStatus(const std::vector<LayoutProblem>& problems);

}  // namespace tessera::layout

#endif  // TESSERA_LAYOUT_CHECK_LAYOUT_H_
