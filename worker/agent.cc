#include "worker/agent.h"

#include <unistd.h>

#include <chrono>
#include <deque>
#include <iostream>
#include <mutex>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/rpc/channel.h"
#include "tessera/v1/worker_service.grpc.pb.h"
#include "worker/report_queue.h"
#include "worker/start_order.h"

namespace tessera::worker {
namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<grpc::ClientContext> WithDeadline(std::chrono::milliseconds d) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + d);
  return ctx;
}

v1::ReportRankStatusRequest ToReport(const RankEvent& e) {
  v1::ReportRankStatusRequest r;
  r.set_job_id(e.job_id);
  r.set_attempt(e.attempt);
  r.set_rank(e.rank);
  r.set_event(e.event);
  r.set_exit_code(e.exit_code);
  r.set_error(e.error);
  *r.mutable_progress() = e.progress;
  return r;
}

// Reads the assignment stream on its own thread into a queue the agent's loop drains.
class AssignmentReader {
 public:
  AssignmentReader(v1::WorkerService::Stub* stub, const std::string& worker_id, int64_t session) {
    // The stream lives as long as the registration; a day-long deadline bounds a forgotten stream.
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::hours(24));
    v1::StreamAssignmentsRequest req;
    req.set_worker_id(worker_id);
    req.set_session(session);
    thread_ = std::thread([this, stub, req] {
      auto reader = stub->StreamAssignments(&ctx_, req);
      v1::Assignment a;
      while (reader->Read(&a)) {
        std::lock_guard<std::mutex> lock(mu_);
        queue_.push_back(a);
      }
      reader->Finish();
      broken_ = true;
    });
  }
  ~AssignmentReader() {
    ctx_.TryCancel();
    thread_.join();
  }
  bool broken() const { return broken_; }
  std::deque<v1::Assignment> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    std::deque<v1::Assignment> out;
    out.swap(queue_);
    return out;
  }

 private:
  grpc::ClientContext ctx_;
  std::thread thread_;
  std::mutex mu_;
  std::deque<v1::Assignment> queue_;
  std::atomic<bool> broken_{false};
};

}  // namespace

void Agent::Run(const std::atomic<bool>& stop) {
  rpc::ChannelOptions channel_options;
  channel_options.tls = options_.tls;
  // A new channel after every lost connection: gRPC 1.51's TLS channel that lost its coordinator
  // failed every handshake with the restarted one (measured: a fresh channel connects at once).
  auto connect = [&] { return v1::WorkerService::NewStub(rpc::OpenChannel(options_.coordinator, channel_options)); };
  auto stub = connect();
  RankSupervisor supervisor(options_.supervisor);
  std::string worker_id;
  std::unique_ptr<AssignmentReader> reader;
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds backoff{200};
  Clock::time_point next_attempt = Clock::now(), next_heartbeat = Clock::now(), next_sample = Clock::now();
  ReportQueue unsent;  // Reports not yet delivered.
  bool said_unreachable = false;
  std::string last_refusal;  // The last ALREADY_EXISTS message printed.
  int64_t registrations = 0;  // Registration requests sent (RegisterWorkerRequest.attempt).
  int64_t session = 0;       // Of the current registration.
  int64_t applied_seq = 0;   // Every order of the session up to this one is applied (the acknowledgement).
  // This process, for the coordinator to tell a second worker under the same name from this one.
  const std::string instance = absl::StrCat(options_.host, "/", getpid(), "/",
                                            std::chrono::system_clock::now().time_since_epoch().count());

  while (!stop) {
    const auto now = Clock::now();
    if (worker_id.empty() && now >= next_attempt) {
      v1::RegisterWorkerRequest req;
      req.set_name(options_.name);
      req.set_device_kind(options_.device_kind);
      req.set_device_count(options_.device_count);
      req.set_device_memory_bytes(options_.device_memory_bytes);
      req.set_host(options_.host);
      req.set_store_port_min(options_.store_port_min);
      req.set_store_port_max(options_.store_port_max);
      req.set_metrics_address(options_.metrics_address);
      req.set_peak_flops_per_device(options_.peak_flops_per_device);
      req.set_instance(instance);
      req.set_attempt(++registrations);
      for (auto& r : supervisor.Running()) *req.add_running() = r;
      for (const auto& r : unsent.Exits()) *req.add_exited() = r;
      v1::RegisterWorkerResponse resp;
      grpc::Status s = stub->RegisterWorker(WithDeadline(std::chrono::seconds(3)).get(), req, &resp);
      if (s.ok()) {
        // The exits went with the registration; the rest (starts, progress) is stale now.
        unsent.Clear();
        worker_id = resp.worker_id();
        heartbeat_interval = std::chrono::milliseconds(std::max(100, resp.heartbeat_interval_ms()));
        session = resp.session();
        applied_seq = 0;
        reader = std::make_unique<AssignmentReader>(stub.get(), worker_id, session);
        backoff = std::chrono::milliseconds(200);
        said_unreachable = false;
        last_refusal.clear();
        std::cout << "tessera-worker: registered as " << worker_id << " with " << options_.coordinator << std::endl;
      } else if (s.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
        // The name is held by a live worker: say so (once per message) and keep trying, as a worker
        // restarted faster than its predecessor's name hold is accepted moments later.
        if (s.error_message() != last_refusal) {
          std::cerr << "tessera-worker: registration refused: " << s.error_message() << " (retrying)" << std::endl;
          last_refusal = s.error_message();
        }
        next_attempt = now + backoff;
        backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
      } else {
        stub = connect();  // As after a lost heartbeat.
        if (!said_unreachable) {
          std::cerr << "tessera-worker: cannot register with " << options_.coordinator << ": " << s.error_message()
                    << " (retrying)" << std::endl;
          said_unreachable = true;
        }
        next_attempt = now + backoff;
        backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
      }
    }
    if (!worker_id.empty() && now >= next_heartbeat) {
      v1::HeartbeatRequest req;
      req.set_worker_id(worker_id);
      req.set_session(session);
      // The acknowledgement, and every rank the coordinator may still count as alive: those this
      // worker runs and those whose exit it has not delivered yet (one loop thread: no rank is between).
      req.set_applied_seq(applied_seq);
      req.set_reports_ranks(true);
      for (auto& r : supervisor.Running()) *req.add_ranks() = r;
      for (const auto& e : unsent.Exits()) {
        v1::RunningRank* r = req.add_ranks();
        r->set_job_id(e.job_id());
        r->set_attempt(e.attempt());
        r->set_rank(e.rank());
      }
      v1::HeartbeatResponse resp;
      grpc::Status s = stub->Heartbeat(WithDeadline(std::chrono::seconds(2)).get(), req, &resp);
      next_heartbeat = now + heartbeat_interval;
      if (!s.ok()) {
        std::cerr << "tessera-worker: lost the coordinator (" << s.error_message() << "); registering again"
                  << std::endl;
        reader.reset();
        worker_id.clear();
        stub = connect();
        next_attempt = now;
      } else if (reader->broken()) {
        // The registration holds; only the stream broke. A new one gets the orders not acknowledged.
        std::cerr << "tessera-worker: the assignment stream ended; opening it again" << std::endl;
        reader = std::make_unique<AssignmentReader>(stub.get(), worker_id, session);
      }
    }
    if (reader != nullptr) {
      for (const v1::Assignment& a : reader->Take()) {
        if (a.seq() > 0 && a.seq() <= applied_seq) continue;  // Sent again after a reconnect: applied.
        if (a.seq() > applied_seq + 1) {
          // An order is missing (lost with a broken stream): a new stream sends every order not
          // acknowledged again, in order.
          std::cerr << "tessera-worker: assignment " << applied_seq + 1 << " is missing (got " << a.seq()
                    << "); opening the stream again" << std::endl;
          reader = std::make_unique<AssignmentReader>(stub.get(), worker_id, session);
          break;
        }
        if (a.seq() > 0) applied_seq = a.seq();
        if (a.action() == v1::Assignment::ACTION_START) {
          absl::Status s = CheckStartOrder(a, options_.device_count, options_.roots);
          if (s.ok()) s = supervisor.Start(a);
          if (!s.ok()) {
            RankEvent failed;
            failed.event = v1::ReportRankStatusRequest::EVENT_EXITED;
            failed.job_id = a.job_id();
            failed.attempt = a.attempt();
            failed.rank = a.rank();
            failed.exit_code = 127;
            failed.error = "error: the worker could not start the rank: " + std::string(s.message());
            unsent.Push(ToReport(failed));
          }
        } else if (a.action() == v1::Assignment::ACTION_STOP) {
          supervisor.StopJob(a.job_id());
        }
      }
    }
    if (metrics_ != nullptr && now >= next_sample) {
      metrics_->SampleProcesses(supervisor.Processes());
      next_sample = now + std::chrono::seconds(1);
    }
    for (RankEvent& e : supervisor.Poll()) {
      if (metrics_ != nullptr) metrics_->OnEvent(e);
      unsent.Push(ToReport(e));
    }
    if (!worker_id.empty()) {
      // In order; a transient failure (unreachable, slow) keeps the report for the next round.
      unsent.Deliver([&](v1::ReportRankStatusRequest& r) {
        r.set_worker_id(worker_id);
        v1::ReportRankStatusResponse resp;
        return stub->ReportRankStatus(WithDeadline(std::chrono::seconds(2)).get(), r, &resp);
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  reader.reset();
}

}  // namespace tessera::worker
