// Test helper: a kernel that occupies a stream until the host writes a flag, to plant a hang in front
// of a collective. Torch-free (compiled by nvcc).
#ifndef TESSERA_PARALLEL_COMM_TESTING_SPIN_KERNEL_H_
#define TESSERA_PARALLEL_COMM_TESTING_SPIN_KERNEL_H_

#include <cuda_runtime_api.h>

namespace tessera::parallel::testing {

// Spins on `stream` until *flag (host-mapped memory, its device pointer) is non-zero, or about
// `max_seconds` passed (so a failing test cannot wedge the GPU).
cudaError_t LaunchSpinUntilFlag(const volatile int* flag, double max_seconds, cudaStream_t stream);

}  // namespace tessera::parallel::testing

#endif  // TESSERA_PARALLEL_COMM_TESTING_SPIN_KERNEL_H_
