// `parallel: auto`: the planner's choice of layout written into a job spec before it starts.
#ifndef TESSERA_CLIENT_AUTO_LAYOUT_H_
#define TESSERA_CLIENT_AUTO_LAYOUT_H_

#include <string>

#include "absl/status/statusor.h"
#include "plan/planner.h"
#include "tessera/v1/job.pb.h"

namespace tessera::client {

// The planner's input for `spec`'s model and batch on `devices` devices. Device model: the given
// values where > 0 (GFLOP/s, GB/s, GB), else defaults for the spec's device (CPU: 50 GFLOP/s,
// 2 GB/s, 8 GB, 21 MB runtime per rank; CUDA: an H100 without TF32: 50 TFLOP/s, 200 GB/s, 80 GB).
plan::PlanInput PlanInputFor(const v1::JobSpec& spec, int devices, double gflops = 0, double bandwidth_gbs = 0,
                                 double memory_gb = 0);

// Replaces spec.parallel's dp, pp, tp, tp_mode, tp_depth, sp, sp_mode, pp_schedule and pp_chunks by
// the planner's first choice for `devices` devices and clears auto_layout. Returns a one-line summary
// ("dp2 tp2(1d): predicted 0.062 s/step, 0.04 GB per device"). Fails when no layout fits.
absl::StatusOr<std::string> ApplyAutoLayout(v1::JobSpec* spec, int devices);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_AUTO_LAYOUT_H_
