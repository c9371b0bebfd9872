#include "parallel/models/param_layout.h"

#include <algorithm>

#include <ATen/ATen.h>

#include <cmath>

namespace tessera::parallel {

at::Tensor ShardOf(const Param& param, const at::Tensor& full, int tp_rank, int tp_size) {
  switch (param.split) {
    case TpSplit::kReplicated:
      return full.clone();
    case TpSplit::kDim0:
      return full.chunk(tp_size, 0)[tp_rank].clone();
    case TpSplit::kDim1:
      return full.chunk(tp_size, 1)[tp_rank].contiguous();
    case TpSplit::kQkvDim0: {
      std::vector<at::Tensor> parts;
      for (const at::Tensor& block : full.chunk(3, 0)) parts.push_back(block.chunk(tp_size, 0)[tp_rank]);
      return at::cat(parts, 0);
    }
  }
  return full;
}

std::vector<int64_t> PartShape(const Param& param, int tp_size) {
  std::vector<int64_t> shape = param.full_shape;
  switch (param.split) {
    case TpSplit::kReplicated:
      break;
    case TpSplit::kDim0:
    case TpSplit::kQkvDim0:
      shape[0] /= tp_size;
      break;
    case TpSplit::kDim1:
      shape[1] /= tp_size;
      break;
  }
  return shape;
}

at::Tensor JoinShards(const Param& param, const std::vector<at::Tensor>& parts) {
  switch (param.split) {
    case TpSplit::kReplicated:
      return parts[0].clone();
    case TpSplit::kDim0:
      return at::cat(parts, 0);
    case TpSplit::kDim1:
      return at::cat(parts, 1);
    case TpSplit::kQkvDim0: {
      std::vector<at::Tensor> blocks;
      for (int64_t b = 0; b < 3; ++b) {
        for (const at::Tensor& part : parts) blocks.push_back(part.chunk(3, 0)[b]);
      }
      return at::cat(blocks, 0);
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
      split += sq;
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
    case TpSplit::kReplicated:
      break;
  }
  return absl::OkStatus();
}

}  // namespace tessera::parallel
