// tessera-worker: the long-lived daemon of one node. Registers its devices with the coordinator,
// starts and stops tessera-rank processes as told, reports them. Never links LibTorch.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "common/userfs/user_files.h"
#include "common/process/cpu_peak.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/ascii.h"
#include "common/metrics/metrics_server.h"
#include "common/net/local_address.h"
#include "common/process/find_binary.h"
#include "worker/agent.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "Address of tessera-coordinator.");
ABSL_FLAG(std::string, devices, "cpu:1", "Devices offered: cpu:N (CPU 'devices', Gloo) or cuda:N.");
ABSL_FLAG(std::string, work_dir, "tessera-worker", "Rank logs and job files go under it.");
ABSL_FLAG(std::string, name, "", "Node name, unique in the cluster (default: the host name).");
ABSL_FLAG(std::string, host, "",
          "Address other nodes' ranks reach this node's ranks on (their collectives bind to it). Default: "
          "the address this machine uses towards --coordinator (printed).");
ABSL_FLAG(std::string, pool, "",
          "The worker pool this node serves (default: the pool 'default'): it runs only jobs whose spec names "
          "it (placement.pool).");
ABSL_FLAG(std::string, labels, "", "Free-form labels, k=v,k=v (shown by `tessera workers`).");
ABSL_FLAG(std::string, store_ports, "29500-29599", "Ports rank 0's c10d store may use here (MIN-MAX).");
ABSL_FLAG(int, stop_grace_s, 10, "Seconds between SIGTERM and SIGKILL when stopping a rank.");
ABSL_FLAG(int, user_files_timeout_s, 60,
          "Seconds a read of a job's files under its output_dir (step log, rank logs) may go unanswered (a hung "
          "network mount) before the worker stops that job; the worker itself never waits on them.");
ABSL_FLAG(int, collective_timeout_s, 300,
          "A rank's rendezvous, store and each collective fail after this many seconds, naming the group's "
          "hosts (docs/fault-model.md: keep it below the coordinator's --heartbeat_timeout_s to learn which "
          "host stalled from the rank's own error).");
ABSL_FLAG(int, threads_per_rank, 0, "Intra-op threads of each rank; 0 = cores / devices.");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9465", "Prometheus /metrics address; port 0 picks one (printed).");
ABSL_FLAG(std::string, tls_ca, "", "The cluster's CA certificate (tessera certs init).");
ABSL_FLAG(std::string, tls_cert, "", "This worker's certificate (DIR/worker-NAME.pem); its name is the node name.");
ABSL_FLAG(std::string, tls_key, "", "Its private key (DIR/worker-NAME.key, mode 0600).");
ABSL_FLAG(bool, insecure, false,
          "Connect to a coordinator on a non-loopback address without TLS (no authentication). Logs a warning on "
          "every start.");
ABSL_FLAG(std::string, data_roots, "",
          "Comma-separated directories a job's inputs (data, validation data, blend sources, init_from, pretrained) "
          "must lie in. Required with TLS (docs/security.md); empty without: not confined.");
ABSL_FLAG(std::string, output_root, "",
          "The directory a job's output_dir and checkpoint.dir must lie in (with TLS: in OUTPUT_ROOT/USER, the "
          "submitting user's). Required with TLS; empty without: not confined.");
ABSL_FLAG(double, peak_tflops_per_device, 0,
          "Peak TFLOP/s of one device, the denominator of MFU. 0: for cpu, nominal fp32 FMA peak of the "
          "threads each rank gets (32 FLOP/cycle × clock from /proc/cpuinfo).");

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

// The clock of the first CPU from /proc/cpuinfo (Hz), or 2.5 GHz when it says nothing.

int64_t MemTotalBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  while (in >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024;
    in.ignore(256, '\n');
  }
  return 0;
}

int Fail(const std::string& msg) {
  std::cerr << "error: " << msg << "\n";
  return 2;
}

// The worker's name and TLS material from --name and --tls_*: with TLS the name is the certificate's,
// and the path roots are required.
absl::Status SetIdentity(tessera::worker::AgentOptions& o) {
  auto tls = tessera::rpc::DaemonTls(
      {absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key)},
      tessera::tls::Role::kWorker, "a worker certificate (tessera certs issue DIR --worker NAME)", "--coordinator",
      o.coordinator, absl::GetFlag(FLAGS_insecure));
  if (!tls.ok()) return tls.status();
  if (*tls) {
    const std::string& named = (*tls)->identity.name;
    if (o.name.empty()) o.name = named;
    if (o.name != named) {
      return absl::InvalidArgumentError("--name " + o.name + " differs from the name in --tls_cert (" + named +
                  "): the coordinator accepts a worker only under its certificate's name");
    }
    if (absl::GetFlag(FLAGS_data_roots).empty() || absl::GetFlag(FLAGS_output_root).empty()) {
      return absl::InvalidArgumentError("with TLS (several users), --data_roots and --output_root are required: a job may read and write "
                  "only inside them (docs/security.md)");
    }
    o.tls = std::move(*tls);
  } else if (!tessera::rpc::IsLoopback(o.coordinator)) {
    std::cerr << "tessera-worker: WARNING: --insecure: talking to " << o.coordinator << " without TLS; anyone on the "
              << "network can impersonate this worker or the coordinator" << std::endl;
  }
  return absl::OkStatus();
}

// The rank processes' options from the flags (the binary for the device kind, threads, timeouts).
absl::Status SetSupervisorOptions(bool cuda, tessera::worker::AgentOptions& o) {
  // GPU nodes run ranks in tessera-rank-cuda (NCCL and the fused kernels linked in).
  o.supervisor.rank_binary =
      cuda ? tessera::process::FindTesseraBinary("tessera-rank-cuda", "worker/rank", "TESSERA_RANK_CUDA_BINARY")
           : tessera::process::FindTesseraBinary("tessera-rank", "worker/rank", "TESSERA_RANK_BINARY");
  if (o.supervisor.rank_binary.empty()) {
    return absl::InvalidArgumentError(cuda ? "cannot find tessera-rank-cuda (set TESSERA_RANK_CUDA_BINARY)"
                     : "cannot find tessera-rank (set TESSERA_RANK_BINARY)");
  }
  o.supervisor.work_dir = absl::GetFlag(FLAGS_work_dir);
  o.supervisor.output_root = absl::GetFlag(FLAGS_output_root);
  o.supervisor.stop_grace = std::chrono::seconds(absl::GetFlag(FLAGS_stop_grace_s));
  if (absl::GetFlag(FLAGS_user_files_timeout_s) < 1) return absl::InvalidArgumentError("--user_files_timeout_s must be at least 1");
  o.supervisor.user_files_timeout = std::chrono::seconds(absl::GetFlag(FLAGS_user_files_timeout_s));
  o.supervisor.collective_timeout_s = absl::GetFlag(FLAGS_collective_timeout_s);
  if (o.supervisor.collective_timeout_s < 1) return absl::InvalidArgumentError("--collective_timeout_s must be at least 1");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  o.supervisor.threads_per_rank = absl::GetFlag(FLAGS_threads_per_rank) > 0 ? absl::GetFlag(FLAGS_threads_per_rank)
                                                                             : std::max(1, cores / o.device_count);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("tessera-worker --coordinator 127.0.0.1:7070 --devices cpu:2 --work_dir DIR");
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built with Mutex deadlock detection on: every lock, gRPC's own included, updates
  // a global graph of lock orders — half a core at 12,500 heartbeats/s (bench/RESULTS.md). The unit
  // tests, which run the same code in-process, keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  tessera::worker::AgentOptions o;
  o.coordinator = absl::GetFlag(FLAGS_coordinator);
  std::vector<std::string> dev = absl::StrSplit(absl::GetFlag(FLAGS_devices), ':');
  if (dev.size() != 2 || (dev[0] != "cpu" && dev[0] != "cuda") || !absl::SimpleAtoi(dev[1], &o.device_count) ||
      o.device_count < 1) {
    return Fail("--devices " + absl::GetFlag(FLAGS_devices) + ": expected cpu:N or cuda:N with N >= 1");
  }
  const bool cuda = dev[0] == "cuda";
  o.device_kind = cuda ? tessera::v1::DEVICE_KIND_CUDA : tessera::v1::DEVICE_KIND_CPU;
  // A CPU "device" gets its share of RAM; a GPU's memory is not read here (the daemon links no CUDA).
  o.device_memory_bytes = cuda ? 0 : MemTotalBytes() / o.device_count;
  o.name = absl::GetFlag(FLAGS_name);
  if (absl::Status st = SetIdentity(o); !st.ok()) return Fail(std::string(st.message()));
  auto roots = tessera::spec::ParsePathRoots(absl::GetFlag(FLAGS_data_roots), absl::GetFlag(FLAGS_output_root));
  if (!roots.ok()) return Fail(std::string(roots.status().message()));
  o.roots = *roots;
  if (o.name.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    o.name = host;
  }
  // Job specs and rank scratch: this user's alone (a work dir in /tmp that another user made first is
  // refused, an existing one of ours made 0700).
  if (absl::Status st = tessera::userfs::MakePrivateDir(absl::GetFlag(FLAGS_work_dir)); !st.ok()) {
    return Fail("--work_dir " + std::string(st.message()));
  }
  o.pool = absl::GetFlag(FLAGS_pool);
  if (std::string problem = tessera::spec::NameProblem(o.pool); !o.pool.empty() && !problem.empty()) {
    return Fail("--pool " + problem);
  }
  for (absl::string_view pair : absl::StrSplit(absl::GetFlag(FLAGS_labels), ',', absl::SkipEmpty())) {
    std::vector<std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty()) return Fail("--labels: '" + std::string(pair) + "' is not k=v");
    o.labels[kv[0]] = kv[1];
  }
  o.host = absl::GetFlag(FLAGS_host);
  if (o.host.empty()) {
    auto towards = tessera::net::LocalAddressTowards(o.coordinator);
    if (!towards.ok()) return Fail("--host not given and " + std::string(towards.status().message()));
    o.host = *towards;
    std::cout << "tessera-worker: --host not given; ranks bind to " << o.host << " (this machine's address towards "
              << o.coordinator << ")" << std::endl;
  }
  o.supervisor.host = o.host;
  if (auto iface = tessera::net::InterfaceWithAddress(o.host); iface.ok()) {
    o.supervisor.interface = *iface;
  } else if (tessera::net::IsNumericAddress(o.host)) {
    // Ranks could not bind their collectives to it.
    return Fail("--host " + o.host + ": " + std::string(iface.status().message()));
  }
  std::vector<std::string> ports = absl::StrSplit(absl::GetFlag(FLAGS_store_ports), '-');
  if (ports.size() != 2 || !absl::SimpleAtoi(ports[0], &o.store_port_min) ||
      !absl::SimpleAtoi(ports[1], &o.store_port_max) || o.store_port_min < 1 || o.store_port_max > 65535 ||
      o.store_port_min > o.store_port_max) {
    return Fail("--store_ports " + absl::GetFlag(FLAGS_store_ports) + ": expected MIN-MAX, e.g. 29500-29599");
  }
  if (absl::Status st = SetSupervisorOptions(cuda, o); !st.ok()) return Fail(std::string(st.message()));
  auto metrics_server = tessera::metrics::MetricsServer::Start(absl::GetFlag(FLAGS_metrics_listen), "worker");
  if (!metrics_server.ok()) return Fail("--metrics_listen: " + std::string(metrics_server.status().message()));
  o.metrics_address = (*metrics_server)->address();
  double peak = absl::GetFlag(FLAGS_peak_tflops_per_device) * 1e12;
  if (peak <= 0) peak = tessera::process::CpuPeakFlops(o.supervisor.threads_per_rank);
  o.supervisor.peak_flops_per_device = peak;
  o.peak_flops_per_device = peak;
  tessera::worker::WorkerMetrics metrics((*metrics_server)->registry(), peak);
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::cout << "tessera-worker: " << o.name << " offers " << absl::GetFlag(FLAGS_devices) << " to "
            << o.coordinator << std::endl;
  std::cout << "tessera-worker: metrics on http://" << o.metrics_address << "/metrics" << std::endl;
  tessera::worker::Agent agent(o, &metrics);
  agent.Run(g_stop);
  std::cout << "tessera-worker: stopped" << std::endl;
  return 0;
}
