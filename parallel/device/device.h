// Where a rank computes. The one place that maps a job's device kind and a rank's local index to a
// torch device; everything else asks it (model parameters, batches, optimizer state follow them).
#ifndef TESSERA_PARALLEL_DEVICE_DEVICE_H_
#define TESSERA_PARALLEL_DEVICE_DEVICE_H_

#include <c10/core/Device.h>

#include "absl/status/statusor.h"
#include "parallel/device/device_options.h"

namespace tessera::parallel {

// cpu, or cuda:local_rank. Fails (naming the device) when CUDA is requested and this build or
// machine has no such GPU; the CUDA backend (NCCL, kernels) arrives with the GPU issue.
absl::StatusOr<c10::Device> SelectDevice(const DeviceOptions& options);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_DEVICE_DEVICE_H_
