// The CLI's coordinator commands: submit, jobs, job, cancel, workers. Each returns a client exit
// code (exit_codes.h) and prints errors as one line each, starting with "error: ".
#ifndef TESSERA_CLIENT_CLUSTER_COMMANDS_H_
#define TESSERA_CLIENT_CLUSTER_COMMANDS_H_

#include <optional>
#include <string>
#include <vector>

#include "common/rpc/tls.h"

namespace tessera::client {

struct ClusterOptions {
  std::string coordinator = "127.0.0.1:7070";  // --coordinator, or $TESSERA_COORDINATOR.
  bool json = false;                           // --output json.
  int timeout_s = 10;                          // Deadline of each unary call.
  int follow_timeout_s = 0;                    // --timeout of follow / logs --follow (0: until the job ends).
  std::optional<rpc::TlsMaterial> tls;         // Mutual TLS (--tls-*, $TESSERA_TLS_*); none: insecure.
};

// Loads o->tls from `files` (nothing when all are empty). Without TLS a coordinator that is not on a
// loopback address is refused unless `insecure`. Prints the error and returns false on failure.
bool PrepareConnection(const rpc::TlsFiles& files, bool insecure, ClusterOptions* o);

int SubmitCommand(const ClusterOptions& o, const std::string& spec_path, const std::vector<std::string>& overrides,
                  int max_restarts, bool follow);
int FollowCommand(const ClusterOptions& o, const std::string& job_id);
int JobsCommand(const ClusterOptions& o);
int JobCommand(const ClusterOptions& o, const std::string& job_id);
int CancelCommand(const ClusterOptions& o, const std::string& job_id);
int WorkersCommand(const ClusterOptions& o);
// Admins: releases worker `name` from its bound certificate key (ReleaseWorkerKey).
int ReleaseWorkerKeyCommand(const ClusterOptions& o, const std::string& name);
int PlanCommand(const ClusterOptions& o, const std::string& spec_path, const std::vector<std::string>& overrides);
// Prints rank `rank`'s log; with `follow`, keeps printing until the job ends.
int LogsCommand(const ClusterOptions& o, const std::string& job_id, int rank, bool follow);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_CLUSTER_COMMANDS_H_
