#include "parallel/comm/testing/spin_kernel.h"

namespace tessera::parallel::testing {
namespace {

__global__ void SpinKernel(const volatile int* flag, unsigned long long max_ns) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    if (*flag != 0) return;
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > max_ns) return;
    __nanosleep(1000);
  }
}

}  // namespace

cudaError_t LaunchSpinUntilFlag(const volatile int* flag, double max_seconds, cudaStream_t stream) {
  SpinKernel<<<1, 1, 0, stream>>>(flag, static_cast<unsigned long long>(max_seconds * 1e9));
  return cudaGetLastError();
}

}  // namespace tessera::parallel::testing
