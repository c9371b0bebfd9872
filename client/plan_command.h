// `tessera plan SPEC --devices N`: ranks every layout of the spec's model on N devices with the
// planner's cost model (plan/planner.h) and prints the ranking. Local; no coordinator.
#ifndef TESSERA_CLIENT_PLAN_COMMAND_H_
#define TESSERA_CLIENT_PLAN_COMMAND_H_

#include <string>
#include <vector>

namespace tessera::client {

struct LocalPlanOptions {
  std::string spec_path;
  std::vector<std::string> overrides;
  int devices = -1;  // -1: not given.
  // Device model; 0: the defaults for the spec's device (printed with the ranking).
  double gflops = 0;
  double bandwidth_gbs = 0;
  double memory_gb = 0;
  int top = 0;  // Rows to print; 0: all.
  bool json = false;
};

// Returns the process exit code.
int LocalPlanCommand(const LocalPlanOptions& options);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_PLAN_COMMAND_H_
