// 3D tensor parallelism (the paper's 3D mode, Agarwal's 3D matrix multiplication): tp = q³ ranks on a
// q×q×q cube. C = A·B with C_ij = Σ_l A_il·B_lj: the rank at (i, j, l) holds row chunk j of A_il and
// row chunk i of B_lj; it all-gathers A_il along j and B_lj along i, multiplies, and the products are
// reduce-scattered along l (each rank keeps row chunk l of C_ij). The output's layout is the input's
// with the roles of two axes exchanged, so consecutive linears alternate (see Decoder's 3D blocks).
// Groups must outlive the autograd graph; failures inside throw c10::Error.
#ifndef TESSERA_PARALLEL_LAYERS_TP3D_OPS_H_
#define TESSERA_PARALLEL_LAYERS_TP3D_OPS_H_

#include <ATen/core/Tensor.h>

#include "parallel/comm/communicator.h"

namespace tessera::parallel {

// a [R, n/q] (this rank's rows of A_il), b [n/q², p/q] (its rows of B_lj) → [R, p/q] (its rows of
// C_ij). `gather_a` is the group along j, `gather_b` along i, `scatter` along l. Backward:
// dA = dC·Bᵀ reduce-scattered along j, dB = Aᵀ·dC reduce-scattered along i (dC gathered along l);
// the gathered A and B are not kept, backward gathers them again.
at::Tensor Linear3D(const at::Tensor& a, const at::Tensor& b, Communicator* gather_a, Communicator* gather_b,
                    Communicator* scatter);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_LAYERS_TP3D_OPS_H_
