#include "layout/modes.h"

#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::layout {
namespace {

constexpr std::array<std::pair<TpMode, const char*>, 4> kTpModes = {
    {{TpMode::k1D, "1d"}, {TpMode::k2D, "2d"}, {TpMode::k2p5D, "2.5d"}, {TpMode::k3D, "3d"}}};
constexpr std::array<std::pair<SpMode, const char*>, 2> kSpModes = {
    {{SpMode::kRing, "ring"}, {SpMode::kAllToAll, "all_to_all"}}};
constexpr std::array<std::pair<PipeSchedule, const char*>, 4> kSchedules = {{{PipeSchedule::kOneFOneB, "1f1b"},
                                                                            {PipeSchedule::kInterleaved, "interleaved"},
                                                                            {PipeSchedule::kZeroBubbleH1, "zb1p"},
                                                                            {PipeSchedule::kZeroBubbleV, "zbv"}}};
constexpr std::array<std::pair<Precision, const char*>, 3> kPrecisions = {
    {{Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}, {Precision::kFp16, "fp16"}}};

constexpr std::array<std::pair<Objective, const char*>, 4> kObjectives = {{{Objective::kCrossEntropy, "cross_entropy"},
                                                                          {Objective::kDpo, "dpo"},
                                                                          {Objective::kReward, "reward"},
                                                                          {Objective::kGrpo, "grpo"}}};

template <typename E, size_t N>
const char* NameIn(const std::array<std::pair<E, const char*>, N>& table, E value) {
  for (const auto& [e, name] : table) {
    if (e == value) return name;
  }
  return "?";  // Only a value cast from an integer no enumerator has.
}

template <typename E, size_t N>
absl::StatusOr<E> ParseIn(const std::array<std::pair<E, const char*>, N>& table, absl::string_view name,
                          absl::string_view what) {
  for (const auto& [e, n] : table) {
    if (name == n) return e;
  }
  std::vector<std::string> names;  // Only for the error.
  for (const auto& [e, n] : table) names.push_back(n);
  return absl::InvalidArgumentError(
      absl::StrCat(what, " \"", name.substr(0, 32), "\" is not one of ", absl::StrJoin(names, ", ")));
}

}  // namespace

const char* Name(Objective objective) { return NameIn(kObjectives, objective); }
const char* Name(TpMode mode) { return NameIn(kTpModes, mode); }
const char* Name(SpMode mode) { return NameIn(kSpModes, mode); }
const char* Name(PipeSchedule schedule) { return NameIn(kSchedules, schedule); }
const char* Name(Precision precision) { return NameIn(kPrecisions, precision); }
bool IsZeroBubble(PipeSchedule schedule) {
  return schedule == PipeSchedule::kZeroBubbleH1 || schedule == PipeSchedule::kZeroBubbleV;
}

absl::StatusOr<TpMode> ParseTpMode(absl::string_view name) { return ParseIn(kTpModes, name, "tp_mode"); }
absl::StatusOr<SpMode> ParseSpMode(absl::string_view name) { return ParseIn(kSpModes, name, "sp_mode"); }
absl::StatusOr<PipeSchedule> ParsePipeSchedule(absl::string_view name) {
  return ParseIn(kSchedules, name, "pp_schedule");
}
absl::StatusOr<Precision> ParsePrecision(absl::string_view name) { return ParseIn(kPrecisions, name, "precision"); }

absl::StatusOr<ZeroStage> ZeroStageOf(int stage) {
  if (stage < 0 || stage > 3) return absl::InvalidArgumentError(absl::StrCat("zero_stage ", stage, " must be 0, 1, 2 or 3"));
  return static_cast<ZeroStage>(stage);
}

}  // namespace tessera::layout
