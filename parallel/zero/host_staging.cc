#include "parallel/zero/host_staging.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

namespace tessera::parallel {
namespace {

c10::Stream CurrentStream(c10::Device device) {
  return c10::impl::VirtualGuardImpl(device.type()).getStream(device);
}

}  // namespace

HostStaging::HostStaging(c10::Device device, int64_t max_elements, at::ScalarType param_dtype) : device_(device) {
  TORCH_CHECK(!device.is_cpu(), "HostStaging is for parameters on an accelerator");
  const at::TensorOptions host = at::TensorOptions().device(c10::kCPU).pinned_memory(true);
  for (int s = 0; s < 2; ++s) {
    grads_[s] = at::empty({max_elements}, host.dtype(param_dtype));
    if (param_dtype != at::kFloat) out16_[s] = at::empty({max_elements}, host.dtype(param_dtype));
    down_[s].emplace(device.type());
    up_[s].emplace(device.type());
  }
}

HostStaging::~HostStaging() {
  // The copies read and write the buffers freed here.
  Finish();
  for (auto& e : down_) e->synchronize();
}

void HostStaging::Down(int slot, const at::Tensor& grads, int64_t offset) {
  grads_[slot].narrow(0, offset, grads.numel()).copy_(grads, /*non_blocking=*/true);
}

void HostStaging::EndDown(int slot) { down_[slot]->record(CurrentStream(device_)); }

const at::Tensor& HostStaging::Grads(int slot) {
  down_[slot]->synchronize();
  return grads_[slot];
}

const at::Tensor& HostStaging::Out16(int slot) {
  up_[slot]->synchronize();
  return out16_[slot];
}

void HostStaging::Up(int slot, at::Tensor dest, const at::Tensor& src) {
  dest.copy_(src, /*non_blocking=*/true);
  up_[slot]->record(CurrentStream(device_));
}

void HostStaging::Finish() {
  for (auto& e : up_) e->synchronize();
}

}  // namespace tessera::parallel
