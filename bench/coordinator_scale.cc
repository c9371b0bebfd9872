// Benchmark: the coordinator at cluster scale with production heartbeat timing (issue 54's restated
// goal). N simulated workers, each on a connection of its own — plaintext, or mutual TLS with a
// certificate of its own, as deployed — register, hold their assignment streams open and heartbeat
// every --interval_ms (the coordinator's default, 5 s), spread evenly; they come from --clients load
// processes (this binary run again with --client=K), pinned with taskset to --client_cpus while the
// coordinator runs on --coordinator_cpus, so that the two never share a core and the coordinator's
// CPU (read from /proc/PID/stat over the heartbeat phase) is its own. A client keeps each
// connection (and its TLS session) open for the whole run, as a worker does.
//
// Measured per mode: heartbeats answered per second, latency p50/p99 (from the clients: send to
// reply), failed heartbeats, the coordinator's CPU share and CPU per heartbeat. Then failure
// detection: a 1-rank job is placed on one of two workers of the pool "victim" (both with a real
// worker's stop grace, 10 s, and stop delay, 6.2 s); at --silence_s into the phase its worker stops
// heartbeating; the coordinator's view is polled every 50 ms: when the worker is LOST (counted from its
// last heartbeat sent), and when its job is placed on the other one (counted from the end of the
// fence: last heartbeat + lease + stop grace + stop delay + 1 s).
//
//   bazel build //bench:coordinator_scale //coordinator:tessera-coordinator
//   bazel-bin/bench/coordinator_scale --workers=12500 --modes=plain,tls --clients=4 --seconds=60
//       --coordinator_cpus=0 --client_cpus=1     (one command line)
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/net/free_port.h"
#include "common/process/find_binary.h"
#include "common/process/subprocess.h"
#include "common/rpc/tls.h"
#include "spec/job_spec.h"
#include "common/tls/certificates.h"
#include "tessera/v1/coordinator_service.grpc.pb.h"
#include "tessera/v1/worker_service.grpc.pb.h"

ABSL_FLAG(int, workers, 12500, "Simulated workers.");
ABSL_FLAG(int, seconds, 60, "Heartbeat phase length.");
ABSL_FLAG(int, interval_ms, 5000, "Heartbeat interval (passed to the coordinator as --heartbeat_interval_ms).");
ABSL_FLAG(int, clients, 4, "Load processes.");
ABSL_FLAG(int, silence_s, 10, "When, into the phase, the victim worker stops heartbeating (0: no failure).");
ABSL_FLAG(std::string, modes, "plain,tls", "plain and/or tls.");
ABSL_FLAG(std::string, coordinator_cpus, "", "taskset -c list for the coordinator (empty: anywhere).");
ABSL_FLAG(std::string, client_cpus, "", "taskset -c list for the load processes (empty: anywhere).");
// Set by the parent for a load process.
ABSL_FLAG(int, client, -1, "Internal: run as load process K.");
ABSL_FLAG(std::string, dir, "", "Internal: the run's directory.");
ABSL_FLAG(std::string, addr, "", "Internal: the coordinator's address.");
ABSL_FLAG(std::string, mode, "", "Internal: plain or tls.");

namespace {

using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC: one time line for every process.

int64_t NowNs() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

double CpuSeconds(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  if (text.rfind(')') == std::string::npos) return 0;
  std::vector<std::string> f = absl::StrSplit(text.substr(text.rfind(')') + 2), ' ');
  return f.size() > 13 ? (std::stod(f[11]) + std::stod(f[12])) / sysconf(_SC_CLK_TCK) : 0;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& text) {
  { std::ofstream(path + ".tmp") << text; }
  std::filesystem::rename(path + ".tmp", path);
}

std::shared_ptr<grpc::Channel> Connect(const std::string& addr, bool tls, const std::string& certs,
                                       const std::string& stem) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // A connection of its own.
  if (!tls) return grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args);
  tessera::rpc::TlsMaterial m{ReadFile(certs + "/ca.pem"), ReadFile(certs + "/" + stem + ".pem"),
                              ReadFile(certs + "/" + stem + ".key"), {}};
  args.SetSslTargetNameOverride(tessera::tls::kCoordinatorServerName);
  return grpc::CreateCustomChannel(addr, tessera::rpc::ChannelCredentialsFor(m), args);
}

std::string WorkerName(int i) { return absl::StrCat("sim", i); }

// ---- A load process: workers i with i % clients == client. ----
int RunClient() {
  const int k = absl::GetFlag(FLAGS_client), clients = absl::GetFlag(FLAGS_clients), n = absl::GetFlag(FLAGS_workers);
  const std::string dir = absl::GetFlag(FLAGS_dir), addr = absl::GetFlag(FLAGS_addr);
  const bool tls = absl::GetFlag(FLAGS_mode) == "tls";
  std::vector<int> owned;
  for (int i = k; i < n; i += clients) owned.push_back(i);
  const int m = static_cast<int>(owned.size());
  std::vector<std::unique_ptr<tessera::v1::WorkerService::Stub>> stubs(m);
  // Registration threads run beside the heartbeat loop below: a worker heartbeats from the interval
  // after its own registration (as a real one does), not once every other has registered (12,500
  // registrations take longer than the heartbeat timeout: the first would be lost).
  std::vector<std::atomic<int64_t>> sessions(m);
  for (auto& x : sessions) x = 0;
  std::atomic<int> registered{0};
  grpc::CompletionQueue stream_cq;  // Assignment streams held open, as every worker holds its own.
  std::vector<std::unique_ptr<grpc::ClientContext>> stream_ctx(m);
  std::vector<std::unique_ptr<grpc::ClientAsyncReader<tessera::v1::Assignment>>> streams(m);
  std::thread stream_poller([&] {
    void* tag = nullptr;
    bool ok = false;
    while (stream_cq.Next(&tag, &ok)) {
    }
  });
  std::vector<std::thread> registrars;
  for (int t = 0; t < 4; ++t) {
    registrars.emplace_back([&, t] {
      for (int j = t; j < m; j += 4) {
        const int i = owned[j];
        stubs[j] = tessera::v1::WorkerService::NewStub(Connect(addr, tls, dir + "/certs", "worker-" + WorkerName(i)));
        tessera::v1::RegisterWorkerRequest req;
        req.set_name(WorkerName(i));
        req.set_device_kind(tessera::v1::DEVICE_KIND_CPU);
        req.set_device_count(1);
        req.set_host("127.0.0.1");
        req.set_store_port_min(40000);
        req.set_store_port_max(40010);
        req.set_instance(absl::StrCat("load-", getpid(), "-", i));
        req.set_stop_grace_ms(10000);  // A real worker's defaults: the fence counts them.
        req.set_stop_delay_ms(6200);
        if (i < 2) req.set_pool("victim");
        for (int attempt = 0; attempt < 5; ++attempt) {
          tessera::v1::RegisterWorkerResponse resp;
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
          if (stubs[j]->RegisterWorker(&ctx, req, &resp).ok()) {
            tessera::v1::StreamAssignmentsRequest stream_req;
            stream_req.set_worker_id(WorkerName(i));
            stream_req.set_session(resp.session());
            stream_ctx[j] = std::make_unique<grpc::ClientContext>();
            streams[j] = stubs[j]->AsyncStreamAssignments(stream_ctx[j].get(), stream_req, &stream_cq, stream_ctx[j].get());
            sessions[j] = resp.session();  // Last: the heartbeat loop uses stubs[j] once this is set.
            ++registered;
            break;
          }
        }
      }
    });
  }
  std::thread ready([&] {
    for (auto& th : registrars) th.join();
    WriteFile(absl::StrCat(dir, "/ready.", k), absl::StrCat(registered.load(), "\n"));
  });
  // Heartbeats start at once (as a worker's do after it registered: a worker silent until every
  // other had registered would be lost), every worker once per interval, spread evenly. The parent's
  // go ("START_NS END_NS VICTIM SILENCE_NS", read every 100 ms) sets the measured window: beats sent
  // in [START, END) are counted; the loop ends at END. VICTIM (-1: none) goes silent at START +
  // SILENCE.
  const int64_t interval_ns = int64_t{absl::GetFlag(FLAGS_interval_ms)} * 1000000;
  const int64_t gap_ns = interval_ns / std::max(1, m);
  const int64_t begin_ns = NowNs();
  int64_t start_ns = INT64_MAX, end_ns = INT64_MAX, silence_ns = 0, next_read_ns = 0;
  int victim = -1;
  struct Call {
    grpc::ClientContext ctx;
    tessera::v1::HeartbeatResponse resp;
    grpc::Status status;
    int64_t sent_ns = 0;
    bool counted = false;
    std::unique_ptr<grpc::ClientAsyncResponseReader<tessera::v1::HeartbeatResponse>> reader;
  };
  grpc::CompletionQueue cq;
  std::vector<double> latencies;
  std::map<int, int64_t> errors;
  int64_t victim_last_ns = 0, in_flight = 0;
  for (int64_t b = 0;;) {
    const int64_t now = NowNs();
    if (end_ns == INT64_MAX && now >= next_read_ns) {
      next_read_ns = now + 100000000;
      std::istringstream gs(ReadFile(dir + "/go"));
      int64_t s0 = 0, s1 = 0, quiet = 0;
      int v = -1;
      if (gs >> s0 >> s1 >> v >> quiet) start_ns = s0, end_ns = s1, victim = v, silence_ns = quiet;
    }
    const int64_t due = begin_ns + b * gap_ns;
    if (due >= end_ns && in_flight == 0) break;
    if (due < end_ns && now >= due) {
      const int j = static_cast<int>(b % m);
      ++b;
      if (owned[j] == victim && due >= start_ns + silence_ns) continue;  // Gone silent.
      if (sessions[j] == 0) continue;  // Not registered yet.
      tessera::v1::HeartbeatRequest req;
      req.set_worker_id(WorkerName(owned[j]));
      req.set_session(sessions[j].load());
      req.set_reports_ranks(true);
      auto* call = new Call;
      call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      call->sent_ns = NowNs();
      call->counted = call->sent_ns >= start_ns && call->sent_ns < end_ns;
      if (owned[j] == victim) victim_last_ns = call->sent_ns;
      call->reader = stubs[j]->AsyncHeartbeat(&call->ctx, req, &cq);
      call->reader->Finish(&call->resp, &call->status, call);
      ++in_flight;
      continue;
    }
    void* tag = nullptr;
    bool ok = false;
    const int64_t wait_ns = std::min<int64_t>(due < end_ns ? std::max<int64_t>(0, due - NowNs()) : 100000000, 100000000);
    if (cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + std::chrono::nanoseconds(wait_ns)) !=
        grpc::CompletionQueue::GOT_EVENT) {
      continue;
    }
    std::unique_ptr<Call> call(static_cast<Call*>(tag));
    --in_flight;
    if (!call->counted) continue;
    latencies.push_back((NowNs() - call->sent_ns) / 1e6);
    if (!call->status.ok()) ++errors[call->status.error_code()];
  }
  ready.join();
  std::ostringstream out;
  out << latencies.size() << " " << victim_last_ns << " " << errors.size();
  for (auto [code, count] : errors) out << " " << code << " " << count;
  out << "\n";
  for (double l : latencies) out << l << "\n";
  WriteFile(absl::StrCat(dir, "/result.", k), out.str());
  std::fflush(nullptr);
  _exit(0);  // Thousands of channels: no orderly teardown needed.
}

// ---- The parent: one coordinator and its load processes per mode. ----
struct Row {
  std::string mode;
  int workers = 0;
  double rate = 0, p50 = 0, p99 = 0, cpu = 0, us_per_beat = 0, rss_mb = 0;
  int64_t failed = 0;
  double lost_after_s = -1, placed_after_fence_s = -1, fence_s = 0;
};

std::vector<std::string> Pinned(const std::string& cpus, std::vector<std::string> argv) {
  if (!cpus.empty()) argv.insert(argv.begin(), {"/usr/bin/taskset", "-c", cpus});
  return argv;
}

Row Measure(const std::string& mode, const std::string& self) {
  const bool tls = mode == "tls";
  const int n = absl::GetFlag(FLAGS_workers), clients = absl::GetFlag(FLAGS_clients);
  const int interval_ms = absl::GetFlag(FLAGS_interval_ms);
  const std::string dir = absl::StrCat("/tmp/tessera-coordinator-scale-", getpid(), "-", mode);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/out");
  const std::string certs = dir + "/certs";
  using tessera::tls::Role;
  if (!tessera::tls::CreateAuthority(certs, 30).ok() ||
      !tessera::tls::IssueCertificate(certs, {{Role::kCoordinator, "coordinator"}, {}, {}, 30}).ok() ||
      !tessera::tls::IssueCertificate(certs, {{Role::kUser, "load"}, {}, {}, 30}).ok()) {
    std::cerr << "error: cannot make certificates in " << certs << "\n";
    std::exit(1);
  }
  if (tls) {
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) tessera::tls::IssueCertificate(certs, {{Role::kWorker, WorkerName(i)}, {}, {}, 30}).IgnoreError();
    std::cerr << mode << ": " << n << " worker certificates in "
              << std::chrono::duration<double>(Clock::now() - t0).count() << " s" << std::endl;
  }
  const std::string addr = absl::StrCat("127.0.0.1:", tessera::net::PickFreePort());
  tessera::process::SpawnOptions co;
  co.argv = Pinned(absl::GetFlag(FLAGS_coordinator_cpus),
                   {tessera::process::FindTesseraBinary("tessera-coordinator", "coordinator", "TESSERA_COORDINATOR_BINARY"),
                    "--listen=" + addr, "--metrics_listen=127.0.0.1:0", "--ui_listen=127.0.0.1:0", "--db=" + dir + "/c.db",
                    absl::StrCat("--heartbeat_interval_ms=", interval_ms), absl::StrCat("--max_threads=", 4 * n + 64)});
  if (tls) {
    for (std::string f : {"--tls_ca=" + certs + "/ca.pem", "--tls_cert=" + certs + "/coordinator.pem",
                          "--tls_key=" + certs + "/coordinator.key", std::string("--data_roots=/dev"),
                          "--output_root=" + dir + "/out"}) {
      co.argv.push_back(f);
    }
  }
  co.log_path = dir + "/coordinator.log";
  const pid_t coordinator = *tessera::process::Spawn(co);
  auto channel = Connect(addr, tls, certs, "user-load");
  channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto client = tessera::v1::CoordinatorService::NewStub(channel);
  std::vector<pid_t> loads;
  const auto registration = Clock::now();
  for (int k = 0; k < clients; ++k) {
    tessera::process::SpawnOptions so;
    so.argv = Pinned(absl::GetFlag(FLAGS_client_cpus),
                     {self, absl::StrCat("--client=", k), absl::StrCat("--clients=", clients), absl::StrCat("--workers=", n),
                      absl::StrCat("--seconds=", absl::GetFlag(FLAGS_seconds)), absl::StrCat("--interval_ms=", interval_ms),
                      "--dir=" + dir, "--addr=" + addr, "--mode=" + mode});
    so.log_path = absl::StrCat(dir, "/client.", k, ".log");
    loads.push_back(*tessera::process::Spawn(so));
  }
  int registered = 0;
  for (int k = 0; k < clients; ++k) {
    std::string ready;
    while ((ready = ReadFile(absl::StrCat(dir, "/ready.", k))).empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    registered += std::stoi(ready);
  }
  std::cerr << mode << ": " << registered << " of " << n << " workers registered with streams open in "
            << std::chrono::duration<double>(Clock::now() - registration).count() << " s" << std::endl;
  // The victim: whichever of the pool's two workers the job went to.
  std::string job_id;
  int victim = -1;
  const int silence_s = absl::GetFlag(FLAGS_silence_s);
  if (silence_s > 0) {
    auto spec = tessera::spec::ParseJobSpec(
        absl::StrCat("name: victim\ndata: {path: /dev/null}\nplacement: {pool: victim}\noutput_dir: ", dir, "/out/load/victim\n"), {});
    tessera::v1::SubmitJobRequest req;
    *req.mutable_spec() = *spec;
    req.set_max_restarts(3);  // Placed again after its worker is lost.
    tessera::v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = client->SubmitJob(&ctx, req, &resp);
    tessera::v1::Job placed = resp.job();
    for (int tries = 0; s.ok() && placed.placement_size() != 1 && tries < 200; ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      tessera::v1::GetJobRequest get;
      get.set_job_id(resp.job().id());
      tessera::v1::GetJobResponse got;
      grpc::ClientContext get_ctx;
      if (client->GetJob(&get_ctx, get, &got).ok()) placed = got.job();
    }
    if (s.ok() && placed.placement_size() == 1) {
      job_id = placed.id();
      victim = placed.placement(0).worker_id() == WorkerName(0) ? 0 : 1;
    } else {
      std::cerr << "warning: the victim job was not placed: " << s.error_message() << " " << placed.reason() << "\n";
    }
  }
  // Every worker has heartbeated for a full interval (the last registered ones too) before the window.
  const int64_t start_ns = NowNs() + int64_t{interval_ms} * 1000000 + 1000000000;
  const int64_t window_end_ns = start_ns + int64_t{absl::GetFlag(FLAGS_seconds)} * 1000000000;
  WriteFile(dir + "/go", absl::StrCat(start_ns, " ", window_end_ns, " ", victim, " ", int64_t{silence_s} * 1000000000, "\n"));
  // Wait for the phase to start, sample the coordinator's CPU over it; meanwhile watch the victim's job.
  while (NowNs() < start_ns) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double cpu0 = CpuSeconds(coordinator);
  const int64_t end_ns = window_end_ns;
  int64_t lost_ns = 0, placed_ns = 0;
  while (NowNs() < end_ns) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (job_id.empty() || placed_ns != 0) continue;
    tessera::v1::GetJobRequest get;
    get.set_job_id(job_id);
    tessera::v1::GetJobResponse got;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    if (!client->GetJob(&ctx, get, &got).ok()) continue;
    const auto& j = got.job();
    if (lost_ns == 0 && j.history_size() > 0 && j.history(0).outcome() == tessera::v1::JOB_STATE_FAILED) lost_ns = NowNs();
    if (lost_ns != 0 && j.attempt() >= 2 && j.placement_size() == 1) placed_ns = NowNs();
  }
  const double cpu1 = CpuSeconds(coordinator);
  const double rss_mb = [&] {
    std::ifstream statm(absl::StrCat("/proc/", coordinator, "/statm"));
    long size = 0, resident = 0;
    statm >> size >> resident;
    return resident * sysconf(_SC_PAGESIZE) / 1e6;
  }();
  std::vector<double> latencies;
  int64_t failed = 0, victim_last_ns = 0;
  for (int k = 0; k < clients; ++k) {
    waitpid(loads[k], nullptr, 0);
    std::istringstream in(ReadFile(absl::StrCat(dir, "/result.", k)));
    size_t count = 0;
    int64_t last = 0;
    int codes = 0;
    in >> count >> last >> codes;
    for (int c = 0; c < codes; ++c) {
      int code = 0;
      int64_t times = 0;
      in >> code >> times;
      failed += times;
      std::cerr << mode << ": client " << k << ": " << times << " heartbeats failed with code " << code << "\n";
    }
    if (last != 0) victim_last_ns = last;
    for (size_t i = 0; i < count; ++i) {
      double l = 0;
      in >> l;
      latencies.push_back(l);
    }
  }
  kill(coordinator, SIGTERM);
  waitpid(coordinator, nullptr, 0);
  Row r;
  r.mode = mode;
  r.workers = n;
  const double seconds = (end_ns - start_ns) / 1e9;
  r.rate = latencies.size() / seconds;
  r.p50 = Percentile(latencies, 0.5);
  r.p99 = Percentile(latencies, 0.99);
  r.cpu = (cpu1 - cpu0) / seconds;
  r.us_per_beat = latencies.empty() ? 0 : (cpu1 - cpu0) / latencies.size() * 1e6;
  r.rss_mb = rss_mb;
  r.failed = failed;
  // The fence with the coordinator's defaults: lease 3 intervals, the victim's grace and delay, 1 s.
  r.fence_s = 3 * interval_ms / 1000.0 + 10 + 6.2 + 1;
  if (lost_ns != 0 && victim_last_ns != 0) r.lost_after_s = (lost_ns - victim_last_ns) / 1e9;
  if (placed_ns != 0 && victim_last_ns != 0) r.placed_after_fence_s = (placed_ns - victim_last_ns) / 1e9 - r.fence_s;
  std::filesystem::remove_all(dir);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_client) >= 0) return RunClient();
  const std::string self = std::filesystem::canonical("/proc/self/exe").string();
  std::vector<Row> rows;
  for (absl::string_view mode : absl::StrSplit(absl::GetFlag(FLAGS_modes), ',', absl::SkipEmpty())) {
    if (mode != "plain" && mode != "tls") {
      std::cerr << "error: --modes: unknown mode " << mode << " (plain, tls)\n";
      return 2;
    }
    rows.push_back(Measure(std::string(mode), self));
  }
  std::printf("%5s %7s %11s %8s %8s %7s %9s %10s %8s %14s %20s\n", "mode", "workers", "heartbeat/s", "p50 ms",
              "p99 ms", "failed", "coord CPU", "µs/beat", "coord MB", "LOST after s", "placed after fence s");
  for (const Row& r : rows) {
    std::printf("%5s %7d %11.0f %8.3f %8.3f %7lld %8.1f%% %10.1f %8.1f %14.2f %20.2f\n", r.mode.c_str(), r.workers,
                r.rate, r.p50, r.p99, static_cast<long long>(r.failed), r.cpu * 100, r.us_per_beat, r.rss_mb,
                r.lost_after_s, r.placed_after_fence_s);
  }
  std::printf("(interval %d ms, lease %d ms, heartbeat timeout %d ms: LOST is due after the timeout; the fence ends "
              "%.1f s after the last heartbeat)\n",
              absl::GetFlag(FLAGS_interval_ms), 3 * absl::GetFlag(FLAGS_interval_ms), 4 * absl::GetFlag(FLAGS_interval_ms),
              rows.empty() ? 0.0 : rows[0].fence_s);
  return 0;
}
