#include "parallel/comm/process_groups.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "parallel/comm/gloo_communicator.h"
#include "parallel/comm/self_communicator.h"

namespace tessera::parallel {

using layout::Axis;
namespace {

std::atomic<NcclFactory> nccl_factory{nullptr};

absl::StatusOr<std::shared_ptr<Communicator>> MakeGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                        const std::string& axis,
                                                        const std::vector<int>& members, int rank,
                                                        const BootstrapOptions& options,
                                                        const std::vector<std::string>& rank_hosts) {
  std::string name = absl::StrCat(axis, "[", absl::StrJoin(members, ","), "]");
  if (members.size() == 1) return std::make_shared<SelfCommunicator>(rank, name);
  if (options.backend == CommBackend::kNccl) {
    NcclFactory factory = nccl_factory.load();
    if (factory == nullptr) {
      return absl::FailedPreconditionError(
          "this binary has no NCCL backend: device cuda runs in tessera-rank-cuda (built with the CUDA toolkit)");
    }
    return factory(store, name, members, rank, options.device_index, options.timeout);
  }
  std::vector<std::string> hosts;
  for (int m : members) hosts.push_back(m < static_cast<int>(rank_hosts.size()) ? rank_hosts[m] : "");
  auto comm = GlooCommunicator::Create(store, name, members, rank, options.timeout, options.local_host, hosts);
  if (!comm.ok()) return comm.status();
  return std::shared_ptr<Communicator>(std::move(*comm));
}

}  // namespace

void RegisterNcclFactory(NcclFactory factory) { nccl_factory.store(factory); }

absl::StatusOr<ProcessGroups> CreateProcessGroups(const BootstrapOptions& options,
                                                      const layout::RankGenerator& mesh) {
  const int world = mesh.world_size();
  if (options.rank < 0 || options.rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", options.rank, " outside world of ", world));
  }
  c10::intrusive_ptr<c10d::Store> store;
  if (world > 1) {
    if (options.store_port <= 0 || options.store_port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("store port ", options.store_port, " is not valid"));
    }
    try {
      c10d::TCPStoreOptions opts;
      opts.port = static_cast<uint16_t>(options.store_port);
      opts.isServer = options.rank == 0;
      opts.numWorkers = world;
      opts.waitWorkers = false;
      opts.timeout = options.timeout;
      store = c10::make_intrusive<c10d::TCPStore>(options.store_host, opts);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("cannot reach the store at ", options.store_host, ":",
                                                 options.store_port, ": ", e.what()));
    }
  }
  // Every rank's host, for error messages that say which host a failed collective waited for: each
  // rank publishes its own and reads the others' (all ranks bootstrap together, so this waits little).
  std::vector<std::string> rank_hosts(world);
  rank_hosts[options.rank] = options.local_host;
  if (store) {
    try {
      const std::string& h = options.local_host;
      store->set(absl::StrCat("tessera/host/", options.rank), std::vector<uint8_t>(h.begin(), h.end()));
      for (int r = 0; r < world; ++r) {
        const std::vector<uint8_t> v = store->get(absl::StrCat("tessera/host/", r));
        rank_hosts[r].assign(v.begin(), v.end());
      }
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("rank ", options.rank, " on ", options.local_host,
                                                 ": not every rank reached the store at ", options.store_host, ":",
                                                 options.store_port, " in time: ", e.what()));
    }
  }
  ProcessGroups groups;
  groups.global_rank = options.rank;
  std::vector<int> all(world);
  for (int i = 0; i < world; ++i) all[i] = i;
  struct Want {
    const char* name;
    std::shared_ptr<Communicator>* out;
    std::vector<int> members;
  };
  std::vector<Want> wants = {
      {"world", &groups.world, all},
      {"dp", &groups.dp, mesh.GroupRanks(options.rank, Axis::kDp)},
      {"pp", &groups.pp, mesh.GroupRanks(options.rank, Axis::kPp)},
      {"tp", &groups.tp, mesh.GroupRanks(options.rank, Axis::kTp)},
      {"sp", &groups.sp, mesh.GroupRanks(options.rank, Axis::kSp)},
  };
  if (mesh.size(Axis::kSp) > 1) {
    wants.push_back({"dpsp", &groups.dp_sp, mesh.GroupRanks(options.rank, std::vector<Axis>{Axis::kDp, Axis::kSp})});
  }
  if (mesh.ep() > 1) {
    wants.push_back({"ep", &groups.ep, mesh.ExpertParallelGroup(options.rank)});
    wants.push_back({"expertdp", &groups.expert_dp, mesh.ExpertReplicaGroup(options.rank)});
  }
  std::vector<std::shared_ptr<Communicator>> axes(options.tp_grid.size());
  for (size_t a = 0; a < options.tp_grid.size(); ++a) {
    auto members = mesh.TpGridAxisGroup(options.rank, options.tp_grid, static_cast<int>(a));
    if (!members.ok()) return members.status();
    wants.push_back({nullptr, &axes[a], *std::move(members)});
  }
  const std::vector<int> pp_ranks = mesh.GroupRanks(options.rank, Axis::kPp);
  if (options.rank == pp_ranks.front() || options.rank == pp_ranks.back()) {
    std::vector<int> ends = {pp_ranks.front()};
    if (pp_ranks.size() > 1) ends.push_back(pp_ranks.back());
    wants.push_back({"embed", &groups.embed, ends});
  }
  for (Want& w : wants) {
    auto comm = MakeGroup(store, w.name ? w.name : "tpaxis", w.members, options.rank, options, rank_hosts);
    if (!comm.ok()) return comm.status();
    *w.out = std::move(*comm);
  }
  if (!groups.dp_sp) groups.dp_sp = groups.dp;
  if (!groups.ep) groups.ep = std::make_shared<SelfCommunicator>(options.rank, absl::StrCat("ep[", options.rank, "]"));
  if (!groups.expert_dp) groups.expert_dp = groups.dp_sp;
  groups.tp_axes = std::move(axes);
  return groups;
}

}  // namespace tessera::parallel
