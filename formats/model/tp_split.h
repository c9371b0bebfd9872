// How a parameter is split over the tensor-parallel ranks, as data (no torch): the model's parameter
// list (family.h) names a split per parameter; param_layout.h cuts and joins tensors by it.
#ifndef TESSERA_FORMATS_MODEL_TP_SPLIT_H_
#define TESSERA_FORMATS_MODEL_TP_SPLIT_H_

#include <vector>

namespace tessera::formats::model {

enum class TpSplit {
  kReplicated,  // Every tp rank holds the full tensor (norms, position embedding, row-linear bias).
  kDim0,        // Contiguous chunk r of dim 0 on rank r (column-linear weight/bias, vocab rows).
  kDim1,        // Contiguous chunk r of dim 1 on rank r (row-linear weight).
  kQkvDim0,     // Dim 0 is three stacked blocks (q, k, v); chunk r of each block on rank r.
  // Vocabulary rows (embedding, LM head): rank r holds rows [r·P, (r+1)·P) with P = ceil(rows / tp),
  // the rows past the end zeros (padding: never looked up, their logits masked out of the loss, so
  // they stay zero). With tp dividing the rows it is kDim0. Full tensors never contain padding.
  kPaddedDim0,
  kGrid,        // 2D / 2.5D / 3D tensor parallelism: see GridSplit (Param::grid).
};

// The tp group as a grid (2D: q×q, 2.5D: d×q×q, 3D: q×q×q): tp rank t has coordinates along the
// axes of `grid` (major first: t = Σ coordinate·stride). Each dimension of a tensor is chunked by the
// listed axes, major first; a tensor is copied over the axes it is not chunked by.
struct GridSplit {
  std::vector<int> grid;  // Axis sizes, major first; their product is tp.
  std::vector<int> dim0;  // Axes chunking dim 0, major first (empty: not split).
  std::vector<int> dim1;  // Axes chunking dim 1.
  bool qkv = false;       // Dim 0 is three stacked blocks (q, k, v), each chunked.
};

}  // namespace tessera::formats::model

#endif  // TESSERA_FORMATS_MODEL_TP_SPLIT_H_
