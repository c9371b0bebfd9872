#include "layout/stage_layout.h"

#include "absl/strings/str_cat.h"
#include "layout/check_layout.h"

namespace tessera::layout {

int VirtualStageOf(StagePlacement placement, int pp, int rank, int chunk) {
  if (placement == StagePlacement::kV) return chunk == 0 ? rank : 2 * pp - 1 - rank;
  return chunk * pp + rank;
}

absl::StatusOr<StageLayout> StageLayout::Create(int layers, int pp, int chunks,
                                                const std::vector<int>& layers_per_stage, StagePlacement placement) {
  if (pp < 1) return absl::InvalidArgumentError(absl::StrCat("parallel.pp: ", pp, " must be at least 1"));
  // The rules are CheckLayout's. The V is zbv's placement; round-robin is interleaved's (chunks ≥ 2)
  // and every other schedule's (one chunk).
  const PipeSchedule schedule = placement == StagePlacement::kV ? PipeSchedule::kZeroBubbleV
                                : chunks > 1                    ? PipeSchedule::kInterleaved
                                                                : PipeSchedule::kOneFOneB;
  std::vector<LayoutProblem> problems = ScheduleProblems(schedule, pp, chunks, /*micro_batches=*/0);
  if (problems.empty()) problems = StageProblems(layers, pp, chunks, layers_per_stage);
  if (absl::Status s = ToStatus(problems); !s.ok()) return s;
  if (layers < 1) return absl::InvalidArgumentError(absl::StrCat("model.layers: ", layers, " must be at least 1"));
  const int v = pp * chunks;
  std::vector<int> counts = layers_per_stage;
  if (counts.empty()) {
    for (int s = 0; s < v; ++s) counts.push_back(layers / v + (s < layers % v ? 1 : 0));
  }
  std::vector<ModelChunk> stages;
  int first = 0;
  for (int s = 0; s < v; ++s) {
    ModelChunk c;
    c.virtual_stage = s;
    c.first_layer = first;
    c.num_layers = counts[s];
    c.embedding = s == 0;
    c.head = s == v - 1;
    first += counts[s];
    stages.push_back(c);
  }
  return StageLayout(pp, chunks, placement, std::move(stages));
}

int StageLayout::RankOfStage(int s) const {
  if (placement_ == StagePlacement::kV) return s < pp_ ? s : 2 * pp_ - 1 - s;
  return s % pp_;
}

int StageLayout::ChunkOfStage(int s) const {
  if (placement_ == StagePlacement::kV) return s < pp_ ? 0 : 1;
  return s / pp_;
}

std::vector<ModelChunk> StageLayout::ChunksOf(int rank) const {
  std::vector<ModelChunk> out;
  for (int c = 0; c < chunks_; ++c) out.push_back(stages_[VirtualStageOf(placement_, pp_, rank, c)]);
  return out;
}

int StageLayout::RankOfLayer(int layer) const {
  for (const ModelChunk& c : stages_) {
    if (layer >= c.first_layer && layer < c.first_layer + c.num_layers) return RankOfStage(c.virtual_stage);
  }
  return -1;
}

}  // namespace tessera::layout
