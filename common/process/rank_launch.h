// RankLaunch: the command line and environment of one tessera-rank process, rendered in one place for
// both launchers (`tessera run` on one machine and the worker daemon on each node), so that they
// cannot drift apart. The flags are tessera-rank's (worker/rank/rank_main.cc).
#ifndef TESSERA_COMMON_PROCESS_RANK_LAUNCH_H_
#define TESSERA_COMMON_PROCESS_RANK_LAUNCH_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessera::process {

struct RankLaunch {
  std::string binary;                  // tessera-rank or tessera-rank-cuda.
  std::string spec_path;               // The resolved job spec (job.json).
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;                  // Its device on this machine.
  std::string store_host = "127.0.0.1";  // Where rank 0 hosts the c10d store.
  int store_port = 0;
  std::string host = "127.0.0.1";      // This machine's address: the rank's collectives bind to it.
  int threads = 1;                     // Intra-op threads (also OMP_NUM_THREADS and MKL_NUM_THREADS).
  int timeout_s = 300;                 // Rendezvous and collective timeout.
  int64_t dump_at_step = 0;            // > 0: debug dump of weights and gradients after that step.
  double peak_flops_per_device = 0;    // > 0: the rank reports MFU against it (steps.jsonl "mfu").
  // The network interface that has `host` ("" unknown): NCCL's and Gloo's socket interface.
  std::string interface;
  // A cluster attempt's fencing token (tessera-rank --fence_job, --fence_attempt; see
  // formats/checkpoint/attempt_fence.h). fence_attempt 0: unfenced (`tessera run`).
  std::string fence_job;
  int64_t fence_attempt = 0;

  std::vector<std::string> Argv() const;
  // Added to the launcher's own environment.
  std::map<std::string, std::string> Env() const;
};

}  // namespace tessera::process

#endif  // TESSERA_COMMON_PROCESS_RANK_LAUNCH_H_
