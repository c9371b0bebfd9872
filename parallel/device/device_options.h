// Which device a rank computes on, as plain values (no torch) for option structs.
#ifndef TESSERA_PARALLEL_DEVICE_DEVICE_OPTIONS_H_
#define TESSERA_PARALLEL_DEVICE_DEVICE_OPTIONS_H_

#include "layout/modes.h"

namespace tessera::parallel {

using layout::DeviceKind;  // cpu, or cuda:local_rank.

struct DeviceOptions {
  DeviceKind kind = DeviceKind::kCpu;
  int local_rank = 0;  // Rank index on this machine: cuda:local_rank.
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_DEVICE_DEVICE_OPTIONS_H_
