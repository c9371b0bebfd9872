// Which source each global sample of a blend comes from (docs/data-format.md, "Blends").
//
// With weights w_s normalised to sum 1 and c_s(g) the number of samples of source s among samples
// 0 .. g-1, sample g comes from the source with the largest w_s·(g + 1) − c_s(g) (the lowest s on a
// tie), and is that source's sample number c_s(g). Every prefix of the blend is as close to the
// weights as whole samples allow, and the sequence is a pure function of the weights: it does not
// depend on dp, tp or where a run stopped. A schedule can start from saved counts (a checkpoint's)
// and only moves forward, keeping a few snapshots to step back within recent samples.
#ifndef TESSERA_FORMATS_DATA_BLEND_SCHEDULE_H_
#define TESSERA_FORMATS_DATA_BLEND_SCHEDULE_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::formats::data {

struct BlendPick {
  int source;
  int64_t sample;  // The source's own sample number.
};

class BlendSchedule {
 public:
  // Fails unless there is at least one weight and every weight is positive and finite.
  static absl::StatusOr<BlendSchedule> Create(std::vector<double> weights);

  // Starts the schedule at global sample `g` with `counts` samples already taken from each source
  // (a checkpoint's). Fails when the counts do not sum to g or their number differs.
  absl::Status Restore(int64_t g, std::vector<int64_t> counts);

  // The pick for global sample g (g at or after the restored position).
  absl::StatusOr<BlendPick> Pick(int64_t g);

  // The counts before sample g: what a checkpoint at g saves.
  absl::StatusOr<std::vector<int64_t>> CountsAt(int64_t g);

  int sources() const { return static_cast<int>(weights_.size()); }

 private:
  explicit BlendSchedule(std::vector<double> weights);
  absl::Status SeekTo(int64_t g);
  int Choose(int64_t g) const;

  std::vector<double> weights_;
  int64_t base_ = 0;  // The restored position: nothing before it can be picked.
  std::vector<int64_t> base_counts_;
  int64_t at_ = 0;
  std::vector<int64_t> counts_;
  std::map<int64_t, std::vector<int64_t>> snapshots_;  // Recent positions' counts.
};

}  // namespace tessera::formats::data

#endif  // TESSERA_FORMATS_DATA_BLEND_SCHEDULE_H_
