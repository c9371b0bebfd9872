// ZeroOptimizer's state in and out: gathered full tensors, loading full moments, this rank's shard.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "parallel/zero/zero_optimizer.h"
#include "parallel/zero/zero_unit.h"

namespace tessera::parallel {

absl::Status ZeroOptimizer::Gather(What what, std::vector<at::Tensor>* out) {
  at::NoGradGuard no_grad;
  std::vector<Param>& params = model_->params();
  out->assign(params.size(), at::Tensor());
  for (auto& u : units_) {
    at::Tensor local;
    switch (what) {
      case What::kParams: local = u->master; break;
      case What::kGrads:
        local = at::zeros({u->shard}, at::TensorOptions().dtype(at::kFloat).device(state_device_));
        for (size_t j = 0; j < u->params.size(); ++j) {
          const auto [a, b] = u->Owned(j);
          if (a < b) local.narrow(0, a - u->begin, b - a).copy_(OwnedGrad(*u, j, a, b, state_device_));
        }
        break;
      case What::kExpAvg: local = u->exp_avg; break;
      case What::kExpAvgSq: local = u->exp_avg_sq; break;
    }
    local = local.to(at::TensorOptions().dtype(at::kFloat).device(c10::kCPU)).contiguous();
    at::Tensor all = local;
    if (u->shards > 1) {
      all = at::empty({u->shard * u->shards}, local.options());
      if (absl::Status s = u->group->AllGather(local, all); !s.ok()) return s;
    }
    for (size_t j = 0; j < u->params.size(); ++j) {
      const Param& p = params[u->params[j]];
      (*out)[u->params[j]] =
          all.narrow(0, u->offsets[j], u->offsets[j + 1] - u->offsets[j]).view(p.value.sizes()).clone();
    }
  }
  return absl::OkStatus();
}

absl::Status ZeroOptimizer::LoadState(const std::vector<at::Tensor>& exp_avg, const std::vector<at::Tensor>& exp_avg_sq) {
  at::NoGradGuard no_grad;
  std::vector<Param>& params = model_->params();
  if (exp_avg.size() != params.size() || exp_avg_sq.size() != params.size()) {
    return absl::InvalidArgumentError("optimizer state has the wrong number of tensors");
  }
  for (auto& u : units_) {
    for (size_t j = 0; j < u->params.size(); ++j) {
      const size_t k = u->params[j];
      if (exp_avg[k].numel() != params[k].value.numel() || exp_avg_sq[k].numel() != params[k].value.numel()) {
        return absl::InvalidArgumentError(absl::StrCat("optimizer state of ", params[k].name, " has the wrong size"));
      }
      const auto [a, b] = u->Owned(j);
      if (a >= b) continue;
      const int64_t from = a - u->offsets[j];
      u->exp_avg.narrow(0, a - u->begin, b - a).copy_(exp_avg[k].reshape({-1}).narrow(0, from, b - a));
      u->exp_avg_sq.narrow(0, a - u->begin, b - a).copy_(exp_avg_sq[k].reshape({-1}).narrow(0, from, b - a));
    }
  }
  return absl::OkStatus();
}

std::map<std::string, at::Tensor> ZeroOptimizer::StateShard() const {
  std::map<std::string, at::Tensor> out;
  const std::vector<Param>& params = model_->params();
  for (const auto& u : units_) {
    for (size_t j = 0; j < u->params.size(); ++j) {
      const auto [a, b] = u->Owned(j);
      if (a >= b) continue;
      const std::string& name = params[u->params[j]].name;
      out["exp_avg." + name] = u->exp_avg.narrow(0, a - u->begin, b - a).to(c10::kCPU).clone();
      out["exp_avg_sq." + name] = u->exp_avg_sq.narrow(0, a - u->begin, b - a).to(c10::kCPU).clone();
      out["range." + name] = at::tensor({a - u->offsets[j], b - u->offsets[j]}, at::kLong);
    }
  }
  return out;
}

}  // namespace tessera::parallel
