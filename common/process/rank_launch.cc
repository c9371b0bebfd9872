#include "common/process/rank_launch.h"

#include "absl/strings/str_cat.h"

namespace tessera::process {

std::vector<std::string> RankLaunch::Argv() const {
  std::vector<std::string> argv = {binary,
                                   "--spec=" + spec_path,
                                   absl::StrCat("--rank=", rank),
                                   absl::StrCat("--world_size=", world_size),
                                   absl::StrCat("--local_rank=", local_rank),
                                   "--store_host=" + store_host,
                                   absl::StrCat("--store_port=", store_port),
                                   "--host=" + host,
                                   absl::StrCat("--threads=", threads),
                                   absl::StrCat("--timeout_s=", timeout_s)};
  if (dump_at_step > 0) argv.push_back(absl::StrCat("--dump_at_step=", dump_at_step));
  if (peak_flops_per_device > 0) argv.push_back(absl::StrCat("--peak_flops_per_device=", peak_flops_per_device));
  if (fence_attempt > 0) {
    argv.push_back("--fence_job=" + fence_job);
    argv.push_back(absl::StrCat("--fence_attempt=", fence_attempt));
  }
  return argv;
}

std::map<std::string, std::string> RankLaunch::Env() const {
  // Thread pools of OpenMP and of MKL's BLAS each default to every core: with several ranks per
  // machine that oversubscribes the cores (it halved the speed, docs/architecture.md).
  std::map<std::string, std::string> env = {{"OMP_NUM_THREADS", absl::StrCat(threads)},
                                            {"MKL_NUM_THREADS", absl::StrCat(threads)}};
  if (!interface.empty()) {
    env["NCCL_SOCKET_IFNAME"] = "=" + interface;  // "=": exactly this name, not a prefix.
    env["GLOO_SOCKET_IFNAME"] = interface;
  }
  return env;
}

}  // namespace tessera::process
