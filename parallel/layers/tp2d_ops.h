// 2D tensor parallelism (Optimus, the paper's 2D mode): tp = q² ranks on a q×q grid. Rank (i, j)
// holds activations X_ij — rows (samples) chunk i, hidden chunk j — and weight blocks W_ij of every
// linear layer (Wᵀ's row block i, column block j). `row` is the group of grid row i (ranked by j),
// `col` the group of grid column j (ranked by i); both must outlive the autograd graph.
// Failures inside throw c10::Error.
#ifndef TESSERA_PARALLEL_LAYERS_TP2D_OPS_H_
#define TESSERA_PARALLEL_LAYERS_TP2D_OPS_H_

#include <ATen/core/Tensor.h>

#include "parallel/comm/communicator.h"

namespace tessera::parallel {

struct Grid2D {
  Communicator* row = nullptr;
  Communicator* col = nullptr;
  int q = 1;
};

// SUMMA: C_ij = Σ_k A_ik · B_kj for blocks A_ij [m, n/q] and B_ij [n/q, p/q]; returns C_ij [m, p/q].
// Step k broadcasts A_ik along the row and B_kj along the column, so a rank holds one extra block of
// each at a time. Backward runs the two transposed SUMMAs (dA = dC·Bᵀ reduced to its owner along the
// row, dB = Aᵀ·dC reduced along the column); only the local blocks are saved.
at::Tensor Summa(const at::Tensor& a, const at::Tensor& b, const Grid2D& grid);

// Layer norm over a hidden dimension split along the row: statistics summed over the row group.
at::Tensor LayerNorm2D(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                       const Grid2D& grid);

// RMSNorm as transformers' LlamaRMSNorm (statistics in fp32, scaled in the input's dtype) of `x`
// whose last dimension is split along grid.row (hidden / q on each rank), `weight` split the same way.
at::Tensor RmsNorm2D(const at::Tensor& x, const at::Tensor& weight, double eps, const Grid2D& grid);

// Forward: sum over `comm` of every member's `x`, keeping chunk rank() along `dim`. Backward: the
// gradients of the chunks gathered back along `dim`.
at::Tensor ReduceScatterAlong(const at::Tensor& x, int64_t dim, Communicator* comm);

// Forward: every member's `x` concatenated along `dim`, in rank order. Backward: this member's chunk
// of the gradient, which must be the same on every member (the gathered tensor is used alike by all,
// e.g. as a 1D tp group's replicated input).
at::Tensor GatherAlong(const at::Tensor& x, int64_t dim, Communicator* comm);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_LAYERS_TP2D_OPS_H_
