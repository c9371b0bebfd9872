#include "parallel/device/device.h"

#include <ATen/Context.h>

#include "absl/strings/str_cat.h"

namespace tessera::parallel {

absl::StatusOr<c10::Device> SelectDevice(const DeviceOptions& options) {
  if (options.kind == DeviceKind::kCpu) return c10::Device(c10::kCPU);
  if (!at::hasCUDA()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device cuda:", options.local_rank, " requested, but this build or machine has no CUDA"));
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(options.local_rank));
}

}  // namespace tessera::parallel
