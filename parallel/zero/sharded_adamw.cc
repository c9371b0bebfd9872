#include "parallel/zero/sharded_adamw.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstring>

namespace tessera::parallel {

ShardedAdamW::ShardedAdamW(std::vector<at::Tensor> params, std::vector<bool> decay, std::shared_ptr<Communicator> dp,
                           AdamWOptions options)
    : params_(std::move(params)),
      decay_(std::move(decay)),
      dp_(std::move(dp)),
      options_(options),
      simd_(kernels::DetectSimd()) {
  offsets_.push_back(0);
  for (const at::Tensor& p : params_) offsets_.push_back(offsets_.back() + p.numel());
  const int64_t n = offsets_.back();
  const int size = dp_->size();
  shard_ = (n + size - 1) / size;
  begin_ = std::min(n, dp_->rank() * shard_);
  end_ = std::min(n, begin_ + shard_);
  exp_avg_ = at::zeros({shard_});
  exp_avg_sq_ = at::zeros({shard_});
}

void ShardedAdamW::Copy(int64_t begin, int64_t end, float* flat, int64_t flat_offset, bool to_flat) {
  for (size_t k = 0; k < params_.size(); ++k) {
    const int64_t a = std::max(begin, offsets_[k]), b = std::min(end, offsets_[k + 1]);
    if (a >= b) continue;
    float* p = params_[k].data_ptr<float>() + (a - offsets_[k]);
    float* f = flat + (a - flat_offset);
    if (to_flat) {
      std::memcpy(f, p, (b - a) * sizeof(float));
    } else {
      std::memcpy(p, f, (b - a) * sizeof(float));
    }
  }
}

absl::Status ShardedAdamW::Step(double lr, int64_t step) {
  at::NoGradGuard no_grad;
  for (size_t k = 0; k < params_.size(); ++k) {
    const int64_t a = std::max(begin_, offsets_[k]), b = std::min(end_, offsets_[k + 1]);
    if (a >= b) continue;
    const int64_t local = a - offsets_[k];
    kernels::AdamWStep s{lr, options_.beta1, options_.beta2, options_.eps, decay_[k] ? options_.weight_decay : 0.0,
                         step};
    kernels::CpuAdamW(params_[k].data_ptr<float>() + local, params_[k].grad().data_ptr<float>() + local,
                      exp_avg_.data_ptr<float>() + (a - begin_), exp_avg_sq_.data_ptr<float>() + (a - begin_), b - a,
                      s, simd_);
  }
  if (dp_->size() == 1) return absl::OkStatus();
  at::Tensor mine = at::zeros({shard_});
  Copy(begin_, end_, mine.data_ptr<float>(), begin_, /*to_flat=*/true);
  at::Tensor all = at::empty({shard_ * dp_->size()});
  if (absl::Status s = dp_->AllGather(mine, all); !s.ok()) return s;
  Copy(0, offsets_.back(), all.data_ptr<float>(), 0, /*to_flat=*/false);
  return absl::OkStatus();
}

absl::Status ShardedAdamW::GatherState(std::vector<at::Tensor>* exp_avg, std::vector<at::Tensor>* exp_avg_sq) {
  for (auto [mine, out] : {std::make_pair(&exp_avg_, exp_avg), std::make_pair(&exp_avg_sq_, exp_avg_sq)}) {
    at::Tensor all = at::empty({shard_ * dp_->size()});
    if (dp_->size() == 1) {
      all.copy_(*mine);
    } else if (absl::Status s = dp_->AllGather(*mine, all); !s.ok()) {
      return s;
    }
    out->clear();
    for (size_t k = 0; k < params_.size(); ++k) {
      out->push_back(all.narrow(0, offsets_[k], offsets_[k + 1] - offsets_[k]).view(params_[k].sizes()).clone());
    }
  }
  return absl::OkStatus();
}

void ShardedAdamW::LoadState(const std::vector<at::Tensor>& exp_avg, const std::vector<at::Tensor>& exp_avg_sq) {
  for (size_t k = 0; k < params_.size(); ++k) {
    const int64_t a = std::max(begin_, offsets_[k]), b = std::min(end_, offsets_[k + 1]);
    if (a >= b) continue;
    exp_avg_.narrow(0, a - begin_, b - a).copy_(exp_avg[k].reshape({-1}).narrow(0, a - offsets_[k], b - a));
    exp_avg_sq_.narrow(0, a - begin_, b - a).copy_(exp_avg_sq[k].reshape({-1}).narrow(0, a - offsets_[k], b - a));
  }
}

}  // namespace tessera::parallel
