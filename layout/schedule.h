// Pipeline schedules: the order in which one pipeline rank runs the forward and backward passes of
// the micro-batches of one step. No torch here.
//
//   1F1B         (PipeDream-Flush / Megatron): rank r runs min(pp-r-1, m) forwards, then alternates one
//                forward and one backward, then drains the backwards. At most pp-r micro-batches'
//                activations are alive on rank r. Bubble (pp-1)/(m+pp-1) of the step.
//   interleaved  (Megatron's interleaved 1F1B): every rank holds `chunks` model chunks (virtual stages
//                r, r+pp, …); forwards go through micro-batches in groups of pp per chunk. Needs m a
//                multiple of pp. Bubble (pp-1)/(chunks·m+pp-1) of the step, for more messages.
//
//   ZB-H1        (zero bubble, Qi et al. 2023; MakeZeroBubbleH1): the backward split into B (the input
//                gradient, which the previous stage waits for) and W (the weight gradient, which nothing
//                waits for); a rank runs a ready B first, then a forward within 1F1B's bound of
//                micro-batches in flight, and otherwise a deferred W — the W's fill what would be
//                bubbles. `zb1p`: MakeSchedule makes it with F = B = W (PipeCosts' defaults); the
//                pipeline runner splits each backward into B and W (parallel/layers/weight_grad_store.h).
//   ZB-V         (MakeZeroBubbleV; `zbv`): the same rule over two chunks per rank placed in a V
//                (StagePlacement::kV: rank r holds virtual stages r and 2·pp−1−r), so the first rank,
//                which holds both the embeddings and the loss, starts each micro-batch's backward
//                itself; at most 2·pp chunk activations alive per rank (half a stage each: 1F1B's
//                first rank's memory, on every rank).
//
// A rank sends its outputs without waiting for the receiver and waits only for its inputs; under that
// rule every schedule here completes (SimulateSchedule checks it).
#ifndef TESSERA_LAYOUT_SCHEDULE_H_
#define TESSERA_LAYOUT_SCHEDULE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "layout/modes.h"
#include "layout/stage_layout.h"

namespace tessera::layout {

// kBackward is the whole backward of a micro-batch's chunk, or only its input gradient (B) when the
// rank's actions also hold a kWeight (W: its weight gradient) for the same micro-batch and chunk.
enum class PipeOp { kForward, kBackward, kWeight };

struct PipeAction {
  PipeOp op = PipeOp::kForward;
  int micro_batch = 0;
  int chunk = 0;  // Local chunk index on the rank (its virtual stage: VirtualStageOf).
  bool operator==(const PipeAction& o) const {
    return op == o.op && micro_batch == o.micro_batch && chunk == o.chunk;
  }
};

// The actions of pipeline rank `rank` of `pp` for `micro_batches` micro-batches. kInterleaved needs
// chunks ≥ 2 and micro_batches a multiple of pp; kZeroBubbleV chunks == 2 (placed kV); kOneFOneB and
// kZeroBubbleH1 chunks == 1.
absl::StatusOr<std::vector<PipeAction>> MakeSchedule(PipeSchedule schedule, int pp, int chunks, int rank,
                                                     int micro_batches);

// The cost model of schedules: a forward, an input-gradient backward (B) and a weight-gradient
// backward (W) of one chunk of one micro-batch. A backward not split into B and W costs backward + weight.
struct PipeCosts {
  double forward = 1;
  double backward = 1;
  double weight = 1;
};

// ZB-H1's actions for every rank of `pp` (one chunk each) and `micro_batches` micro-batches, made by
// running the rule above on `costs`: per rank every F, B and W once; at most pp − rank micro-batches
// forwarded and not yet B'd (1F1B's activation bound); fewer than pp micro-batches B'd and not yet
// W'd when a forward starts (each keeps what its W needs: its linears' inputs and output gradients);
// every W after its B; the W's of the last micro-batch are the rank's last actions.
absl::StatusOr<std::vector<std::vector<PipeAction>>> MakeZeroBubbleH1(int pp, int micro_batches, const PipeCosts& costs);
// ZB-V's, two chunks per rank placed kV, by the same rule: per rank every F, B and W of both chunks
// once; at most 2·pp chunks forwarded and not yet B'd; fewer than 2·pp chunks B'd and not yet W'd
// when a forward starts; the W's of the last micro-batch (both chunks) are the rank's last actions.
absl::StatusOr<std::vector<std::vector<PipeAction>>> MakeZeroBubbleV(int pp, int micro_batches, const PipeCosts& costs);
// MakeZeroBubbleH1 or MakeZeroBubbleV by `schedule` (InvalidArgument for other schedules).
absl::StatusOr<std::vector<std::vector<PipeAction>>> MakeZeroBubbleSchedule(PipeSchedule schedule, int pp,
                                                                            int micro_batches, const PipeCosts& costs);
// Where `schedule` places the virtual stages: kV for zbv, kLoop otherwise.
StagePlacement PlacementOf(PipeSchedule schedule);

// Runs every rank's actions in a model where a forward of virtual stage s waits for the forward of
// s-1 of the same micro-batch, a backward for its own forward and for the backward of s+1, and a
// rank runs one action at a time: forward costs `forward_cost`, backward `backward_cost` (per chunk).
struct SimulatedStep {
  bool completes = false;  // False: some rank waits forever (a deadlock).
  double makespan = 0;     // Time until the last action finished.
  double bubble = 0;       // 1 − busy time / (pp · makespan).
  std::vector<int> peak_in_flight;  // Per rank: most micro-batch chunks forwarded, not yet (B-)backwarded.
  std::vector<int> peak_weight_pending;  // Per rank: most micro-batch chunks B'd, not yet W'd.
};
// With `costs`, a W waits for its own B on the same rank. `placement`: where the ranks' chunks sit.
SimulatedStep SimulateSchedule(const std::vector<std::vector<PipeAction>>& per_rank, int chunks, const PipeCosts& costs,
                               StagePlacement placement = StagePlacement::kLoop);
SimulatedStep SimulateSchedule(const std::vector<std::vector<PipeAction>>& per_rank, int chunks,
                               double forward_cost, double backward_cost);

}  // namespace tessera::layout

#endif  // TESSERA_LAYOUT_SCHEDULE_H_
