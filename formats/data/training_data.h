// TrainingData: what the trainer reads global samples from: one token stream (TokenDataset) or a
// blend of several (BlendSchedule picks the source; each source reads its own samples in its own
// window order, source s shuffled with seed data.seed + s·2^32).
#ifndef TESSERA_FORMATS_DATA_TRAINING_DATA_H_
#define TESSERA_FORMATS_DATA_TRAINING_DATA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/data/blend_schedule.h"
#include "formats/data/token_dataset.h"

namespace tessera::formats::data {

struct BlendSource {
  TokenDatasetOptions data;  // seq_len, vocab, shuffle are the job's; path, format, dtype the source's.
  double weight = 1;
};

class TrainingData {
 public:
  // `blend` empty: `data` alone. Otherwise the sources of the blend (`data` is not read).
  static absl::StatusOr<std::unique_ptr<TrainingData>> Open(const TokenDatasetOptions& data,
                                                            const std::vector<BlendSource>& blend);

  // The training data and the validation data of a job (validation null when there is none):
  // valid.path names a stream read in order (seq_len and vocab as `data`'s); valid_fraction > 0
  // holds out the tail of data (of each blend source; token_dataset.h, "Held-out tail"), the
  // validation tails blended by the same weights. Errors about the validation stream name data.valid_path.
  struct WithValidation {
    std::unique_ptr<TrainingData> train, valid;
  };
  static absl::StatusOr<WithValidation> OpenWithValidation(const TokenDatasetOptions& data,
                                                           const std::vector<BlendSource>& blend,
                                                           const TokenDatasetOptions& valid, double valid_fraction);

  // Appends the seq_len + 1 tokens of global sample g (an SFT dataset's encoding: token_dataset.h),
  // and with `positions` their positions (TokenDataset::Read).
  absl::Status Read(int64_t g, std::vector<int64_t>* out, std::vector<int64_t>* positions = nullptr);
  // Packed conversations (token_dataset.h "Packing"): the model needs the positions.
  bool packed() const { return sources_[0]->packed(); }
  // SFT datasets (token_dataset.h; a blend's sources are all SFT datasets or none): the samples are
  // conversations with untrained targets.
  bool sft() const { return sources_[0]->sft(); }
  // The trained targets of global sample g (seq_len for a token stream).
  absl::StatusOr<int64_t> TrainedTargets(int64_t g);

  // Where global sample g comes from: the source (0 without a blend), its sample number there, and
  // the window that sample reads.
  struct Origin {
    int source;
    int64_t source_sample;
    int64_t window;
  };
  absl::StatusOr<Origin> Locate(int64_t g);

  bool blended() const { return schedule_.has_value(); }
  int sources() const { return static_cast<int>(sources_.size()); }
  // The blend's per-source sample counts before global sample g (empty without a blend).
  absl::StatusOr<std::vector<int64_t>> BlendCountsAt(int64_t g);
  // Resumes the blend at g from a checkpoint's counts.
  absl::Status RestoreBlend(int64_t g, std::vector<int64_t> counts);

 private:
  std::vector<std::unique_ptr<TokenDataset>> sources_;
  std::optional<BlendSchedule> schedule_;
};

}  // namespace tessera::formats::data

#endif  // TESSERA_FORMATS_DATA_TRAINING_DATA_H_
