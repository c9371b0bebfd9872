// TpGrid: the shape the tp ranks form in a tensor parallel mode, and what each mode splits by how
// much. The one place that knows the grid arithmetic: CheckLayout, the planner's cost model and the
// engine's layers all read it from here. No torch.
#ifndef TESSERA_LAYOUT_TP_GRID_H_
#define TESSERA_LAYOUT_TP_GRID_H_

#include <vector>

#include "layout/modes.h"

namespace tessera::layout {

struct TpGrid {
  TpMode mode = TpMode::k1D;
  int tp = 1;     // Ranks of the tp group.
  int q = 1;      // Grid side (1 for 1D).
  int depth = 1;  // 2.5D: the number of layers d.

  // The grid's axis sizes, major first (the engine's tp_axes): {q, q}, {d, q, q}, {q, q, q}; {} for 1D.
  std::vector<int> Axes() const;
  // Whether the tp ranks form the grid exactly (1D: always): 2D q² with q ≥ 2, 2.5D d·q² with
  // q ≥ 2, 3D q³ with q ≥ 2.
  bool Formed() const;
  // Per rank, what is split how many ways:
  int SampleSplit() const;  // A micro-batch's samples (grid modes: 2D q, 2.5D d·q, 3D q²; 1D 1).
  int HiddenSplit() const;  // The hidden width of activations between blocks (3D q², 2D/2.5D q; 1D 1).
  int HeadSplit() const;    // Attention heads, and key/value heads (1D tp; grid q).
  int WeightSplit() const;  // A linear weight (1D tp; 2D/2.5D q²; 3D q³).
  int VocabSplit() const;   // Embedding rows and logits (1D tp; grid q).
};

// The grid of `tp` ranks in `mode` (2.5D: `depth` layers). The side is the largest that fits, so a tp
// that does not form the grid gives Formed() false.
TpGrid TpGridOf(TpMode mode, int tp, int depth = 1);

// ⌊√n⌋ and ⌊∛n⌋ for n ≥ 0.
int SquareSide(int n);
int CubeSide(int n);

}  // namespace tessera::layout

#endif  // TESSERA_LAYOUT_TP_GRID_H_
