// Test helper: runs a function in N forked processes, one per rank, on 127.0.0.1.
//
// Call it before the test process itself has used torch (forking after OpenMP threads started is
// unsafe); each child runs `fn(rank, store_port)` and exits with its status.
#ifndef TESSERA_PARALLEL_TESTING_MULTI_PROCESS_H_
#define TESSERA_PARALLEL_TESTING_MULTI_PROCESS_H_

#include <functional>

#include "absl/status/status.h"

namespace tessera::parallel::testing {

// Forks `world` processes running `fn`; returns OK when every one returned OK, otherwise the first
// failure (the child's message is printed to stderr by the child). Kills all after `timeout_s`.
absl::Status RunRanks(int world, const std::function<absl::Status(int rank, int port)>& fn,
                      int timeout_s = 120);

}  // namespace tessera::parallel::testing

#endif  // TESSERA_PARALLEL_TESTING_MULTI_PROCESS_H_
