// HostStaging: the transfers of a host-side optimizer step whose parameters live on an accelerator.
//
// Units pass through two slots in turn. While the host updates the unit in one slot, the next unit's
// gradients travel down into the other slot and the previous unit's new parameters travel up, so the
// PCIe traffic of one unit overlaps the update of another. Copies are enqueued, non-blocking, on the
// device's current stream between device memory and pinned host buffers, and each slot is fenced by
// events: the host waits only for the data it is about to read or overwrite.
//
// Per step, unit k uses slot k % 2:
//   Down(k+1's slot, …) for each piece of unit k+1's gradients, then EndDown(slot)
//   Grads(k's slot)          blocks until unit k's gradients are on the host
//   Out16(k's slot)          (16-bit parameters) blocks until the slot's previous Up has finished
//   Up(k's slot, dest, src)  the new parameters back to the device
//   Finish()                 after the last unit: every Up has finished (the sources may change)
// Pinned host memory: two slots of max_elements gradients, and of the 16-bit parameter copy when the
// parameters are 16-bit.
// Thread safety: none; one step at a time, on one thread.
#ifndef TESSERA_PARALLEL_ZERO_HOST_STAGING_H_
#define TESSERA_PARALLEL_ZERO_HOST_STAGING_H_

#include <array>
#include <cstdint>
#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Event.h>

namespace tessera::parallel {

class HostStaging {
 public:
  // `device`: the parameters' device (not the CPU). `max_elements`: the largest owned shard of a unit.
  // `param_dtype`: the parameters' (and gradients') dtype; 16-bit dtypes also get host buffers for the
  // converted copy of the parameters.
  HostStaging(c10::Device device, int64_t max_elements, at::ScalarType param_dtype);
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  ~HostStaging();

  // Starts copying `grads` (on the device, contiguous, 1-D; 16-bit gradients travel in 16 bits) into
  // elements [offset, offset + n) of the slot's host gradients. The caller keeps nothing alive: device
  // memory is stream-ordered.
  void Down(int slot, const at::Tensor& grads, int64_t offset);
  // After the last Down of a slot's unit.
  void EndDown(int slot);
  // The slot's host gradients ([max_elements] in the parameter dtype), once every Down before EndDown
  // has landed.
  const at::Tensor& Grads(int slot);
  // The slot's host buffer for 16-bit parameters ([max_elements] in the parameter dtype), once the
  // slot's previous Up has finished reading it. Undefined for fp32 parameters.
  const at::Tensor& Out16(int slot);
  // Starts copying `src` (pinned host memory, dest's dtype and size) into `dest` on the device.
  void Up(int slot, at::Tensor dest, const at::Tensor& src);
  // Blocks until every Up has finished.
  void Finish();

 private:
  c10::Device device_;
  std::array<at::Tensor, 2> grads_;
  std::array<at::Tensor, 2> out16_;
  std::array<std::optional<c10::Event>, 2> down_;
  std::array<std::optional<c10::Event>, 2> up_;
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_ZERO_HOST_STAGING_H_
