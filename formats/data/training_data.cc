#include "formats/data/training_data.h"

#include "absl/strings/str_cat.h"

namespace tessera::formats::data {

absl::StatusOr<std::unique_ptr<TrainingData>> TrainingData::Open(const TokenDatasetOptions& data,
                                                                  const std::vector<BlendSource>& blend) {
  std::unique_ptr<TrainingData> t(new TrainingData());
  if (blend.empty()) {
    auto ds = TokenDataset::Open(data);
    if (!ds.ok()) return ds.status();
    t->sources_.push_back(std::move(*ds));
    return t;
  }
  std::vector<double> weights;
  for (size_t s = 0; s < blend.size(); ++s) {
    TokenDatasetOptions o = blend[s].data;
    o.seed += static_cast<uint64_t>(s) << 32;
    auto ds = TokenDataset::Open(o);
    if (!ds.ok()) {
      return absl::Status(ds.status().code(), absl::StrCat("data.blend[", s, "]: ", ds.status().message()));
    }
    if (s > 0 && (*ds)->sft() != t->sources_[0]->sft()) {
      // The loss of a step is defined over trained targets or over every target, not both.
      return absl::InvalidArgumentError(absl::StrCat("data.blend[", s, "]: ", o.path, " is ",
                                                     (*ds)->sft() ? "an SFT dataset" : "not an SFT dataset",
                                                     " but data.blend[0] is ", (*ds)->sft() ? "not" : "one",
                                                     "; a blend is all conversations or all token streams"));
    }
    t->sources_.push_back(std::move(*ds));
    weights.push_back(blend[s].weight);
  }
  auto schedule = BlendSchedule::Create(std::move(weights));
  if (!schedule.ok()) return schedule.status();
  t->schedule_ = std::move(*schedule);
  return t;
}

absl::StatusOr<TrainingData::WithValidation> TrainingData::OpenWithValidation(const TokenDatasetOptions& data,
                                                                               const std::vector<BlendSource>& blend,
                                                                               const TokenDatasetOptions& valid,
                                                                               double valid_fraction) {
  WithValidation out;
  TokenDatasetOptions train_data = data;
  std::vector<BlendSource> train_blend = blend;
  if (valid_fraction > 0) {
    TokenDatasetOptions tail = data;
    std::vector<BlendSource> tail_blend = blend;
    tail.split = DataSplit::kValid;
    train_data.split = DataSplit::kTrain;
    tail.valid_fraction = train_data.valid_fraction = valid_fraction;
    for (size_t s = 0; s < blend.size(); ++s) {
      tail_blend[s].data.split = DataSplit::kValid;
      train_blend[s].data.split = DataSplit::kTrain;
      tail_blend[s].data.valid_fraction = train_blend[s].data.valid_fraction = valid_fraction;
    }
    auto v = Open(tail, tail_blend);
    if (!v.ok()) return v.status();
    out.valid = std::move(*v);
  } else if (!valid.path.empty()) {
    TokenDatasetOptions stream = valid;
    stream.seq_len = data.seq_len;
    stream.vocab = data.vocab;
    stream.shuffle = false;
    stream.packing = data.packing;  // Packed training validates on packed conversations.
    auto v = Open(stream, {});
    if (!v.ok()) return absl::Status(v.status().code(), absl::StrCat("data.valid_path: ", v.status().message()));
    out.valid = std::move(*v);
  }
  auto t = Open(train_data, train_blend);
  if (!t.ok()) return t.status();
  if (out.valid && out.valid->sft() != (*t)->sft()) {
    // The validation loss is defined as the training loss is: over trained targets, or every target.
    return absl::InvalidArgumentError(absl::StrCat("data.valid_path: ", valid.path, " is ",
                                                   out.valid->sft() ? "an SFT dataset" : "not an SFT dataset",
                                                   " but the training data is ", out.valid->sft() ? "not" : "one"));
  }
  out.train = std::move(*t);
  return out;
}

absl::StatusOr<int64_t> TrainingData::TrainedTargets(int64_t g) {
  if (!schedule_) return sources_[0]->TrainedTargets(g);
  auto pick = schedule_->Pick(g);
  if (!pick.ok()) return pick.status();
  return sources_[pick->source]->TrainedTargets(pick->sample);
}

absl::Status TrainingData::Read(int64_t g, std::vector<int64_t>* out, std::vector<int64_t>* positions) {
  if (!schedule_) return sources_[0]->Read(g, out, positions);
  auto pick = schedule_->Pick(g);
  if (!pick.ok()) return pick.status();
  return sources_[pick->source]->Read(pick->sample, out, positions);
}

absl::StatusOr<TrainingData::Origin> TrainingData::Locate(int64_t g) {
  if (g < 0) return absl::InvalidArgumentError("negative sample index");
  BlendPick pick{0, g};
  if (schedule_) {
    auto p = schedule_->Pick(g);
    if (!p.ok()) return p.status();
    pick = *p;
  }
  return Origin{pick.source, pick.sample, sources_[pick.source]->WindowOf(pick.sample)};
}

absl::StatusOr<std::vector<int64_t>> TrainingData::BlendCountsAt(int64_t g) {
  if (!schedule_) return std::vector<int64_t>();
  return schedule_->CountsAt(g);
}

absl::Status TrainingData::RestoreBlend(int64_t g, std::vector<int64_t> counts) {
  if (!schedule_) return absl::OkStatus();
  return schedule_->Restore(g, std::move(counts));
}

}  // namespace tessera::formats::data
