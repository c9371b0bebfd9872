// tessera-rank: one rank of a training job. Started by `tessera run` (or a worker daemon) with the
// job's resolved spec, its rank, the world size and the address of the job's c10d store.
//
// Exit status 0 when the job's steps are done, 1 on any error (printed to stderr as one line
// starting with "error: "), 2 on bad arguments.
#include <ATen/Parallel.h>
#include <malloc.h>

#include <cstdio>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "spec/job_spec.h"
#include "layout/rank_generator.h"
#include "layout/tp_grid.h"
#include "parallel/comm/process_groups.h"
#include "parallel/device/live_bytes.h"
#include "parallel/models/decoder.h"
#include "parallel/train/trainer.h"
#include "worker/rank/spec_to_options.h"

ABSL_FLAG(std::string, spec, "", "Resolved job spec (YAML or JSON).");
ABSL_FLAG(int, rank, 0, "Global rank of this process.");
ABSL_FLAG(int, world_size, 1, "Number of ranks; must equal dp·tp·pp·sp of the spec.");
ABSL_FLAG(std::string, store_host, "127.0.0.1", "Host of the c10d TCPStore (rank 0 hosts it).");
ABSL_FLAG(int, store_port, 0, "Port of the c10d TCPStore.");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "This node's address, which the job's other nodes reach: Gloo binds to it (the worker's --host).");
ABSL_FLAG(int, threads, 1, "Intra-op threads of this rank.");
ABSL_FLAG(double, peak_flops_per_device, 0, "Peak FLOP/s of one device: MFU in steps.jsonl (0: not reported).");
ABSL_FLAG(int, local_rank, -1, "Index of this rank on its machine (its GPU); default: --rank.");
ABSL_FLAG(int64_t, dump_at_step, 0, "Debug: write full weights and gradients after this step.");
ABSL_FLAG(int, timeout_s, 300, "Rendezvous and collective timeout in seconds.");
ABSL_FLAG(std::string, fence_job, "", "The job's identity in the attempt's fencing token (set by the worker).");
ABSL_FLAG(int64_t, fence_attempt, 0,
          "The attempt's number in its fencing token: rank 0 claims the output directory for it and stops "
          "writing once a newer attempt claims it (0: unfenced).");

namespace tessera::rank {
namespace {

absl::Status RunRank() {
  auto spec = spec::LoadJobSpec(absl::GetFlag(FLAGS_spec), {});
  if (!spec.ok()) return spec.status();
  const int world = spec::WorldSize(*spec);
  if (world != absl::GetFlag(FLAGS_world_size)) {
    return absl::InvalidArgumentError(absl::StrCat("--world_size ", absl::GetFlag(FLAGS_world_size),
                                                   " differs from the spec's dp·tp·pp·sp = ", world));
  }
  parallel::TrainerOptions options = ToTrainerOptions(*spec);
  options.dump_at_step = absl::GetFlag(FLAGS_dump_at_step);
  options.peak_flops_per_device = absl::GetFlag(FLAGS_peak_flops_per_device);
  options.fence = {absl::GetFlag(FLAGS_fence_job), absl::GetFlag(FLAGS_fence_attempt)};
  const int local_rank = absl::GetFlag(FLAGS_local_rank);
  options.device.local_rank = local_rank >= 0 ? local_rank : absl::GetFlag(FLAGS_rank);
  auto mesh = layout::RankGenerator::Create(options.layout);
  if (!mesh.ok()) return mesh.status();
  parallel::BootstrapOptions boot;
  boot.store_host = absl::GetFlag(FLAGS_store_host);
  boot.store_port = absl::GetFlag(FLAGS_store_port);
  boot.local_host = absl::GetFlag(FLAGS_host);
  boot.rank = absl::GetFlag(FLAGS_rank);
  boot.timeout = std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s));
  if (options.device.kind == parallel::DeviceKind::kCuda) {
    boot.backend = parallel::CommBackend::kNccl;
    boot.device_index = options.device.local_rank;
  }
  // Grid tensor parallelism: the tp group's axes.
  boot.tp_grid = layout::TpGridOf(options.layout.tp_mode, options.layout.tp, options.layout.tp_depth).Axes();
  auto groups = parallel::CreateProcessGroups(boot, *mesh);
  if (!groups.ok()) return groups.status();
  auto trainer = parallel::Trainer::Create(options, *groups);
  if (!trainer.ok()) return trainer.status();
  return (*trainer)->Run();
}

}  // namespace
}  // namespace tessera::rank

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("tessera-rank --spec FILE --rank R --world_size W --store_port P");
  absl::ParseCommandLine(argc, argv);
  // A training step frees and re-allocates the same activation buffers every step. glibc would
  // return them to the kernel (munmap / heap trim) and fault the pages back in on the next step;
  // measured ~6% of step time on the demo GPT. Keep freed memory in the process instead.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // Host tensor bytes really alive (reported per step next to resident memory, which also holds what
  // the C library kept after frees).
  tessera::parallel::InstallLiveBytesCounter();
  const int threads = std::max(1, absl::GetFlag(FLAGS_threads));
  at::set_num_threads(threads);
  at::set_num_interop_threads(1);
  absl::Status status;
  try {
    status = tessera::rank::RunRank();
  } catch (const std::exception& e) {
    status = absl::InternalError(e.what());
  }
  if (!status.ok()) {
    // One line: the first line of the message (c10::Error appends a backtrace).
    std::string msg(status.message());
    std::cerr << "error: rank " << absl::GetFlag(FLAGS_rank) << ": " << msg.substr(0, msg.find('\n')) << std::endl;
    return 1;
  }
  return 0;
}
