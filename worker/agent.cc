#include "worker/agent.h"

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "worker/grpc_coordinator_link.h"
#include "worker/start_order.h"

namespace tessera::worker {
namespace {

constexpr absl::Duration kMaxBackoff = absl::Seconds(2);
constexpr absl::Duration kRound = absl::Milliseconds(100);  // Run() calls Tick() this often.

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

}  // namespace

Agent::Agent(AgentOptions options, WorkerMetrics* metrics)
    : Agent(options, metrics, std::make_unique<GrpcCoordinatorLink>(options.coordinator, options.tls),
            std::make_unique<RankSupervisor>(options.supervisor)) {}

Agent::Agent(AgentOptions options, WorkerMetrics* metrics, std::unique_ptr<CoordinatorLink> link,
             std::unique_ptr<Ranks> ranks)
    : options_(std::move(options)),
      metrics_(metrics),
      link_(std::move(link)),
      ranks_(std::move(ranks)),
      instance_(absl::StrCat(options_.host, "/", getpid(), "/",
                             std::chrono::system_clock::now().time_since_epoch().count())) {}

void Agent::Run(const std::atomic<bool>& stop) {
  while (!stop) {
    Tick();
    std::this_thread::sleep_for(absl::ToChronoMilliseconds(kRound));
  }
  ranks_.reset();
  link_.reset();
}

void Agent::Tick() {
  const absl::Time now = options_.clock->Now();
  if (worker_id_.empty() && now >= next_attempt_) Register(now);
  if (!worker_id_.empty() && now >= next_heartbeat_) Heartbeat(now);
  ApplyAssignments();
  CheckLease(options_.clock->Now());
  CollectEvents(now);
  if (!worker_id_.empty()) {
    // In order; a transient failure (unreachable, slow) keeps the report for the next round.
    unsent_.Deliver([&](v1::ReportRankStatusRequest& r) {
      r.set_worker_id(worker_id_);
      grpc::Status s = link_->Report(r);
      Guard();
      return s;
    });
  }
}

v1::RegisterWorkerRequest Agent::Registration() {
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
  req.set_pool(options_.pool);
  for (const auto& [key, value] : options_.labels) (*req.mutable_labels())[key] = value;
  req.set_instance(instance_);
  req.set_attempt(++registrations_);
  req.set_stop_grace_ms(static_cast<int32_t>(std::min<int64_t>(options_.supervisor.stop_grace.count(), 1 << 30)));
  // The lease check and the SIGKILL escalation each wait for at most one blocking call (and a round).
  req.set_stop_delay_ms(static_cast<int32_t>(
      std::min<int64_t>(absl::ToInt64Milliseconds(2 * (link_->LongestCall() + kRound)), 1 << 30)));
  for (auto& r : ranks_->Running()) *req.add_running() = r;
  for (const auto& r : unsent_.Exits()) *req.add_exited() = r;
  for (const RankEvent& e : polled_) {
    if (e.event == v1::ReportRankStatusRequest::EVENT_EXITED) *req.add_exited() = ToReport(e);
  }
  return req;
}

void Agent::Register(absl::Time now) {
  v1::RegisterWorkerResponse resp;
  const size_t polled = polled_.size();  // Events the registration carries (its exits) or makes stale.
  grpc::Status s = link_->Register(Registration(), &resp);
  Guard();
  if (s.ok()) {
    // The exits went with the registration; the rest (starts, progress) is stale now. Events Guard()
    // took after the request was made are kept.
    unsent_.Clear();
    polled_.erase(polled_.begin(), polled_.begin() + static_cast<std::ptrdiff_t>(polled));
    worker_id_ = resp.worker_id();
    heartbeat_interval_ = absl::Milliseconds(std::max(100, resp.heartbeat_interval_ms()));
    lease_ = absl::Milliseconds(std::max(0, resp.lease_ms()));
    lease_from_ = now;  // `now` was taken before the request was sent.
    lease_ran_out_ = false;
    next_heartbeat_ = now;
    session_ = resp.session();
    applied_seq_ = 0;
    specs_.Clear();  // This session's orders bring their specs again.
    link_->OpenAssignments(worker_id_, session_);
    backoff_ = absl::Milliseconds(200);
    said_unreachable_ = false;
    last_refusal_.clear();
    std::cout << "tessera-worker: registered as " << worker_id_ << " with " << options_.coordinator << std::endl;
    return;
  }
  if (s.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
    // The name is held by a live worker: say so (once per message) and keep trying, as a worker
    // restarted faster than its predecessor's name hold is accepted moments later.
    if (s.error_message() != last_refusal_) {
      std::cerr << "tessera-worker: registration refused: " << s.error_message() << " (retrying)" << std::endl;
      last_refusal_ = s.error_message();
    }
  } else {
    link_->Reconnect();  // As after a lost heartbeat.
    if (!said_unreachable_) {
      std::cerr << "tessera-worker: cannot register with " << options_.coordinator << ": " << s.error_message()
                << " (retrying)" << std::endl;
      said_unreachable_ = true;
    }
  }
  next_attempt_ = now + backoff_;
  backoff_ = std::min(backoff_ * 2, kMaxBackoff);
}

void Agent::Heartbeat(absl::Time now) {
  v1::HeartbeatRequest req;
  req.set_worker_id(worker_id_);
  req.set_session(session_);
  // The acknowledgement, and every rank the coordinator may still count as alive: those this worker
  // runs and those whose exit it has not delivered yet (one loop thread: no rank is between).
  req.set_applied_seq(applied_seq_);
  req.set_reports_ranks(true);
  for (auto& r : ranks_->Running()) *req.add_ranks() = r;
  for (const auto& e : unsent_.Exits()) {
    v1::RunningRank* r = req.add_ranks();
    r->set_job_id(e.job_id());
    r->set_attempt(e.attempt());
    r->set_rank(e.rank());
  }
  for (const RankEvent& e : polled_) {  // Exits Guard() took during an earlier call.
    if (e.event != v1::ReportRankStatusRequest::EVENT_EXITED) continue;
    v1::RunningRank* r = req.add_ranks();
    r->set_job_id(e.job_id);
    r->set_attempt(e.attempt);
    r->set_rank(e.rank);
  }
  v1::HeartbeatResponse resp;
  grpc::Status s = link_->Heartbeat(req, &resp);
  Guard();
  next_heartbeat_ = now + heartbeat_interval_;
  if (s.ok()) {
    lease_from_ = now;  // Renewed from when this heartbeat was sent.
    lease_ran_out_ = false;
  }
  if (!s.ok()) {
    std::cerr << "tessera-worker: lost the coordinator (" << s.error_message() << "); registering again" << std::endl;
    worker_id_.clear();
    link_->Reconnect();
    next_attempt_ = now;
  } else if (link_->AssignmentsBroken()) {
    // The registration holds; only the stream broke. A new one gets the orders not acknowledged.
    std::cerr << "tessera-worker: the assignment stream ended; opening it again" << std::endl;
    link_->OpenAssignments(worker_id_, session_);
  }
}

void Agent::ApplyAssignments() {
  if (worker_id_.empty()) return;
  for (const v1::Assignment& a : link_->TakeAssignments()) {
    if (a.seq() > 0 && a.seq() <= applied_seq_) continue;  // Sent again after a reconnect: applied.
    if (a.seq() > applied_seq_ + 1) {
      // An order is missing (lost with a broken stream): a new stream sends every order not
      // acknowledged again, in order.
      std::cerr << "tessera-worker: assignment " << applied_seq_ + 1 << " is missing (got " << a.seq()
                << "); opening the stream again" << std::endl;
      link_->OpenAssignments(worker_id_, session_);
      return;
    }
    if (a.seq() > 0) applied_seq_ = a.seq();
    if (a.action() == v1::Assignment::ACTION_START) {
      StartRank(a);
    } else if (a.action() == v1::Assignment::ACTION_STOP) {
      ranks_->StopJob(a.job_id(), a.attempt());
    }
  }
}

void Agent::StartRank(const v1::Assignment& a) {
  const std::optional<v1::Assignment> order = specs_.Complete(a);
  absl::Status s = order ? CheckStartOrder(*order, options_.device_count, options_.roots)
                         : absl::InvalidArgumentError(absl::StrCat(
                               "assignment.spec: is missing, and no earlier start order of attempt ", a.attempt(),
                               " of job ", a.job_id(), " in this registration brought it"));
  if (s.ok()) s = ranks_->Start(*order);
  if (s.ok()) return;
  RankEvent failed;
  failed.event = v1::ReportRankStatusRequest::EVENT_EXITED;
  failed.job_id = a.job_id();
  failed.attempt = a.attempt();
  failed.rank = a.rank();
  failed.exit_code = 127;
  failed.error = kCouldNotStart + std::string(s.message());
  unsent_.Push(ToReport(failed));
}

void Agent::CheckLease(absl::Time now) {
  if (lease_ <= absl::ZeroDuration() || lease_ran_out_ || now - lease_from_ <= lease_) return;
  std::vector<v1::RunningRank> running = ranks_->Running();
  if (running.empty()) return;
  lease_ran_out_ = true;
  const std::string why = absl::StrCat("stopped by its worker: no heartbeat reached the coordinator for ",
                                       absl::FormatDuration(absl::Trunc(now - lease_from_, absl::Milliseconds(100))),
                                       ", longer than the worker's lease of ", absl::FormatDuration(lease_),
                                       " (the coordinator may place the attempt elsewhere)");
  std::cerr << "tessera-worker: lease ran out; stopping " << running.size() << " rank(s): " << why << std::endl;
  std::set<std::pair<std::string, int>> attempts;
  for (const v1::RunningRank& r : running) attempts.insert({r.job_id(), r.attempt()});
  for (const auto& [job, attempt] : attempts) ranks_->StopJob(job, attempt, why);
}

void Agent::Guard() {
  CheckLease(options_.clock->Now());
  for (RankEvent& e : ranks_->Poll()) polled_.push_back(std::move(e));
}

void Agent::CollectEvents(absl::Time now) {
  if (metrics_ != nullptr && now >= next_sample_) {
    metrics_->SampleProcesses(ranks_->Processes());
    next_sample_ = now + absl::Seconds(1);
  }
  for (RankEvent& e : ranks_->Poll()) polled_.push_back(std::move(e));
  for (RankEvent& e : polled_) {
    if (metrics_ != nullptr) metrics_->OnEvent(e);
    unsent_.Push(ToReport(e));
  }
  polled_.clear();
}

}  // namespace tessera::worker
