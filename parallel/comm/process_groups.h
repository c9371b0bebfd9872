// ProcessGroups: the communicators of one rank, one per mesh axis, built once at start-up and passed
// explicitly to every layer (no globals).
#ifndef TESSERA_PARALLEL_COMM_PROCESS_GROUPS_H_
#define TESSERA_PARALLEL_COMM_PROCESS_GROUPS_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/comm/communicator.h"
#include "layout/rank_generator.h"
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace tessera::parallel {

struct ProcessGroups {
  int global_rank = 0;
  std::shared_ptr<Communicator> world;
  std::shared_ptr<Communicator> dp;
  std::shared_ptr<Communicator> pp;
  std::shared_ptr<Communicator> tp;
  std::shared_ptr<Communicator> sp;
  // The ranks holding the same parameters (same pp and tp coordinates): dp × sp. Gradients are
  // summed over it (each rank's loss weighs its share: Trainer::LossWeight). The dp group itself when
  // sp = 1.
  std::shared_ptr<Communicator> dp_sp;
  // The first and the last pipeline stage of this rank's pp group, which both hold the tied token
  // embedding (its gradient is summed between them). Null on the stages in between; a group of one
  // when pp = 1.
  std::shared_ptr<Communicator> embed;
  // 2D / 2.5D / 3D tensor parallelism (BootstrapOptions::tp_grid): one group per grid axis a, the tp
  // ranks that differ from this one only in coordinate a (ranked by it). Empty for 1D.
  std::vector<std::shared_ptr<Communicator>> tp_axes;
  // Expert parallelism: the ep ranks a Mixture of Experts' experts are split over (tokens are exchanged
  // in it; layout::RankGenerator::ExpertParallelGroup), and the replicas of this rank's experts (their
  // gradients are reduced over it): RankGenerator::ExpertDataGroup × sp. With ep = 1: a group of one,
  // and dp_sp.
  std::shared_ptr<Communicator> ep;
  std::shared_ptr<Communicator> expert_dp;
};

enum class CommBackend {
  kGloo,  // CPU tensors (c10d ProcessGroupGloo).
  kNccl,  // CUDA tensors; needs a binary that links //parallel/comm:nccl (tessera-rank-cuda).
};

struct BootstrapOptions {
  CommBackend backend = CommBackend::kGloo;
  int device_index = 0;                  // NCCL: this rank's GPU, cuda:device_index.
  std::string store_host = "127.0.0.1";  // Where rank 0 hosts the c10d TCPStore.
  std::string local_host = "127.0.0.1";  // This node's address: Gloo's pairs bind to it (the worker's
                                         // --host); loopback only when the whole job is on one machine.
  int store_port = 0;                    // Required when the world has more than one rank.
  int rank = 0;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // Rendezvous and collectives.
  // Non-empty: the tp group is a grid with these axis sizes (major first, product tp; see GridSplit in
  // parallel/models/param_layout.h) and tp_axes are built.
  std::vector<int> tp_grid;
};

// Connects to (rank 0: hosts) the TCPStore and builds this rank's groups with the chosen
// backend, every group taken from `mesh` (the layout's rank generator). Groups of one rank are SelfCommunicators; a one-rank world needs no store at all.
absl::StatusOr<ProcessGroups> CreateProcessGroups(const BootstrapOptions& options, const layout::RankGenerator& mesh);

// How the NCCL backend is made: registered at start-up by //parallel/comm:nccl, so that CPU-only
// binaries carry no CUDA libraries.
using NcclFactory = absl::StatusOr<std::shared_ptr<Communicator>> (*)(
    const c10::intrusive_ptr<c10d::Store>& store, const std::string& name, const std::vector<int>& members,
    int global_rank, int device_index, std::chrono::milliseconds timeout);
void RegisterNcclFactory(NcclFactory factory);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_COMM_PROCESS_GROUPS_H_
