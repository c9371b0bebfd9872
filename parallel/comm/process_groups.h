// ProcessGroups: the communicators of one rank, one per mesh axis, built once at start-up and passed
// explicitly to every layer (no globals).
#ifndef TESSERA_PARALLEL_COMM_PROCESS_GROUPS_H_
#define TESSERA_PARALLEL_COMM_PROCESS_GROUPS_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "parallel/comm/communicator.h"
#include "parallel/mesh/process_mesh.h"

namespace tessera::parallel {

struct ProcessGroups {
  int global_rank = 0;
  std::shared_ptr<Communicator> world;
  std::shared_ptr<Communicator> dp;
  std::shared_ptr<Communicator> pp;
  std::shared_ptr<Communicator> tp;
  std::shared_ptr<Communicator> sp;
};

struct BootstrapOptions {
  std::string store_host = "127.0.0.1";  // Where rank 0 hosts the c10d TCPStore.
  int store_port = 0;                    // Required when the world has more than one rank.
  int rank = 0;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // Rendezvous and collectives.
};

// Connects to (rank 0: hosts) the TCPStore and builds this rank's Gloo groups for `mesh`. Groups of
// one rank are SelfCommunicators; a one-rank world needs no store at all.
absl::StatusOr<ProcessGroups> CreateGlooProcessGroups(const BootstrapOptions& options,
                                                      const ProcessMesh& mesh);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_COMM_PROCESS_GROUPS_H_
