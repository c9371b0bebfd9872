// ZeroOptimizer's update: AdamW over each unit's owned shard (CPU Adam on the host, ATen ops on an
// accelerator), the new parameters written back and all-gathered.
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/cpu_adam.h"
#include "parallel/zero/zero_optimizer.h"
#include "parallel/zero/zero_unit.h"

namespace tessera::parallel {
namespace {

// CPU Adam's view of contiguous host gradients `g` (fp32, bf16 or fp16), times `factor`.
kernels::GradIn HostGrad(const at::Tensor& g, double factor) {
  TORCH_CHECK(g.device().is_cpu() && g.is_contiguous(), "CPU Adam reads contiguous host gradients");
  kernels::GradType type = kernels::GradType::kF32;
  if (g.scalar_type() == at::kBFloat16) {
    type = kernels::GradType::kBf16;
  } else if (g.scalar_type() == at::kHalf) {
    type = kernels::GradType::kFp16;
  } else {
    TORCH_CHECK(g.scalar_type() == at::kFloat, "CPU Adam reads fp32, bf16 or fp16 gradients, not ", g.scalar_type());
  }
  // ATen's g * factor on a float tensor multiplies by the factor rounded to float, as the kernel does.
  return {g.data_ptr(), type, static_cast<float>(factor)};
}

}  // namespace

void ZeroOptimizer::ScaleGradients(double factor) {
  grad_factor_ = factor;
}

at::Tensor ZeroOptimizer::RawOwnedGrad(const Unit& u, size_t j, int64_t a, int64_t b) const {
  if (!buckets_) return u.grad_shard.narrow(0, a - u.begin, b - a);
  const at::Tensor& full = model_->params()[u.params[j]].value.grad();
  if (!full.defined()) return at::zeros({b - a}, at::TensorOptions().dtype(options_.param_dtype).device(device_));
  return full.reshape({-1}).narrow(0, a - u.offsets[j], b - a).contiguous();
}

at::Tensor ZeroOptimizer::OwnedGrad(const Unit& u, size_t j, int64_t a, int64_t b, c10::Device where) const {
  at::Tensor g = RawOwnedGrad(u, j, a, b).to(where, at::kFloat);
  // The same elementwise product as scaling the gradients in place (bit-identical to unsharded AdamW).
  if (grad_factor_ != 1.0) g = g * grad_factor_;
  return g.contiguous();
}

void ZeroOptimizer::StageDown(const Unit& u, int slot) {
  RECORD_USER_SCOPE("tessera::zero::stage_down");
  for (size_t j = 0; j < u.params.size(); ++j) {
    const auto [a, b] = u.Owned(j);
    if (a < b) staging_->Down(slot, RawOwnedGrad(u, j, a, b), a - u.begin);
  }
  staging_->EndDown(slot);
}

void ZeroOptimizer::UpdateOnStateDevice(Unit& u, const AdamW& adam, double lr, int64_t step) {
  std::vector<at::Tensor> raw;
  for (size_t j = 0; j < u.params.size(); ++j) {
    const auto [a, b] = u.Owned(j);
    if (a < b) raw.push_back(RawOwnedGrad(u, j, a, b).reshape({-1}));
  }
  if (raw.empty()) return;
  // One copy of the owned gradients in fp32 (a fresh tensor: the model's gradients are never scaled in
  // place), scaled as OwnedGrad does: the same elementwise arithmetic, in a few launches per unit.
  at::Tensor grads = at::cat(raw).to(state_device_, at::kFloat);
  if (grad_factor_ != 1.0) grads.mul_(grad_factor_);
  std::vector<at::Tensor> params, views;
  std::vector<AdamWState> states;
  std::vector<bool> decay;
  int64_t next = 0;  // Where member j's owned gradients start in `grads`.
  for (size_t j = 0; j < u.params.size(); ++j) {
    const auto [a, b] = u.Owned(j);
    if (a >= b) continue;
    const int64_t o = a - u.begin, n = b - a;
    params.push_back(u.master.narrow(0, o, n));
    views.push_back(grads.narrow(0, next, n));
    states.push_back({u.exp_avg.narrow(0, o, n), u.exp_avg_sq.narrow(0, o, n)});
    decay.push_back(model_->params()[u.params[j]].weight_decay);
    next += n;
  }
  adam.UpdateAll(params, views, states, decay, lr, step, options_.fused);
}

absl::Status ZeroOptimizer::Step(double lr, int64_t step) {
  at::NoGradGuard no_grad;
  AdamW aten_adam(options_.adam);
  const bool host_update = state_device_.is_cpu();
  // Parameters on an accelerator, update on the host: transfers overlap the updates (HostStaging).
  const bool staged = host_update && !device_.is_cpu();
  if (staged && !staging_) {
    int64_t most = 0;
    for (const auto& u : units_) most = std::max(most, u->shard);
    staging_ = std::make_unique<HostStaging>(device_, most, options_.param_dtype);
  }
  const bool low16 = options_.param_dtype == at::kBFloat16 || options_.param_dtype == at::kHalf;
  const kernels::Copy16 type16 = options_.param_dtype == at::kHalf ? kernels::Copy16::kFp16 : kernels::Copy16::kBf16;
  std::vector<std::unique_ptr<CommWork>> gathers;
  std::vector<at::Tensor> sources;  // Kept alive until the gathers finish.
  // Named ranges (RECORD_USER_SCOPE) show the update's phases in a profiler's trace; free otherwise.
  if (staged && !units_.empty()) StageDown(*units_[0], 0);
  for (size_t k = 0; k < units_.size(); ++k) {
    Unit& u = *units_[k];
    const int slot = static_cast<int>(k % 2);
    if (staged && k + 1 < units_.size()) StageDown(*units_[k + 1], 1 - slot);
    // Where the new parameters go, in the parameter dtype.
    at::Tensor dest = options_.stage == layout::ZeroStage::kParameters ? u.param_shard : u.flat_alias.narrow(0, u.begin, u.shard);
    // Where the update writes 16-bit parameters in its own pass: host parameters directly, else the
    // staging buffer that travels up.
    at::Tensor out16;
    if (host_update && !u.master_is_param && low16) {
      if (staged) {
        RECORD_USER_SCOPE("tessera::zero::wait_up");
        out16 = staging_->Out16(slot);
      } else if (dest.device().is_cpu()) {
        out16 = dest;
      }
    }
    at::Tensor staged_grads;
    if (staged) {
      RECORD_USER_SCOPE("tessera::zero::wait_down");
      staged_grads = staging_->Grads(slot);
    }
    for (size_t j = 0; host_update && j < u.params.size(); ++j) {
      const auto [a, b] = u.Owned(j);
      if (a >= b) continue;
      const int64_t o = a - u.begin, n = b - a;
      const bool decay = model_->params()[u.params[j]].weight_decay;
      // The update reads the gradients in their own dtype and applies ScaleGradients' factor itself.
      const at::Tensor grad = staged ? staged_grads.narrow(0, o, n) : RawOwnedGrad(u, j, a, b);
      kernels::AdamWStep s{lr, options_.adam.beta1, options_.adam.beta2, options_.adam.eps,
                           decay ? options_.adam.weight_decay : 0.0, step};
      uint16_t* out = out16.defined() ? static_cast<uint16_t*>(out16.data_ptr()) + o : nullptr;
      RECORD_USER_SCOPE("tessera::zero::cpu_adam");
      kernels::CpuAdamW(u.master.data_ptr<float>() + o, HostGrad(grad, grad_factor_),
                        u.exp_avg.data_ptr<float>() + o, u.exp_avg_sq.data_ptr<float>() + o, n, s, simd_,
                        /*parallel=*/true, out, type16);
    }
    if (!host_update) UpdateOnStateDevice(u, aten_adam, lr, step);
    if (staged) {
      // The owned elements that are not padding (the padding keeps its zeros).
      const int64_t real = std::clamp<int64_t>(u.numel - u.begin, 0, u.shard);
      const at::Tensor& src = out16.defined() ? out16 : u.master;
      staging_->Up(slot, dest.narrow(0, 0, real), src.narrow(0, 0, real));
    } else if (!u.master_is_param && !out16.defined()) {
      dest.copy_(u.master, /*non_blocking=*/false);
    }
    if (u.shards > 1 && options_.stage != layout::ZeroStage::kParameters) {
      // The next unit's update overlaps this gather.
      sources.push_back(dest.clone());
      gathers.push_back(u.group->AllGatherAsync(sources.back(), u.flat_alias));
    }
  }
  // The next step's update rewrites the sources of the copies up.
  if (staged) {
    RECORD_USER_SCOPE("tessera::zero::finish_up");
    staging_->Finish();
  }
  absl::Status status;
  for (auto& g : gathers) {
    absl::Status s = g->Wait();
    if (status.ok() && !s.ok()) status = s;
  }
  Sample();
  return status;
}

}  // namespace tessera::parallel
