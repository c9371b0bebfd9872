// `tessera run`: the local launcher (like torchrun --standalone). Validates the spec, starts
// dp·tp·pp·sp tessera-rank processes on this machine, draws a live progress line from
// OUTPUT_DIR/steps.jsonl, and stops every rank when one fails or on Ctrl-C. No LibTorch here.
#ifndef TESSERA_CLIENT_LOCAL_LAUNCHER_H_
#define TESSERA_CLIENT_LOCAL_LAUNCHER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::client {

struct LaunchOptions {
  std::string spec_path;
  std::vector<std::string> overrides;  // --set k=v, in order.
  std::string rank_binary;             // "" = found next to this binary (FindRankBinary()).
  int64_t dump_at_step = 0;            // Passed to every rank (debug dump of weights and grads).
  int threads_per_rank = 0;            // 0 = cores / ranks (at least 1).
  bool quiet = false;                  // No progress output.
  int devices = 0;                     // parallel: auto: devices to plan for (0: the spec's parallel.devices).
};

// Runs the job to its end. Returns a client exit code (exit_codes.h); errors go to stderr as lines
// starting with "error: ".
int RunLocal(const LaunchOptions& options);

// Path of the tessera-rank executable: $TESSERA_RANK_BINARY, else next to /proc/self/exe, else in
// its Bazel runfiles or bazel-bin layout. "" when none exists.
// device cuda: tessera-rank-cuda ($TESSERA_RANK_CUDA_BINARY, ...), which links the GPU backend.
std::string FindRankBinary(bool cuda = false);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_LOCAL_LAUNCHER_H_
