// What the worker checks in a start order before it writes anything or starts a rank. The order
// comes from the coordinator (authenticated with mutual TLS), which validated the job on
// submission; the worker checks again because its files are its own: a bad order fails its rank
// with the reason, never the worker. The job's paths are checked here, on the machine where the
// rank opens them (symbolic links may lead elsewhere than on the coordinator's).
#ifndef TESSERA_WORKER_START_ORDER_H_
#define TESSERA_WORKER_START_ORDER_H_

#include "absl/status/status.h"
#include "spec/paths.h"
#include "tessera/v1/worker_service.pb.h"

namespace tessera::worker {

// OK when `order` (ACTION_START) may be carried out by a worker with `device_count` devices and
// `roots`: job_id and owner are plain names (they become directory names), the rank's numbers are
// in range and agree with the spec's world size, the spec is valid (spec::ValidateJobSpec) and its
// paths lie inside the roots. Otherwise InvalidArgument naming the field.
absl::Status CheckStartOrder(const v1::Assignment& order, int device_count, const spec::PathRoots& roots);

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_START_ORDER_H_
