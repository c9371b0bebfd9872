#include "formats/data/blend_schedule.h"

#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace tessera::formats::data {
namespace {

constexpr int64_t kSnapshotEvery = 4096;
constexpr size_t kSnapshotsKept = 8;

}  // namespace

absl::StatusOr<BlendSchedule> BlendSchedule::Create(std::vector<double> weights) {
  if (weights.empty()) return absl::InvalidArgumentError("a blend needs at least one source");
  double total = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!(weights[i] > 0) || !std::isfinite(weights[i])) {
      return absl::InvalidArgumentError(absl::StrCat("blend weight ", i, " is ", weights[i], ", not a positive number"));
    }
    total += weights[i];
  }
  for (double& w : weights) w /= total;
  return BlendSchedule(std::move(weights));
}

BlendSchedule::BlendSchedule(std::vector<double> weights)
    : weights_(std::move(weights)), base_counts_(weights_.size(), 0), counts_(weights_.size(), 0) {}

absl::Status BlendSchedule::Restore(int64_t g, std::vector<int64_t> counts) {
  if (counts.size() != weights_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the saved blend has ", counts.size(), " sources, this one ",
                                                   weights_.size()));
  }
  int64_t sum = 0;
  for (int64_t c : counts) {
    if (c < 0) return absl::InvalidArgumentError("a saved blend count is negative");
    sum += c;
  }
  if (sum != g) {
    return absl::InvalidArgumentError(absl::StrCat("the saved blend counts sum to ", sum, ", not to the position ", g));
  }
  base_ = at_ = g;
  base_counts_ = counts_ = std::move(counts);
  snapshots_.clear();
  return absl::OkStatus();
}

int BlendSchedule::Choose(int64_t g) const {
  int best = 0;
  double best_error = -INFINITY;
  for (size_t s = 0; s < weights_.size(); ++s) {
    const double error = weights_[s] * static_cast<double>(g + 1) - static_cast<double>(counts_[s]);
    if (error > best_error) {
      best_error = error;
      best = static_cast<int>(s);
    }
  }
  return best;
}

absl::Status BlendSchedule::SeekTo(int64_t g) {
  if (g < base_) {
    return absl::OutOfRangeError(absl::StrCat("blend sample ", g, " is before the restored position ", base_));
  }
  if (g < at_) {
    // Back to the latest snapshot at or before g, else to the base.
    auto it = snapshots_.upper_bound(g);
    if (it == snapshots_.begin()) {
      at_ = base_;
      counts_ = base_counts_;
    } else {
      --it;
      at_ = it->first;
      counts_ = it->second;
    }
  }
  while (at_ < g) {
    ++counts_[Choose(at_)];
    ++at_;
    if (at_ % kSnapshotEvery == 0) {
      snapshots_[at_] = counts_;
      if (snapshots_.size() > kSnapshotsKept) snapshots_.erase(snapshots_.begin());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<BlendPick> BlendSchedule::Pick(int64_t g) {
  if (absl::Status s = SeekTo(g); !s.ok()) return s;
  const int source = Choose(g);
  return BlendPick{source, counts_[source]};
}

absl::StatusOr<std::vector<int64_t>> BlendSchedule::CountsAt(int64_t g) {
  if (absl::Status s = SeekTo(g); !s.ok()) return s;
  return counts_;
}

}  // namespace tessera::formats::data
