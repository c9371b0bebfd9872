// Benchmark: tessera-coordinator under load. Starts a coordinator (its own SQLite file in a temp
// dir), registers N simulated workers that heartbeat once a second each (spread evenly), and
// measures heartbeat latency p50/p99, the rate achieved, and the coordinator's CPU, memory and threads;
// then a burst of job submissions. Each simulated worker also holds its assignment stream open. Prints one table row per N and mode.
//
// Modes: "shared" — every simulated worker on one plaintext channel (the original measurement);
// "plain" — one plaintext connection per worker; "tls" — one mutual-TLS connection per worker, each
// with its own certificate (as deployed: the coordinator authorizes every heartbeat by it). The
// modes of one N run back to back on the same machine, so their ratio is the cost of TLS.
//
//   bazel run -c opt //bench:coordinator_load -- --workers=500,1000,2000 --seconds=10 --modes=plain,tls
//   taskset -c 1 bazel-bin/bench/coordinator_load --coordinator_cpus=0 --workers=12500   (one core each)
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <tuple>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
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

ABSL_FLAG(std::string, workers, "500,1000,2000", "Simulated worker counts, one measurement each.");
ABSL_FLAG(int, seconds, 10, "Heartbeat phase length per measurement.");
ABSL_FLAG(int, threads, 2, "Client threads sending heartbeats (asynchronous calls).");
ABSL_FLAG(int, submissions, 300, "Jobs submitted in the burst.");
ABSL_FLAG(std::string, modes, "plain,tls", "shared, plain and/or tls (see the file comment).");
ABSL_FLAG(std::string, coordinator_cpus, "",
          "CPUs the coordinator runs on (taskset -c list, e.g. 0); with the bench itself under taskset -c on others, "
          "client and coordinator do not compete for cores. Empty: anywhere.");

namespace {

using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

// utime + stime of `pid` in seconds, and its resident memory in bytes.
std::pair<double, double> CpuAndRss(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::vector<std::string> f = absl::StrSplit(text.substr(text.rfind(')') + 2), ' ');
  double ticks = 0;
  if (f.size() > 13) ticks = std::stod(f[11]) + std::stod(f[12]);
  std::ifstream statm(absl::StrCat("/proc/", pid, "/statm"));
  long size = 0, resident = 0;
  statm >> size >> resident;
  return {ticks / sysconf(_SC_CLK_TCK), static_cast<double>(resident) * sysconf(_SC_PAGESIZE)};
}

struct Row {
  std::string mode;
  int workers;
  double rate, p50_ms, p99_ms, cpu, rss_mb, submit_p50_ms, submit_p99_ms;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A channel of its own (no subchannel shared with other channels), presenting DIR/STEM.pem when tls.
std::shared_ptr<grpc::Channel> Connect(const std::string& addr, bool tls, const std::string& certs, const std::string& stem) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (!tls) return grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args);
  tessera::rpc::TlsMaterial m{ReadFile(certs + "/ca.pem"), ReadFile(certs + "/" + stem + ".pem"),
                              ReadFile(certs + "/" + stem + ".key"), {}};
  args.SetSslTargetNameOverride(tessera::tls::kCoordinatorServerName);
  return grpc::CreateCustomChannel(addr, tessera::rpc::ChannelCredentialsFor(m), args);
}

// What a heartbeat phase measured: every answered heartbeat's latency (ms) and the failures by code.
struct Beats {
  std::vector<double> latencies;
  int64_t errors = 0;
  std::map<int, int> error_codes;  // gRPC status code → heartbeats that failed with it.
};

// Heartbeats as asynchronous unary calls, as the worker agent sends them.
Beats UnaryHeartbeats(const std::vector<std::unique_ptr<tessera::v1::WorkerService::Stub>>& stubs,
                      const std::vector<std::string>& ids, const std::vector<int64_t>& sessions, int seconds,
                      int threads, const std::function<void()>& sent_all) {
  const int n = static_cast<int>(stubs.size());
  // Heartbeats: asynchronous calls, so that the load client keeps the rate on the same machine.
  // Thread t owns workers t, t+threads, ...; each worker beats once a second, the beats of a thread
  // spread evenly over the second; a beat is sent at its time whether or not earlier ones returned.
  std::mutex mu;
  Beats out;
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  struct Call {
    grpc::ClientContext ctx;
    tessera::v1::HeartbeatResponse resp;
    grpc::Status status;
    Clock::time_point sent;
    std::unique_ptr<grpc::ClientAsyncResponseReader<tessera::v1::HeartbeatResponse>> reader;
  };
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<double> mine;
      std::vector<int> owned;
      for (int i = t; i < n; i += threads) owned.push_back(i);
      if (owned.empty()) return;
      grpc::CompletionQueue cq;
      const auto gap = std::chrono::nanoseconds(1000000000LL / static_cast<int64_t>(owned.size()));
      auto next = start;
      const int64_t total = static_cast<int64_t>(seconds) * static_cast<int64_t>(owned.size());
      int64_t sent = 0, done = 0;
      while (done < total) {
        if (sent < total && Clock::now() >= next) {
          const int i = owned[sent % owned.size()];
          tessera::v1::HeartbeatRequest req;
          req.set_worker_id(ids[i]);
          req.set_session(sessions[i]);  // As the worker agent sends it: fenced, acknowledging, listing ranks.
          req.set_reports_ranks(true);
          auto* call = new Call;
          call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
          call->sent = Clock::now();
          call->reader = stubs[i]->AsyncHeartbeat(&call->ctx, req, &cq);
          call->reader->Finish(&call->resp, &call->status, call);
          ++sent;
          next += gap;
          continue;
        }
        void* tag = nullptr;
        bool ok = false;
        const auto wait_until = sent < total ? next : Clock::now() + std::chrono::seconds(10);
        const auto r = cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() +
                                                   std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                                       wait_until - Clock::now()));
        if (r != grpc::CompletionQueue::GOT_EVENT) continue;
        std::unique_ptr<Call> call(static_cast<Call*>(tag));
        ++done;
        mine.push_back(std::chrono::duration<double, std::milli>(Clock::now() - call->sent).count());
        if (!call->status.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          ++out.errors;
          ++out.error_codes[call->status.error_code()];
        }
      }
      cq.Shutdown();
      std::lock_guard<std::mutex> lock(mu);
      out.latencies.insert(out.latencies.end(), mine.begin(), mine.end());
    });
  }
  for (auto& th : pool) th.join();
  sent_all();
  return out;
}

Row Measure(const std::string& mode, int n, int seconds, int threads, int submissions) {
  const bool tls = mode == "tls", shared = mode == "shared";
  const std::string dir = absl::StrCat("/tmp/tessera-coordinator-load-", getpid(), "-", n, "-", mode);
  const std::string certs = dir + "/certs";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/out");
  const int port = tessera::net::PickFreePort();
  const std::string addr = absl::StrCat("127.0.0.1:", port);
  tessera::process::SpawnOptions so;
  so.argv = {tessera::process::FindTesseraBinary("tessera-coordinator", "coordinator", "TESSERA_COORDINATOR_BINARY"),
             "--listen=" + addr, "--metrics_listen=127.0.0.1:0", "--ui_listen=127.0.0.1:0", "--db=" + dir + "/c.db", "--heartbeat_timeout_s=30",
             "--max_threads=" + std::to_string(4 * n + 64)};
  if (tls) {
    using tessera::tls::Role;
    if (!tessera::tls::CreateAuthority(certs, 30).ok() ||
        !tessera::tls::IssueCertificate(certs, {{Role::kCoordinator, "coordinator"}, {}, {}, 30}).ok() ||
        !tessera::tls::IssueCertificate(certs, {{Role::kUser, "load"}, {}, {}, 30}).ok()) {
      std::cerr << "error: cannot make certificates in " << certs << "\n";
      std::exit(1);
    }
    for (int i = 0; i < n; ++i) tessera::tls::IssueCertificate(certs, {{Role::kWorker, absl::StrCat("sim", i)}, {}, {}, 30}).IgnoreError();
    for (std::string f : {"--tls_ca=" + certs + "/ca.pem", "--tls_cert=" + certs + "/coordinator.pem",
                          "--tls_key=" + certs + "/coordinator.key", std::string("--data_roots=/dev"), "--output_root=" + dir + "/out"}) {
      so.argv.push_back(f);
    }
  }
  if (const std::string cpus = absl::GetFlag(FLAGS_coordinator_cpus); !cpus.empty()) {
    so.argv.insert(so.argv.begin(), {"/usr/bin/taskset", "-c", cpus});
  }
  so.log_path = dir + "/coordinator.log";
  pid_t pid = *tessera::process::Spawn(so);
  auto channel = Connect(addr, tls, certs, "user-load");
  channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
  std::vector<std::unique_ptr<tessera::v1::WorkerService::Stub>> stubs;
  for (int i = 0; i < n; ++i) {
    stubs.push_back(tessera::v1::WorkerService::NewStub(shared ? channel : Connect(addr, tls, certs, absl::StrCat("worker-sim", i))));
  }
  // Registration, spread over 16 threads (sequential registration of 12,500 workers takes
  // longer than the heartbeat timeout: the first ones would be lost before the heartbeats start).
  std::vector<std::string> ids(n);
  std::vector<int64_t> sessions(n, 0);
  const auto registration_start = Clock::now();
  {
    std::vector<std::thread> registrars;
    constexpr int kRegistrars = 16;
    for (int t = 0; t < kRegistrars; ++t) {
      registrars.emplace_back([&, t] {
        for (int i = t; i < n; i += kRegistrars) {
          tessera::v1::RegisterWorkerRequest req;
          req.set_name(absl::StrCat("sim", i));
          req.set_device_kind(tessera::v1::DEVICE_KIND_CPU);
          req.set_device_count(1);
          req.set_host("127.0.0.1");
          req.set_store_port_min(40000);
          req.set_store_port_max(40010);
          tessera::v1::RegisterWorkerResponse resp;
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
          if (stubs[i]->RegisterWorker(&ctx, req, &resp).ok()) {
            ids[i] = resp.worker_id();
            sessions[i] = resp.session();
          }
        }
      });
    }
    for (auto& th : registrars) th.join();
  }
  std::cerr << mode << " N=" << n << ": registered in "
            << std::chrono::duration<double>(Clock::now() - registration_start).count() << " s" << std::endl;
  // Every worker holds its assignment stream open, as a real one does (a call the coordinator keeps
  // for the worker's whole life).
  grpc::CompletionQueue stream_cq;
  std::vector<std::unique_ptr<grpc::ClientContext>> stream_ctx(n);
  std::vector<std::unique_ptr<grpc::ClientAsyncReader<tessera::v1::Assignment>>> streams(n);
  std::vector<grpc::Status> stream_status(n);
  std::thread stream_poller([&] {
    void* tag = nullptr;
    bool ok = false;
    while (stream_cq.Next(&tag, &ok)) {
    }
  });
  for (int i = 0; i < n; ++i) {
    tessera::v1::StreamAssignmentsRequest req;
    req.set_worker_id(ids[i]);
    req.set_session(sessions[i]);
    stream_ctx[i] = std::make_unique<grpc::ClientContext>();
    streams[i] = stubs[i]->AsyncStreamAssignments(stream_ctx[i].get(), req, &stream_cq, stream_ctx[i].get());
  }
  std::cerr << mode << " N=" << n << ": registered, assignment streams open; heartbeats start" << std::endl;
  auto [cpu0, rss0] = CpuAndRss(pid);
  const auto start = Clock::now();
  double elapsed = 0, cpu1 = 0, rss1 = 0;
  // The coordinator's CPU over the heartbeat phase, sampled when the last heartbeat was sent.
  auto sample = [&] {
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    std::tie(cpu1, rss1) = CpuAndRss(pid);
  };
  Beats beats = UnaryHeartbeats(stubs, ids, sessions, seconds, threads, sample);
  std::vector<double>& latencies = beats.latencies;
  const int64_t errors = beats.errors;
  std::map<int, int>& error_codes = beats.error_codes;
  int server_threads = 0;
  for (const auto& entry : std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"))) {
    (void)entry;
    ++server_threads;
  }
  std::cerr << mode << " N=" << n << ": coordinator threads " << server_threads << std::endl;
  for (int i = 0; i < n; ++i) {
    stream_ctx[i]->TryCancel();
    streams[i]->Finish(&stream_status[i], &stream_status[i]);
  }
  // Burst of submissions (valid 1-rank jobs; they are placed on the simulated workers).
  auto client = tessera::v1::CoordinatorService::NewStub(channel);
  std::vector<double> submit;
  for (int i = 0; i < submissions; ++i) {
    // Each job a directory of its own (live jobs may not share one).
    auto spec = tessera::spec::ParseJobSpec(
        absl::StrCat("name: load\ndata: {path: /dev/null}\noutput_dir: ", dir, "/out/load/job", i, "\n"), {});
    tessera::v1::SubmitJobRequest req;
    *req.mutable_spec() = *spec;
    tessera::v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const auto t0 = Clock::now();
    client->SubmitJob(&ctx, req, &resp);
    submit.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  stream_cq.Shutdown();
  stream_poller.join();
  std::filesystem::remove_all(dir);
  if (errors > 0) {
    std::cerr << "warning: " << errors << " heartbeats failed at N=" << n << " (" << mode << "):";
    for (auto [code, count] : error_codes) std::cerr << " code " << code << " ×" << count;
    std::cerr << "\n";
  }
  return {mode, n, latencies.size() / std::max(elapsed, 1.0), Percentile(latencies, 0.5), Percentile(latencies, 0.99),
          (cpu1 - cpu0) / elapsed, rss1 / 1e6, Percentile(submit, 0.5), Percentile(submit, 0.99)};
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::vector<Row> rows;
  const std::vector<std::string> modes = absl::StrSplit(absl::GetFlag(FLAGS_modes), ',', absl::SkipEmpty());
  for (absl::string_view w : absl::StrSplit(absl::GetFlag(FLAGS_workers), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(w, &n) || n < 1) continue;
    for (const std::string& mode : modes) {
      if (mode != "shared" && mode != "plain" && mode != "tls") {
        std::cerr << "error: --modes: unknown mode " << mode << " (shared, plain, tls)\n";
        return 2;
      }
      rows.push_back(Measure(mode, n, absl::GetFlag(FLAGS_seconds), absl::GetFlag(FLAGS_threads),
                             absl::GetFlag(FLAGS_submissions)));
    }
  }
  std::printf("%6s %8s %12s %10s %10s %10s %10s %14s %14s\n", "mode", "workers", "heartbeat/s", "p50 ms", "p99 ms",
              "coord CPU", "coord MB", "submit p50 ms", "submit p99 ms");
  for (const Row& r : rows) {
    std::printf("%6s %8d %12.0f %10.3f %10.3f %9.0f%% %10.1f %14.3f %14.3f\n", r.mode.c_str(), r.workers, r.rate, r.p50_ms,
                r.p99_ms, r.cpu * 100, r.rss_mb, r.submit_p50_ms, r.submit_p99_ms);
  }
  return 0;
}
