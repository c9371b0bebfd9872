#include "parallel/models/param_layout.h"

#include <algorithm>

#include <ATen/ATen.h>

#include <cmath>

namespace tessera::parallel {

using formats::model::GridSplit;
using formats::model::TpSplit;

uint64_t TensorSeed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

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

bool IsGrid(TpSplit s) { return s == TpSplit::kGrid; }

at::Tensor GridShard(const GridSplit& g, const at::Tensor& full, int t) {
  const std::vector<int> coords = GridCoords(g.grid, t);
  at::Tensor x = full;
  for (int a : g.dim0) x = Chunk(x, 0, g.grid[a], coords[a], g.qkv);
  for (int a : g.dim1) x = Chunk(x, 1, g.grid[a], coords[a]);
  return x.contiguous().clone();
}

}  // namespace

std::vector<int> GridCoords(const std::vector<int>& grid, int t) {
  std::vector<int> coords(grid.size());
  for (size_t a = grid.size(); a-- > 0;) {
    coords[a] = t % grid[a];
    t /= grid[a];
  }
  return coords;
}

int ReplicasInTp(const Param& param, int tp_size) {
  switch (param.split) {
    case TpSplit::kReplicated: return tp_size;
    case TpSplit::kGrid: {
      int split = 1;
      for (int a : param.grid.dim0) split *= param.grid.grid[a];
      for (int a : param.grid.dim1) split *= param.grid.grid[a];
      return tp_size / split;
    }
    default: return 1;
  }
}

at::Tensor ShardOf(const Param& param, const at::Tensor& full, int tp_rank, int tp_size) {
  switch (param.split) {
    case TpSplit::kReplicated: return full.clone();
    case TpSplit::kDim0: return Chunk(full, 0, tp_size, tp_rank).clone();
    case TpSplit::kPaddedDim0: {
      const int64_t rows = full.size(0), per = (rows + tp_size - 1) / tp_size, begin = tp_rank * per;
      const int64_t n = std::clamp<int64_t>(rows - begin, 0, per);
      std::vector<int64_t> shape = full.sizes().vec();
      shape[0] = per;
      at::Tensor part = at::zeros(shape, full.options());
      if (n > 0) part.narrow(0, 0, n).copy_(full.narrow(0, begin, n));
      return part;
    }
    case TpSplit::kDim1: return Chunk(full, 1, tp_size, tp_rank).contiguous();
    case TpSplit::kQkvDim0: return Chunk(full, 0, tp_size, tp_rank, true);
    case TpSplit::kGrid: return GridShard(param.grid, full, tp_rank);
  }
  return full;
}

std::vector<int64_t> PartShape(const Param& param, int tp_size) {
  std::vector<int64_t> shape = param.full_shape;
  switch (param.split) {
    case TpSplit::kReplicated: break;
    case TpSplit::kDim0:
    case TpSplit::kQkvDim0: shape[0] /= tp_size; break;
    case TpSplit::kDim1: shape[1] /= tp_size; break;
    case TpSplit::kPaddedDim0: shape[0] = (shape[0] + tp_size - 1) / tp_size; break;
    case TpSplit::kGrid:
      for (int a : param.grid.dim0) shape[0] /= param.grid.grid[a];
      for (int a : param.grid.dim1) shape[1] /= param.grid.grid[a];
      break;
  }
  return shape;
}

at::Tensor JoinShards(const Param& param, const std::vector<at::Tensor>& parts) {
  switch (param.split) {
    case TpSplit::kReplicated: return parts[0].clone();
    case TpSplit::kDim0: return Join(parts, 0);
    case TpSplit::kPaddedDim0: return Join(parts, 0).narrow(0, 0, param.full_shape[0]).clone();
    case TpSplit::kDim1: return Join(parts, 1);
    case TpSplit::kQkvDim0: return Join(parts, 0, true);
    case TpSplit::kGrid: {
      // Each rank's part lands where ShardOf took it from: the flat indices of the full tensor
      // sharded the same way (copies over replicated axes write the same values).
      int64_t numel = 1;
      for (int64_t d : param.full_shape) numel *= d;
      at::Tensor index = at::arange(numel, at::kLong).view(param.full_shape);
      at::Tensor full = at::empty({numel}, parts[0].options());
      for (size_t t = 0; t < parts.size(); ++t) {
        full.index_put_({GridShard(param.grid, index, static_cast<int>(t)).view({-1})},
                        parts[t].reshape({-1}).to(full.device()));
      }
      return full.view(param.full_shape);
    }
  }
  return parts[0];
}

namespace {

// GradSquaredSumOverTp on an accelerator: every norm in one multi-tensor launch (_foreach_norm, fp32
// accumulation) instead of five ops per tensor — the same sum up to the order of additions.
absl::StatusOr<double> GradSquaredSumMultiTensor(std::vector<Param>& params, Communicator* tp,
                                                 const std::vector<std::string>& skip) {
  std::vector<at::Tensor> grads;
  std::vector<double> replicated_weight, split_weight;  // Per gradient: its share in each sum.
  for (Param& p : params) {
    if (std::find(skip.begin(), skip.end(), p.name) != skip.end() || !p.value.grad().defined()) continue;
    grads.push_back(p.value.grad());
    const bool rep = p.split == TpSplit::kReplicated;
    replicated_weight.push_back(rep ? 1.0 : 0.0);
    split_weight.push_back(rep ? 0.0 : 1.0 / ReplicasInTp(p, tp->size()));
  }
  const c10::Device device = params.at(0).value.device();
  at::Tensor replicated = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device));
  at::Tensor split = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device));
  if (!grads.empty()) {
    const at::Tensor sq = at::stack(at::_foreach_norm(grads, 2, at::kFloat)).to(at::kDouble).square();
    auto weights = [&](const std::vector<double>& w) { return at::tensor(w, at::kDouble).to(device); };
    replicated += (sq * weights(replicated_weight)).sum();
    split += (sq * weights(split_weight)).sum();
  }
  if (tp->size() > 1) {
    if (absl::Status s = tp->AllReduce(split, ReduceOp::kSum); !s.ok()) return s;
  }
  return replicated.item<double>() + split.item<double>();
}

}  // namespace

absl::StatusOr<double> GradSquaredSumOverTp(std::vector<Param>& params, Communicator* tp,
                                            const std::vector<std::string>& skip) {
  // Sums stay on the device (one host sync at the end, not one per tensor).
  const c10::Device device = params.at(0).value.device();
  if (device.is_cuda()) return GradSquaredSumMultiTensor(params, tp, skip);
  at::Tensor replicated = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device));
  at::Tensor split = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device));
  for (Param& p : params) {
    const at::Tensor& g = p.value.grad();
    if (std::find(skip.begin(), skip.end(), p.name) != skip.end() || !g.defined()) continue;
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
    case TpSplit::kPaddedDim0:
      *full = gathered.narrow(0, 0, param.full_shape[0]).clone();
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
