#include "client/auto_layout.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spec/layout_of.h"
#include "spec/model_config_of.h"

namespace tessera::client {

plan::PlanInput PlanInputFor(const v1::JobSpec& spec, int devices, double gflops, double bandwidth_gbs,
                                 double memory_gb) {
  plan::PlanInput in;
  const auto& m = spec.model();
  in.model = spec::ModelConfigOf(m);
  // DPO's batches count pairs, each two sequences: the planner sizes sequences.
  // (Both below 2^25 by the spec's limits: twice fits an int.)
  const int rows = spec.train().objective() == v1::OBJECTIVE_DPO || spec.train().objective() == v1::OBJECTIVE_REWARD ? 2 : 1;
  in.micro_batch = rows * spec.train().micro_batch();
  in.global_batch = rows * spec.train().global_batch();
  in.devices = devices;
  in.activation_checkpointing = spec.train().activation_checkpointing();
  in.target = spec::TargetOf(spec);
  in.zero_stage = spec::LayoutOf(spec).zero_stage;
  const bool cuda = spec.device() == v1::DEVICE_CUDA;
  in.device.flops = gflops > 0 ? gflops * 1e9 : cuda ? 50e12 : 50e9;
  in.device.bandwidth = bandwidth_gbs > 0 ? bandwidth_gbs * 1e9 : cuda ? 200e9 : 2e9;
  in.device.memory_bytes = memory_gb > 0 ? memory_gb * 1e9 : cuda ? 80e9 : 8e9;
  // A CPU rank's resident memory after its first steps of a tiny model, less its model states (~21 MB
  // measured here, bench/RESULTS.md). Not measured for CUDA yet.
  in.device.runtime_bytes = cuda ? 0 : 21e6;
  return in;
}

absl::StatusOr<std::string> ApplyAutoLayout(v1::JobSpec* spec, int devices) {
  if (devices < 1) return absl::InvalidArgumentError(absl::StrCat("parallel.devices: ", devices, " must be at least 1"));
  std::vector<plan::Prediction> plan = plan::Plan(PlanInputFor(*spec, devices));
  if (plan.empty() || !plan[0].fits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel: auto: no layout of ", devices, " devices ",
        plan.empty() ? "can run this model and batch" : "fits the device memory", " (see tessera plan --devices ",
        devices, ")"));
  }
  const plan::Layout& l = plan[0].layout;
  auto* p = spec->mutable_parallel();
  spec::SetLayout(l, p);
  p->set_auto_layout(false);
  return absl::StrFormat("%s: predicted %.3f s/step, %.3f GB per device (of %d layouts)", l.ToString(),
                         plan[0].step_s, plan[0].memory_bytes() / 1e9, static_cast<int>(plan.size()));
}

}  // namespace tessera::client
