#include "parallel/models/param_layout.h"

#include <algorithm>

#include <ATen/ATen.h>

#include <cmath>

namespace tessera::parallel {

namespace {

// Chunk k of n along `dim`; with `qkv` dim 0 is three stacked blocks, each chunked.
at::Tensor Chunk(const at::Tensor& t, int64_t dim, int n, int k, bool qkv = false) {
  if (!qkv) return t.chunk(n, dim)[k];
  std::vector<at::Tensor> parts;
  for (const at::Tensor& block : t.chunk(3, 0)) parts.push_back(block.chunk(n, 0)[k]);
  return at::cat(parts, 0);
}

// The inverse of Chunk over k = 0..n-1.
at::Tensor Join(const std::vector<at::Tensor>& parts, int64_t dim, bool qkv = false) {
  if (!qkv) return at::cat(parts, dim);
  std::vector<at::Tensor> blocks;
  for (int64_t b = 0; b < 3; ++b) {
    for (const at::Tensor& part : parts) blocks.push_back(part.chunk(3, 0)[b]);
  }
  return at::cat(blocks, 0);
}

bool IsGrid(TpSplit s) {
  return s == TpSplit::kGrid || s == TpSplit::kGridQkv || s == TpSplit::kColDim0 || s == TpSplit::kColQkvDim0 ||
         s == TpSplit::kColDim1;
}

}  // namespace

int GridSide(int tp_size) {
  int q = 1;
  while ((q + 1) * (q + 1) <= tp_size) ++q;
  return q;
}

int ReplicasInTp(const Param& param, int tp_size) {
  switch (param.split) {
    case TpSplit::kReplicated: return tp_size;
    case TpSplit::kColDim0:
    case TpSplit::kColQkvDim0:
    case TpSplit::kColDim1: return GridSide(tp_size);
    default: return 1;
  }
}

at::Tensor ShardOf(const Param& param, const at::Tensor& full, int tp_rank, int tp_size) {
  const int q = GridSide(tp_size), i = tp_rank / q, j = tp_rank % q;
  switch (param.split) {
    case TpSplit::kReplicated: return full.clone();
    case TpSplit::kDim0: return Chunk(full, 0, tp_size, tp_rank).clone();
    case TpSplit::kDim1: return Chunk(full, 1, tp_size, tp_rank).contiguous();
    case TpSplit::kQkvDim0: return Chunk(full, 0, tp_size, tp_rank, true);
    case TpSplit::kGrid: return Chunk(Chunk(full, 0, q, j), 1, q, i).contiguous();
    case TpSplit::kGridQkv: return Chunk(Chunk(full, 0, q, j, true), 1, q, i).contiguous();
    case TpSplit::kColDim0: return Chunk(full, 0, q, j).clone();
    case TpSplit::kColQkvDim0: return Chunk(full, 0, q, j, true);
    case TpSplit::kColDim1: return Chunk(full, 1, q, j).contiguous();
  }
  return full;
}

std::vector<int64_t> PartShape(const Param& param, int tp_size) {
  std::vector<int64_t> shape = param.full_shape;
  const int q = GridSide(tp_size);
  switch (param.split) {
    case TpSplit::kReplicated: break;
    case TpSplit::kDim0:
    case TpSplit::kQkvDim0: shape[0] /= tp_size; break;
    case TpSplit::kDim1: shape[1] /= tp_size; break;
    case TpSplit::kGrid:
    case TpSplit::kGridQkv: shape[0] /= q, shape[1] /= q; break;
    case TpSplit::kColDim0:
    case TpSplit::kColQkvDim0: shape[0] /= q; break;
    case TpSplit::kColDim1: shape[1] /= q; break;
  }
  return shape;
}

at::Tensor JoinShards(const Param& param, const std::vector<at::Tensor>& parts) {
  const int q = GridSide(static_cast<int>(parts.size()));
  switch (param.split) {
    case TpSplit::kReplicated: return parts[0].clone();
    case TpSplit::kDim0: return Join(parts, 0);
    case TpSplit::kDim1: return Join(parts, 1);
    case TpSplit::kQkvDim0: return Join(parts, 0, true);
    case TpSplit::kGrid:
    case TpSplit::kGridQkv: {
      std::vector<at::Tensor> columns;  // Column j: rows i = 0..q-1 joined along dim 1.
      for (int j = 0; j < q; ++j) {
        std::vector<at::Tensor> rows;
        for (int i = 0; i < q; ++i) rows.push_back(parts[i * q + j]);
        columns.push_back(Join(rows, 1));
      }
      return Join(columns, 0, param.split == TpSplit::kGridQkv);
    }
    case TpSplit::kColDim0:
    case TpSplit::kColQkvDim0:
    case TpSplit::kColDim1: {
      std::vector<at::Tensor> row0(parts.begin(), parts.begin() + q);
      return Join(row0, param.split == TpSplit::kColDim1 ? 1 : 0, param.split == TpSplit::kColQkvDim0);
    }
  }
  return parts[0];
}

absl::StatusOr<double> GradNormOverTp(std::vector<Param>& params, Communicator* tp) {
  auto sq = GradSquaredSumOverTp(params, tp);
  if (!sq.ok()) return sq.status();
  return std::sqrt(*sq);
}

absl::StatusOr<double> GradSquaredSumOverTp(std::vector<Param>& params, Communicator* tp,
                                            const std::vector<std::string>& skip) {
  // Sums stay on the device (one host sync at the end, not one per tensor).
  const c10::Device device = params.at(0).value.device();
  at::Tensor replicated = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device));
  at::Tensor split = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device));
  for (Param& p : params) {
    if (std::find(skip.begin(), skip.end(), p.name) != skip.end()) continue;
    const at::Tensor& g = p.value.grad();
    at::Tensor sq = (g.scalar_type() == at::kFloat ? g : g.to(at::kFloat)).norm().to(at::kDouble).square();
    if (p.split == TpSplit::kReplicated) {
      replicated += sq;
    } else {
      // Partitioned over some tp ranks and copied over the others: each copy counts 1/replicas.
      const int replicas = ReplicasInTp(p, tp->size());
      split += replicas == 1 ? sq : sq / replicas;
    }
  }
  if (tp->size() > 1) {
    if (absl::Status s = tp->AllReduce(split, ReduceOp::kSum); !s.ok()) return s;
  }
  return replicated.item<double>() + split.item<double>();
}

absl::Status GatherFullTensor(const Param& param, const at::Tensor& part, Communicator* tp, at::Tensor* full) {
  const int n = tp->size();
  if (param.split == TpSplit::kReplicated || n == 1) {
    *full = part.detach().clone();
    return absl::OkStatus();
  }
  if (IsGrid(param.split)) {
    // Every rank's part (all the same shape), then the inverse of ShardOf.
    at::Tensor src = part.detach().contiguous().view({-1});
    at::Tensor gathered = at::empty({n * src.numel()}, src.options());
    if (absl::Status s = tp->AllGather(src, gathered); !s.ok()) return s;
    std::vector<at::Tensor> parts;
    for (const at::Tensor& c : gathered.chunk(n, 0)) parts.push_back(c.view(part.sizes()));
    *full = JoinShards(param, parts);
    return absl::OkStatus();
  }
  at::Tensor src = param.split == TpSplit::kDim1 ? part.detach().t().contiguous() : part.detach().contiguous();
  std::vector<int64_t> shape = src.sizes().vec();
  shape[0] *= n;
  at::Tensor gathered = at::empty(shape, src.options());
  absl::Status s = tp->AllGather(src, gathered);
  if (!s.ok()) return s;
  switch (param.split) {
    case TpSplit::kDim0:
      *full = gathered;
      break;
    case TpSplit::kDim1:
      *full = gathered.t().contiguous();
      break;
    case TpSplit::kQkvDim0: {
      // gathered = [q0; k0; v0; q1; k1; v1; ...] -> [q0; q1; ...; k0; k1; ...; v0; v1; ...].
      std::vector<int64_t> view = {n, 3, part.size(0) / 3};
      for (int64_t i = 1; i < part.dim(); ++i) view.push_back(part.size(i));
      *full = gathered.view(view).transpose(0, 1).contiguous().view(param.full_shape);
      break;
    }
    default:  // Replicated, and the grid kinds (handled above).
      break;
  }
  return absl::OkStatus();
}

}  // namespace tessera::parallel
