// Which path a sparse block's experts take (sparse_mlp.h ExpertGemm), for callers that need to know
// (tests, benchmarks). Apart from sparse_mlp.h, which most of the engine includes.
//
// kGrouped's contract in full: three at::_grouped_mm per block over the experts' weights stacked
// [E, ·, ·] — a copy of them per pass, kept from forward to backward (with activation checkpointing
// only while the block is recomputed), so memory of one more copy of a block's experts; an idle
// expert's slice goes through `where`, so its gradient is zeros whatever a kernel leaves for an empty
// group. Taken only without LoRA on the experts, without an FP8 scope (whatever the rows: the loop
// decides per expert), outside zero-bubble's weight-gradient split (the loop's linears defer theirs
// to W), with rows to compute (an ep rank may receive none), and with the hidden and tp-local
// intermediate sizes multiples of 8 (16-byte strides); otherwise the experts loop.
#ifndef TESSERA_PARALLEL_LAYERS_SPARSE_MLP_PATHS_H_
#define TESSERA_PARALLEL_LAYERS_SPARSE_MLP_PATHS_H_

#include <ATen/core/Tensor.h>

#include "parallel/layers/sparse_mlp.h"

namespace tessera::parallel {

// Whether experts asked to compute as `gemm` on the rows `x` [rows, h] with weights `w` take the
// grouped GEMMs (the current FP8 scope and weight-gradient split count).
bool GroupedApplies(ExpertGemm gemm, const at::Tensor& x, const SparseMlpWeights& w);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_LAYERS_SPARSE_MLP_PATHS_H_
