// tessera-coordinator: the cluster's control daemon. Serves the CLI (CoordinatorService) and the
// worker daemons (WorkerService) on one gRPC address; keeps its state in a SQLite file.
// Every flag can also come from a file: --flagfile=coordinator.flags (one --flag=value per line).
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <optional>
#include <vector>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/job_store.h"
#include "coordinator/scheduling_policy.h"
#include "coordinator/worker_service.h"
#include "common/metrics/metrics_server.h"
#include "common/rpc/channel.h"
#include "common/rpc/tls.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/heartbeat_timing.h"
#include "coordinator/ui/ui_server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7070", "gRPC address; port 0 picks a free port (printed).");
ABSL_FLAG(std::string, db, "tessera-coordinator.db", "SQLite file holding every job.");
ABSL_FLAG(int, heartbeat_interval_ms, -1,
          "How often workers heartbeat (sent to them at registration). -1: 5000, or 1000 when only "
          "--heartbeat_timeout_s is given (docs/fault-model.md).");
ABSL_FLAG(int, heartbeat_timeout_s, -1,
          "Seconds without a heartbeat after which a worker is lost. -1: the lease plus one interval (20 s with "
          "the defaults).");
ABSL_FLAG(int, worker_lease_ms, -1,
          "A worker that has not completed a heartbeat for this long stops its ranks (they may be placed "
          "elsewhere); a lost worker's jobs wait until its lease and stop grace have surely passed. Above the "
          "interval, below the heartbeat timeout; -1: 3 intervals (15 s), or the heartbeat timeout less 2 s (at "
          "least half of it) when only --heartbeat_timeout_s is given; 0: no lease (ranks of a worker cut off "
          "from the coordinator keep running: two attempts of a job can overlap).");
ABSL_FLAG(int, start_timeout_s, 120, "Seconds for every rank of a placed attempt to start before it is retried.");
ABSL_FLAG(int, progress_timeout_s, 1800,
          "Seconds a running job may go without a new training step before it counts as hung and is restarted "
          "(0: never). Above the longest start-up, checkpoint or evaluation.");
ABSL_FLAG(int, unkillable_rank_timeout_s, 120,
          "A rank of an earlier attempt that a live worker still lists this long after it was told to stop "
          "is given up on: its job is placed elsewhere and its device quarantined until the worker no longer "
          "lists it (0: wait as long as it is listed).");
ABSL_FLAG(int, backfill_limit_s, 600,
          "Seconds a job that does not fit lets later jobs that fit go first; then it holds its devices' kind.");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464", "Prometheus /metrics address; port 0 picks one (printed).");
ABSL_FLAG(std::string, ui_listen, "127.0.0.1:9480",
          "Web dashboard address (/ui; HTTPS asking for a user certificate when TLS is on); port 0 picks one "
          "(printed); empty: no dashboard.");
ABSL_FLAG(int, ui_refresh_s, 5, "Seconds after which dashboard pages reload themselves (0: never).");
ABSL_FLAG(std::string, tls_ca, "", "The cluster's CA certificate (tessera certs init): clients must present a certificate it signed.");
ABSL_FLAG(std::string, tls_cert, "", "This coordinator's certificate (DIR/coordinator.pem).");
ABSL_FLAG(std::string, tls_key, "", "Its private key (DIR/coordinator.key, mode 0600).");
ABSL_FLAG(bool, insecure, false,
          "Serve without TLS on a non-loopback --listen address: no authentication, no authorization. Logs a warning "
          "on every start. Without TLS on a loopback address nothing is checked either (every local user is trusted).");
ABSL_FLAG(std::string, data_roots, "",
          "Comma-separated directories a job's inputs (checked on submission, where this machine sees them) (data, validation data, blend sources, init_from, pretrained) "
          "must lie in. Required with TLS (docs/security.md); empty without: not confined.");
ABSL_FLAG(std::string, output_root, "",
          "The directory a job's output_dir and checkpoint.dir must lie in (with TLS: in OUTPUT_ROOT/USER, the "
          "submitting user's). Required with TLS; empty without: not confined.");
ABSL_FLAG(std::vector<std::string>, admins, {}, "Users (certificate names) who may see and cancel every job.");
ABSL_FLAG(std::string, policy, "",
          "Scheduling policy (YAML: teams, their members and quotas, each team's max_priority; docs/scheduling.md): "
          "a job's scheduling.priority above its owner's team cap, or from a user in no team, is refused. Needs TLS "
          "(users are certificate names). Without it: every user any priority.");
ABSL_FLAG(int, max_streams_per_client, 16, "WatchJob streams one user (without TLS: one address) may hold open at once.");
ABSL_FLAG(int, max_threads, 512, "Threads the gRPC server may use at most (each open WatchJob stream holds one; workers' assignment streams and heartbeats hold none).");

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

tessera::coordinator::CoordinatorOptions OptionsFromFlags(const tessera::spec::PathRoots& roots,
                                                          const tessera::coordinator::HeartbeatTiming& timing,
                                                          tessera::coordinator::CoordinatorMetrics& metrics) {
  tessera::coordinator::CoordinatorOptions options;
  options.roots = roots;
  const tessera::coordinator::HeartbeatTiming& t = timing;
  options.heartbeat_interval = t.interval;
  options.heartbeat_timeout = t.timeout;
  options.worker_lease = t.lease;
  options.name_hold = t.name_hold;
  options.start_timeout = absl::Seconds(absl::GetFlag(FLAGS_start_timeout_s));
  options.backfill_limit = absl::Seconds(absl::GetFlag(FLAGS_backfill_limit_s));
  options.progress_timeout = absl::Seconds(std::max(0, absl::GetFlag(FLAGS_progress_timeout_s)));
  options.unkillable_rank_timeout = absl::Seconds(std::max(0, absl::GetFlag(FLAGS_unkillable_rank_timeout_s)));
  options.on_scheduled = [&metrics](absl::Duration d) { metrics.ObserveScheduling(absl::ToDoubleSeconds(d)); };
  options.on_transition = [](const std::string& line) {
    std::cerr << "tessera-coordinator: job " << line << std::endl;
  };
  return options;
}

// Until SIGINT or SIGTERM: every 250 ms the liveness check (lost workers, adoption and start
// deadlines) and the job and worker counts for the metrics.
void Serve(tessera::coordinator::Coordinator& coordinator, tessera::coordinator::CoordinatorMetrics& metrics) {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  while (!g_stop) {
    coordinator.CheckLiveness();
    metrics.SetCounts(coordinator.JobsByState(), coordinator.WorkersByState());
    const auto beats = coordinator.HeartbeatsByPath();
    metrics.SetHeartbeats(beats.fast, beats.locked);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

// The dashboard on --ui_listen (with the daemon's certificate when it serves TLS).
absl::StatusOr<std::unique_ptr<tessera::coordinator::ui::UiServer>> StartUi(
    bool tls, tessera::coordinator::Coordinator* coordinator, tessera::coordinator::Authorizer* authorizer) {
  tessera::coordinator::ui::UiServerOptions ui_options;
  ui_options.listen = absl::GetFlag(FLAGS_ui_listen);
  ui_options.refresh_s = std::max(0, absl::GetFlag(FLAGS_ui_refresh_s));
  if (tls) ui_options.tls = {absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key)};
  return tessera::coordinator::ui::UiServer::Start(ui_options, coordinator, authorizer);
}

// The gRPC server of `services` on `listen`; null (or *port 0) when it cannot listen there.
std::unique_ptr<grpc::Server> StartGrpc(const std::string& listen, const std::optional<tessera::rpc::TlsMaterial>& tls,
                                        const std::vector<grpc::Service*>& services, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, tessera::rpc::ServerCredentialsFor(tls), port);
  grpc::ResourceQuota quota("tessera-coordinator");
  quota.SetMaxThreads(std::max(16, absl::GetFlag(FLAGS_max_threads)));
  builder.SetResourceQuota(quota);
  builder.SetMaxReceiveMessageSize(tessera::rpc::kMaxRequestBytes);
  builder.SetMaxSendMessageSize(tessera::rpc::kMaxResponseBytes);
  for (grpc::Service* service : services) builder.RegisterService(service);
  return builder.BuildAndStart();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("tessera-coordinator --listen 127.0.0.1:7070 --db tessera.db");
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built with Mutex deadlock detection on: every lock, gRPC's own included, updates
  // a global graph of lock orders — half a core at 12,500 heartbeats/s (bench/RESULTS.md). The unit
  // tests, which run the same code in-process, keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  auto timing = tessera::coordinator::HeartbeatTimingOf({absl::GetFlag(FLAGS_heartbeat_interval_ms),
                                                         absl::GetFlag(FLAGS_heartbeat_timeout_s),
                                                         absl::GetFlag(FLAGS_worker_lease_ms)});
  if (!timing.ok()) {
    std::cerr << "error: " << timing.status().message() << "\n";
    return 2;
  }
  auto store = tessera::coordinator::JobStore::Open({absl::GetFlag(FLAGS_db)});
  if (!store.ok()) {
    std::cerr << "error: " << store.status().message() << "\n";
    return 2;
  }
  auto metrics_server = tessera::metrics::MetricsServer::Start(absl::GetFlag(FLAGS_metrics_listen), "coordinator");
  if (!metrics_server.ok()) {
    std::cerr << "error: --metrics_listen: " << metrics_server.status().message() << "\n";
    return 2;
  }
  tessera::coordinator::CoordinatorMetrics metrics((*metrics_server)->registry());
  auto roots = tessera::spec::ParsePathRoots(absl::GetFlag(FLAGS_data_roots), absl::GetFlag(FLAGS_output_root));
  if (!roots.ok()) {
    std::cerr << "error: " << roots.status().message() << "\n";
    return 2;
  }
  const bool tls_requested = !absl::GetFlag(FLAGS_tls_ca).empty() || !absl::GetFlag(FLAGS_tls_cert).empty() ||
                             !absl::GetFlag(FLAGS_tls_key).empty();
  if (tls_requested && (roots->data.empty() || roots->output.empty())) {
    std::cerr << "error: with TLS (several users), --data_roots and --output_root are required: a job may read and "
                 "write only inside them, and logs are served only from inside --output_root (docs/security.md)\n";
    return 2;
  }
  tessera::coordinator::CoordinatorOptions options = OptionsFromFlags(*roots, *timing, metrics);
  if (const std::string path = absl::GetFlag(FLAGS_policy); !path.empty()) {
    if (!tls_requested) {
      std::cerr << "error: --policy needs TLS (--tls_ca, --tls_cert, --tls_key): without certificates callers are "
                   "unknown, so no team can be told from another\n";
      return 2;
    }
    auto policy = tessera::coordinator::LoadSchedulingPolicy(path);
    if (!policy.ok()) {
      std::cerr << "error: --policy: " << policy.status().message() << "\n";
      return 2;
    }
    options.policy = std::move(*policy);
    const size_t teams = options.policy.teams.size();
    std::cerr << "tessera-coordinator: scheduling policy " << path << ": " << teams << (teams == 1 ? " team" : " teams")
              << "\n";
  }
  tessera::coordinator::Coordinator coordinator(std::move(options), std::move(*store));
  if (absl::Status s = coordinator.Recover(); !s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return 1;
  }
  const std::string listen = absl::GetFlag(FLAGS_listen);
  auto daemon_tls = tessera::rpc::DaemonTls(
      {absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key)},
      tessera::tls::Role::kCoordinator, "the coordinator's certificate (DIR/coordinator.pem from tessera certs init)",
      "--listen", listen, absl::GetFlag(FLAGS_insecure));
  if (!daemon_tls.ok()) {
    std::cerr << "error: " << daemon_tls.status().message() << "\n";
    return 2;
  }
  const std::optional<tessera::rpc::TlsMaterial> tls = std::move(*daemon_tls);
  if (!tls && !tessera::rpc::IsLoopback(listen)) {
    std::cerr << "tessera-coordinator: WARNING: --insecure: serving " << listen << " without TLS; anyone who can reach "
              << "it can submit, read and cancel any job and register as any worker\n";
  }
  tessera::coordinator::AuthorizerOptions auth_options;
  auth_options.tls = tls.has_value();
  for (const std::string& a : absl::GetFlag(FLAGS_admins)) auth_options.admins.insert(a);
  tessera::coordinator::Authorizer authorizer(auth_options, &metrics);
  tessera::coordinator::CoordinatorServiceImpl client_api(&coordinator, &metrics, &authorizer,
                                                          absl::GetFlag(FLAGS_max_streams_per_client));
  tessera::coordinator::WorkerServiceImpl worker_api(&coordinator, &metrics, &authorizer);
  std::unique_ptr<tessera::coordinator::ui::UiServer> ui;
  if (!absl::GetFlag(FLAGS_ui_listen).empty()) {
    auto started = StartUi(tls.has_value(), &coordinator, &authorizer);
    if (!started.ok()) {
      std::cerr << "error: --ui_listen: " << started.status().message() << "\n";
      return 2;
    }
    ui = std::move(*started);
  }
  int port = 0;
  std::unique_ptr<grpc::Server> server = StartGrpc(listen, tls, {&client_api, &worker_api}, &port);
  if (server == nullptr || port == 0) {
    std::cerr << "error: --listen " << listen << ": cannot listen there\n";
    return 2;
  }
  const std::string host = listen.substr(0, listen.rfind(':'));
  std::cout << "tessera-coordinator: listening on " << host << ":" << port
            << (tls ? " (mutual TLS)" : " (no TLS: callers are not authenticated)") << std::endl;
  std::cout << "tessera-coordinator: metrics on http://" << (*metrics_server)->address() << "/metrics" << std::endl;
  if (ui) std::cout << "tessera-coordinator: dashboard on " << ui->url() << std::endl;
  Serve(coordinator, metrics);
  std::cout << "tessera-coordinator: shutting down" << std::endl;
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
