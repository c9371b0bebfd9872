// CheckLayout: whether a parallel layout can run a model at a batch size on a device kind — every
// rule written once (divisibility of heads, hidden, vocabulary, sequence and batch by what each axis
// and mode splits; grid shapes; pipeline stages, chunks and schedules; experts and ep | dp; LoRA's
// and FP8's layouts; what this build runs on CUDA). The spec's validation, the planner, the Trainer,
// the Decoder, the stage layout and the schedules all ask it; none keeps a copy, so the planner
// proposes only layouts that validation accepts (client/auto_layout_test.cc). Each problem names
// the spec field to change. No torch.
//
// Sizes are checked for being ≥ 1 here; upper bounds (security limits on user input) are the spec
// validation's (spec/limits.h). Every product is formed in 64 bits.
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

// What the ranks compute on and in, and what they compute: the rules of what this build runs where.
struct Target {
  DeviceKind device = DeviceKind::kCpu;
  bool fp8 = false;  // train.precision fp8: the 1D layers' FP8 GEMMs (parallel/layers/fp8_linear.h).
  // train.objective: DPO and reward models train a Mixture of Experts without its balancing loss
  // (model.aux_loss_coef 0; TRL's leaves padding out, tessera's routers count it).
  Objective objective = Objective::kCrossEntropy;
};

struct LayoutProblem {
  std::string field;    // The spec field, e.g. "parallel.tp" or "model.heads".
  std::string message;  // What is wrong with it, with the values involved.
};

// Every problem of running `model` with `layout` at `batch` on `target`; empty when it can run.
std::vector<LayoutProblem> LayoutProblems(const ModelConfig& model, const ParallelLayout& layout,
                                          const BatchShape& batch, const Target& target = {});

// OK, or InvalidArgument whose message lists the problems as "field: message" lines.
absl::Status CheckLayout(const ModelConfig& model, const ParallelLayout& layout, const BatchShape& batch,
                         const Target& target = {});

// The axes' rules alone: every size ≥ 1, ep ≥ 1 dividing dp; as the rank generator's contract.
std::vector<LayoutProblem> AxisProblems(const ParallelLayout& layout);

// The tensor parallel rules alone (the model's side of them: heads, key/value heads, hidden, MLP width
// and vocabulary over `tp` ranks in `mode`; micro_batch over a grid's sample split unless it is 0;
// LoRA's adapters in 1D only), as the Decoder's contract.
std::vector<LayoutProblem> TensorParallelProblems(const ModelConfig& model, TpMode mode, int tp, int tp_depth,
                                                  int64_t micro_batch);

// The schedule rules alone: pp_chunks for `schedule` (≥ 1; interleaved ≥ 2; zbv exactly 2; the others
// 1) and, when micro_batches (per step, per rank) is ≥ 1 and pp > 1, interleaved's micro-batches a
// multiple of pp; as the schedules' contract (MakeSchedule, StageLayout).
std::vector<LayoutProblem> ScheduleProblems(PipeSchedule schedule, int pp, int chunks, int64_t micro_batches);

// The stage rules alone: pp·chunks virtual stages over `layers` blocks, each with at least one,
// `pp_layers` (when not empty) one count per virtual stage summing to `layers`; as StageLayout's
// contract.
std::vector<LayoutProblem> StageProblems(int layers, int pp, int chunks, const std::vector<int>& pp_layers);

// "field: message" lines of `problems`, InvalidArgument; OK when empty.
absl::Status ToStatus(const std::vector<LayoutProblem>& problems);

}  // namespace tessera::layout

#endif  // TESSERA_LAYOUT_CHECK_LAYOUT_H_
