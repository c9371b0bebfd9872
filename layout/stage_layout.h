// StageLayout: which GPT layers each pipeline stage holds. No torch here.
//
// The model's L transformer blocks are cut into V = pp·chunks consecutive pieces ("virtual stages").
// Where they run (StagePlacement):
//   kLoop  virtual stage s on pipeline rank s % pp as its local chunk s / pp (interleaving: with
//          chunks > 1 every rank holds several non-adjacent pieces);
//   kV     two chunks per rank in a V (ZB-V): rank r holds virtual stage r as its chunk 0 and
//          2·pp−1−r as its chunk 1, so the activations go down the ranks and come back up, and rank 0
//          holds both the first and the last virtual stage.
// The token and position embeddings belong to virtual stage 0, the final norm and the (tied) head to
// virtual stage V-1.
#ifndef TESSERA_LAYOUT_STAGE_LAYOUT_H_
#define TESSERA_LAYOUT_STAGE_LAYOUT_H_

#include <vector>

#include "absl/status/statusor.h"

namespace tessera::layout {

enum class StagePlacement { kLoop, kV };

// The virtual stage of local chunk `chunk` of pipeline rank `rank` (of `pp`) under `placement`.
int VirtualStageOf(StagePlacement placement, int pp, int rank, int chunk);

struct ModelChunk {
  int virtual_stage = 0;
  int first_layer = 0;
  int num_layers = 0;
  bool embedding = false;  // Runs the embeddings before its blocks.
  bool head = false;       // Runs the final norm, the head and the loss after its blocks.
};

class StageLayout {
 public:
  // Balanced by layer count when `layers_per_stage` is empty: each virtual stage gets ⌊L/V⌋ blocks and
  // the first L mod V get one more (never the last, which also runs the head). Otherwise
  // `layers_per_stage` lists the blocks of every virtual stage (V entries, each ≥ 1, summing to L).
  // Fails with a message naming parallel.pp_layers / parallel.pp_chunks when impossible; kV needs
  // chunks == 2.
  static absl::StatusOr<StageLayout> Create(int layers, int pp, int chunks,
                                            const std::vector<int>& layers_per_stage = {},
                                            StagePlacement placement = StagePlacement::kLoop);

  int pp() const { return pp_; }
  int chunks() const { return chunks_; }
  StagePlacement placement() const { return placement_; }
  // The pipeline rank that runs virtual stage `s`, and its local chunk index there.
  int RankOfStage(int s) const;
  int ChunkOfStage(int s) const;
  int num_virtual_stages() const { return static_cast<int>(stages_.size()); }
  const ModelChunk& virtual_stage(int s) const { return stages_[s]; }
  // The chunks of pipeline rank `rank`, local chunk c at index c (virtual stage VirtualStageOf).
  std::vector<ModelChunk> ChunksOf(int rank) const;
  // The pipeline rank that holds block `layer`.
  int RankOfLayer(int layer) const;

 private:
  StageLayout(int pp, int chunks, StagePlacement placement, std::vector<ModelChunk> stages)
      : pp_(pp), chunks_(chunks), placement_(placement), stages_(std::move(stages)) {}
  int pp_;
  int chunks_;
  StagePlacement placement_;
  std::vector<ModelChunk> stages_;
};

}  // namespace tessera::layout

#endif  // TESSERA_LAYOUT_STAGE_LAYOUT_H_
