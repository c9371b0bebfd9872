// Benchmark: submitting and placing one large job on a large cluster, in process — the coordinator's
// own work (validation, the job's durable write, placement over every free device, one start order
// per rank pushed to each worker's stream), without gRPC. Each round starts a fresh coordinator (its
// own SQLite file), registers the workers, attaches a stream sink to each, and times Submit() of the
// job, which returns once every rank is placed and its START order queued (the coordinator's lock is
// held for this part), and then until every order is in its worker's stream — they leave once the
// attempt's row is durable (coordinator/store_writer.h). Then every rank reports that it started (timed
// until the last report is answered: the job is RUNNING), and (--reregister) the coordinator restarts on
// the same database and every worker registers again listing the ranks it runs — the adoption after a
// coordinator restart, timed until the last registration is answered. Prints the medians and every round.
//
//   bazel run -c opt //bench:coordinator_place -- --workers=12500 --devices=8 --dp=12500 --tp=8
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "spec/job_spec.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_store.h"

ABSL_FLAG(int, workers, 12500, "Workers registered.");
ABSL_FLAG(int, devices, 8, "Devices per worker.");
ABSL_FLAG(int, dp, 12500, "The job's data-parallel size.");
ABSL_FLAG(int, tp, 8, "The job's tensor-parallel size (inside a worker).");
ABSL_FLAG(int, rounds, 3, "Rounds (a fresh coordinator each).");
ABSL_FLAG(bool, reregister, true,
          "Also time a coordinator restart: a new coordinator on the same database, every worker registering "
          "again listing the ranks it runs (the adoption of the placed attempt).");

namespace {

using Clock = std::chrono::steady_clock;
namespace co = tessera::coordinator;

// A worker's stream as the gRPC reactor holds it: each order in its queue until written.
struct QueueSink : public co::AssignmentSink {
  void Deliver(std::shared_ptr<const tessera::v1::Assignment> a) override { orders.push_back(std::move(a)); }
  void End(const absl::Status&) override {}
  std::vector<std::shared_ptr<const tessera::v1::Assignment>> orders;
};

struct Times {
  double placed_ms = 0;  // Submit() returned: placed, orders queued.
  double pushed_ms = 0;  // Every order in its stream (the attempt durable).
  double started_ms = 0;  // Every rank reported started (the job RUNNING).
  double reregistered_ms = 0;  // After a restart: every worker registered again with its ranks.
};

tessera::v1::RegisterWorkerRequest Registration(int i, int devices) {
  tessera::v1::RegisterWorkerRequest r;
  r.set_name(absl::StrCat("w", i));
  r.set_device_kind(tessera::v1::DEVICE_KIND_CPU);
  r.set_device_count(devices);
  r.set_host(absl::StrCat("10.0.", i / 250, ".", i % 250));
  r.set_store_port_min(30000);
  r.set_store_port_max(30010);
  return r;
}

// A coordinator on the SQLite file `db` (recovered from it), with no heartbeat timeout to speak of.
std::unique_ptr<co::Coordinator> OpenCoordinator(const std::string& db) {
  auto store = co::JobStore::Open({db});
  if (!store.ok()) {
    std::cerr << "error: " << store.status() << "\n";
    std::exit(1);
  }
  co::CoordinatorOptions options;
  options.heartbeat_timeout = absl::Hours(1);
  auto c = std::make_unique<co::Coordinator>(options, std::move(*store));
  if (!c->Recover().ok()) std::exit(1);
  return c;
}

// A coordinator restarted on `db`: each worker registers again listing the ranks its START orders
// started (what the worker agent sends); the time until the last registration is answered.
double Reregister(const std::string& db, int devices, const std::vector<std::unique_ptr<QueueSink>>& sinks) {
  auto c = OpenCoordinator(db);
  std::vector<tessera::v1::RegisterWorkerRequest> regs;
  for (size_t i = 0; i < sinks.size(); ++i) {
    regs.push_back(Registration(static_cast<int>(i), devices));
    for (const auto& a : sinks[i]->orders) {
      if (a->action() != tessera::v1::Assignment::ACTION_START) continue;
      auto* r = regs.back().add_running();
      r->set_job_id(a->job_id());
      r->set_attempt(a->attempt());
      r->set_rank(a->rank());
      r->set_device(a->local_rank());
    }
  }
  const auto t0 = Clock::now();
  for (const auto& r : regs) {
    if (auto reg = c->RegisterWorker(r); !reg.ok()) {
      std::cerr << "error: " << reg.status() << "\n";
      std::exit(1);
    }
  }
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

Times Round(const std::string& dir, int round, int workers, int devices, const tessera::v1::JobSpec& spec,
            size_t* orders) {
  const std::string db = absl::StrCat(dir, "/c", round, ".db");
  auto c = OpenCoordinator(db);
  std::vector<std::unique_ptr<QueueSink>> sinks;
  for (int i = 0; i < workers; ++i) {
    auto reg = c->RegisterWorker(Registration(i, devices));
    if (!reg.ok()) {
      std::cerr << "error: " << reg.status() << "\n";
      std::exit(1);
    }
    sinks.push_back(std::make_unique<QueueSink>());
    if (!c->AttachAssignmentSink(reg->worker_id(), reg->session(), sinks.back().get()).ok()) std::exit(1);
  }
  const auto t0 = Clock::now();
  auto job = c->Submit(spec, 0);
  Times t;
  t.placed_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!job.ok() || job->state() != tessera::v1::JOB_STATE_SCHEDULED) {
    std::cerr << "error: the job was not placed: " << (job.ok() ? job->reason() : job.status().ToString()) << "\n";
    std::exit(1);
  }
  if (absl::Status s = c->WaitForStore(); !s.ok()) {
    std::cerr << "error: " << s << "\n";
    std::exit(1);
  }
  t.pushed_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  *orders = 0;
  for (const auto& s : sinks) *orders += s->orders.size();
  // Each worker reports its ranks started, as the agent does once their processes run.
  std::vector<tessera::v1::ReportRankStatusRequest> reports;
  for (int i = 0; i < workers; ++i) {
    for (const auto& a : sinks[i]->orders) {
      if (a->action() != tessera::v1::Assignment::ACTION_START) continue;
      auto& r = reports.emplace_back();
      r.set_worker_id(absl::StrCat("w", i));
      r.set_job_id(a->job_id());
      r.set_attempt(a->attempt());
      r.set_rank(a->rank());
      r.set_event(tessera::v1::ReportRankStatusRequest::EVENT_STARTED);
    }
  }
  const auto t1 = Clock::now();
  for (const auto& r : reports) {
    if (absl::Status s = c->ReportRankStatus(r); !s.ok()) {
      std::cerr << "error: " << s << "\n";
      std::exit(1);
    }
  }
  t.started_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
  if (auto running = c->GetJob(job->id()); !running.ok() || running->state() != tessera::v1::JOB_STATE_RUNNING) {
    std::cerr << "error: the job is not RUNNING once every rank started\n";
    std::exit(1);
  }
  c.reset();  // Ends the sinks' streams before they go.
  if (absl::GetFlag(FLAGS_reregister)) t.reregistered_ms = Reregister(db, devices, sinks);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int workers = absl::GetFlag(FLAGS_workers), devices = absl::GetFlag(FLAGS_devices);
  const int dp = absl::GetFlag(FLAGS_dp), tp = absl::GetFlag(FLAGS_tp);
  const std::string dir = absl::StrCat("/tmp/tessera-coordinator-place-", getpid());
  std::filesystem::create_directories(dir);
  auto spec = tessera::spec::ParseJobSpec(
      absl::StrCat("name: big\ndata: {path: /x.bin}\nmodel: {heads: 8}\noutput_dir: ", dir, "/out\n"),
      {absl::StrCat("parallel.dp=", dp), absl::StrCat("parallel.tp=", tp), "train.micro_batch=1",
       absl::StrCat("train.global_batch=", dp)});
  if (!spec.ok()) {
    std::cerr << "error: " << spec.status().message() << "\n";
    return 2;
  }
  std::vector<Times> times;
  size_t orders = 0;
  for (int r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    times.push_back(Round(dir, r, workers, devices, *spec, &orders));
  }
  std::filesystem::remove_all(dir);
  auto median = [&](double Times::*field) {
    std::vector<double> v;
    for (const Times& t : times) v.push_back(t.*field);
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("workers %d × %d devices, job dp=%d tp=%d (%d ranks, %zu start orders): submit+place median %.1f ms, "
              "until every order is pushed (attempt durable) median %.1f ms (rounds:",
              workers, devices, dp, tp, dp * tp, orders, median(&Times::placed_ms), median(&Times::pushed_ms));
  for (const Times& t : times) std::printf(" %.1f/%.1f", t.placed_ms, t.pushed_ms);
  std::printf(")\n");
  std::printf("every rank reported started: median %.1f ms (rounds:", median(&Times::started_ms));
  for (const Times& t : times) std::printf(" %.1f", t.started_ms);
  std::printf(")\n");
  if (absl::GetFlag(FLAGS_reregister)) {
    std::printf("after a coordinator restart, every worker registered again with its ranks: median %.1f ms (rounds:",
                median(&Times::reregistered_ms));
    for (const Times& t : times) std::printf(" %.1f", t.reregistered_ms);
    std::printf(")\n");
  }
  return 0;
}
