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
// A rank sends its outputs without waiting for the receiver and waits only for its inputs; under that
// rule every schedule here completes (SimulateSchedule checks it).
#ifndef TESSERA_LAYOUT_SCHEDULE_H_
#define TESSERA_LAYOUT_SCHEDULE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "layout/modes.h"

namespace tessera::layout {

enum class PipeOp { kForward, kBackward };

struct PipeAction {
  PipeOp op = PipeOp::kForward;
  int micro_batch = 0;
  int chunk = 0;  // Local chunk index on the rank (virtual stage chunk·pp + rank).
  bool operator==(const PipeAction& o) const {
    return op == o.op && micro_batch == o.micro_batch && chunk == o.chunk;
  }
};

// The actions of pipeline rank `rank` of `pp` for `micro_batches` micro-batches. kInterleaved needs
// chunks ≥ 2 and micro_batches a multiple of pp; kOneFOneB needs chunks == 1.
absl::StatusOr<std::vector<PipeAction>> MakeSchedule(PipeSchedule schedule, int pp, int chunks, int rank,
                                                     int micro_batches);

// Runs every rank's actions in a model where a forward of virtual stage s waits for the forward of
// s-1 of the same micro-batch, a backward for its own forward and for the backward of s+1, and a
// rank runs one action at a time: forward costs `forward_cost`, backward `backward_cost` (per chunk).
struct SimulatedStep {
  bool completes = false;  // False: some rank waits forever (a deadlock).
  double makespan = 0;     // Time until the last action finished.
  double bubble = 0;       // 1 − busy time / (pp · makespan).
  std::vector<int> peak_in_flight;  // Per rank: most micro-batch chunks forwarded, not yet backwarded.
};
SimulatedStep SimulateSchedule(const std::vector<std::vector<PipeAction>>& per_rank, int chunks,
                               double forward_cost, double backward_cost);

}  // namespace tessera::layout

#endif  // TESSERA_LAYOUT_SCHEDULE_H_
