// Live tensor bytes on the host: a counting allocator in front of c10's CPU allocator, so that the
// memory a training step really holds (parameters, gradients, optimizer state, saved activations and
// temporaries) can be told apart from what the C library keeps after it was freed (resident memory).
//
// Install once, early (before tensors are made: earlier allocations are not counted). Thread safe.
#ifndef TESSERA_PARALLEL_DEVICE_LIVE_BYTES_H_
#define TESSERA_PARALLEL_DEVICE_LIVE_BYTES_H_

#include <cstdint>

namespace tessera::parallel {

// Puts the counter in front of c10's current CPU allocator (when that one frees blocks by pointer,
// as the default does); later calls do nothing.
void InstallLiveBytesCounter();
// Whether InstallLiveBytesCounter() ran in this process.
bool LiveBytesCounted();
// Bytes of CPU tensor storage allocated through the counter and not yet freed.
int64_t LiveBytes();
// The most LiveBytes() was since the last ResetPeakLiveBytes() (or the install).
int64_t PeakLiveBytes();
void ResetPeakLiveBytes();

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_DEVICE_LIVE_BYTES_H_
