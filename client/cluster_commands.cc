#include "client/cluster_commands.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/enum_name.h"
#include "client/exit_codes.h"
#include "client/progress_line.h"
#include "client/table.h"
#include "spec/paths.h"
#include "common/rpc/channel.h"
#include "spec/job_spec.h"
#include "google/protobuf/util/json_util.h"
#include "tessera/v1/coordinator_service.grpc.pb.h"

namespace tessera::client {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<v1::CoordinatorService::Stub> Connect(const ClusterOptions& o) {
  rpc::ChannelOptions options;
  options.tls = o.tls;
  return v1::CoordinatorService::NewStub(rpc::OpenChannel(o.coordinator, options));
}

void SetDeadline(grpc::ClientContext* ctx, int seconds) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
}

using Stub = v1::CoordinatorService::Stub;

// One unary call of the coordinator's (`rpc`, e.g. &Stub::GetJob) within the command's --timeout.
template <typename Req, typename Resp>
grpc::Status Call(Stub& stub, const ClusterOptions& o, grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Req&, Resp*),
                  const Req& req, Resp* resp) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, o.timeout_s);
  return (stub.*rpc)(&ctx, req, resp);
}

// Prints the error of a failed call and returns the exit code it maps to.
int Report(const ClusterOptions& o, const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      std::cerr << "error: cannot reach the coordinator at " << o.coordinator << " (" << s.error_message() << ")"
                << (o.tls ? "" : "; if it serves TLS, give --tls-ca, --tls-cert and --tls-key") << "\n";
      return kExitUnreachable;
    case grpc::StatusCode::INVALID_ARGUMENT:
      for (absl::string_view line : absl::StrSplit(s.error_message(), '\n')) std::cerr << "error: " << line << "\n";
      return kExitBadInput;
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
      std::cerr << "error: " << s.error_message() << "\n";
      return kExitBadInput;
    default:
      std::cerr << "error: " << s.error_message() << "\n";
      return kExitJobFailed;
  }
}

}  // namespace

bool PrepareConnection(const rpc::TlsFiles& files, bool insecure, ClusterOptions* o) {
  if (files.empty()) {
    if (!rpc::IsLoopback(o->coordinator) && !insecure) {
      std::cerr << "error: --coordinator " << o->coordinator << " is not a loopback address: give --tls-ca, --tls-cert "
                << "and --tls-key (or $TESSERA_TLS_CA, $TESSERA_TLS_CERT, $TESSERA_TLS_KEY), or --insecure\n";
      return false;
    }
    return true;
  }
  auto tls = rpc::LoadTls(files);
  if (!tls.ok()) {
    std::string message(tls.status().message());
    for (auto [from, to] : {std::pair<const char*, const char*>{"--tls_ca", "--tls-ca"}, {"--tls_cert", "--tls-cert"},
                            {"--tls_key", "--tls-key"}}) {
      for (size_t at = message.find(from); at != std::string::npos; at = message.find(from)) message.replace(at, strlen(from), to);
    }
    std::cerr << "error: " << message << "\n";
    return false;
  }
  o->tls = std::move(*tls);
  return true;
}

namespace {

std::string StateName(v1::JobState s) { return EnumName(v1::JobState_Name(s), "JOB_STATE_", s); }

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions p;
  p.preserve_proto_field_names = true;
  p.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, p);
  return out;
}

bool Terminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

std::string Summary(const v1::Job& job) {
  std::string s = absl::StrCat(job.id(), " ", StateName(job.state()));
  if (job.progress().step() > 0) {
    absl::StrAppend(&s, absl::StrFormat(": step %d/%d, loss %.4f → %.4f", job.progress().step(),
                                        job.progress().total_steps(), job.progress().first_loss(),
                                        job.progress().loss()));
    if (job.progress().val_step() > 0) {
      absl::StrAppend(&s, absl::StrFormat(", val_loss %.4f (step %d)", job.progress().val_loss(),
                                          job.progress().val_step()));
    }
  }
  if (!job.reason().empty()) absl::StrAppend(&s, " (", job.reason(), ")");
  return s;
}

// Loads and validates a spec (printing its errors), with paths made absolute: paths in a spec are
// relative to where the user stands, and ranks run elsewhere.
std::optional<v1::JobSpec> LoadForCluster(const std::string& spec_path, const std::vector<std::string>& overrides) {
  auto spec = spec::LoadJobSpec(spec_path, overrides);
  if (!spec.ok()) {
    for (absl::string_view line : absl::StrSplit(spec.status().message(), '\n')) std::cerr << "error: " << line << "\n";
    return std::nullopt;
  }
  spec::MakePathsAbsolute(&*spec, fs::current_path().string());
  return *spec;
}

}  // namespace

int SubmitCommand(const ClusterOptions& o, const std::string& spec_path, const std::vector<std::string>& overrides,
                  int max_restarts, bool follow) {
  std::optional<v1::JobSpec> spec = LoadForCluster(spec_path, overrides);
  if (!spec) return kExitBadInput;
  v1::SubmitJobRequest req;
  *req.mutable_spec() = *spec;
  req.set_max_restarts(max_restarts);
  v1::SubmitJobResponse resp;
  grpc::Status s = Call(*Connect(o), o, &Stub::SubmitJob, req, &resp);
  if (!s.ok()) return Report(o, s);
  if (o.json && !follow) {
    std::cout << Json(resp.job()) << "\n";
    return kExitOk;
  }
  std::cout << "submitted " << resp.job().id() << " (" << StateName(resp.job().state()) << ": "
            << resp.job().reason() << ")" << std::endl;
  return follow ? FollowCommand(o, resp.job().id()) : kExitOk;
}

namespace {

// When following gives up (--timeout), or far in the future.
std::chrono::steady_clock::time_point FollowDeadline(const ClusterOptions& o) {
  return std::chrono::steady_clock::now() +
         std::chrono::seconds(o.follow_timeout_s > 0 ? o.follow_timeout_s : int64_t{365} * 24 * 3600);
}

int FollowTimedOut(const ClusterOptions& o, const std::string& job_id, const std::string& state) {
  std::cerr << "tessera: stopped following " << job_id << " after --timeout " << o.follow_timeout_s << "s"
            << (state.empty() ? "" : " (it is " + state + ")") << "; the job goes on\n";
  return kExitTimedOut;
}

}  // namespace

int FollowCommand(const ClusterOptions& o, const std::string& job_id) {
  const bool tty = isatty(STDOUT_FILENO);
  auto stub = Connect(o);
  v1::JobState last_state = v1::JOB_STATE_UNSPECIFIED;
  int64_t last_step = -1;
  std::set<std::string> warned;  // Warnings printed (each once, on stderr, as they come).
  auto reconnect_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  const auto give_up = FollowDeadline(o);
  while (true) {
    grpc::ClientContext ctx;
    // The stream ends there at the latest (DEADLINE_EXCEEDED).
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                                            give_up - std::chrono::steady_clock::now()));
    v1::WatchJobRequest req;
    req.set_job_id(job_id);
    auto reader = stub->WatchJob(&ctx, req);
    v1::WatchJobResponse resp;
    bool got_any = false;
    while (reader->Read(&resp)) {
      got_any = true;
      const v1::Job& job = resp.job();
      if (job.state() != last_state) {
        if (tty && last_step >= 0) std::cout << "\n";
        std::cout << job.id() << ": " << StateName(job.state()) << (job.reason().empty() ? "" : " — ") << job.reason()
                  << std::endl;
        last_state = job.state();
      }
      for (const std::string& w : job.progress().warnings()) {
        if (!warned.insert(w).second) continue;
        if (tty && last_step >= 0) std::cout << "\n" << std::flush;
        std::cerr << "warning: " << w << std::endl;
      }
      if (job.progress().step() != last_step && job.progress().step() > 0) {
        last_step = job.progress().step();
        Progress p{.step = job.progress().step(),
                   .total_steps = job.progress().total_steps(),
                   .loss = job.progress().loss(),
                   .val_loss = job.progress().val_step() > 0 ? job.progress().val_loss() : -1,
                   .lr = job.progress().lr(),
                   .tokens_per_s = job.progress().tokens_per_s()};
        if (job.progress().step_seconds() > 0) {
          p.eta_seconds = job.progress().step_seconds() * (job.progress().total_steps() - job.progress().step());
        }
        if (tty) {
          std::cout << "\r\033[K" << FormatProgress(p) << std::flush;
        } else {
          std::cout << FormatProgress(p) << std::endl;
        }
      }
      if (Terminal(job.state())) {
        if (tty) std::cout << "\n";
        std::cout << Summary(job) << std::endl;
        return job.state() == v1::JOB_STATE_SUCCEEDED ? kExitOk : kExitJobFailed;
      }
    }
    grpc::Status s = reader->Finish();
    if (std::chrono::steady_clock::now() >= give_up) {
      if (tty && last_step >= 0) std::cout << "\n";
      return FollowTimedOut(o, job_id, last_state == v1::JOB_STATE_UNSPECIFIED ? "" : StateName(last_state));
    }
    if (s.error_code() == grpc::StatusCode::NOT_FOUND || s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
        s.error_code() == grpc::StatusCode::PERMISSION_DENIED || s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
      return Report(o, s);
    }
    // The coordinator went away (restart?): keep following once it is back, over a new channel (a
    // TLS channel that lost its server did not reconnect to the restarted one: see worker/agent.cc).
    if (got_any) reconnect_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    if (std::chrono::steady_clock::now() > reconnect_deadline) return Report(o, s);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    stub = Connect(o);
  }
}

int JobsCommand(const ClusterOptions& o) {
  // Every page, newest first (the coordinator serves at most 1000 jobs per call).
  v1::ListJobsResponse resp;
  auto stub = Connect(o);
  v1::ListJobsRequest req;
  req.set_page_size(1000);
  do {
    v1::ListJobsResponse page;
    grpc::Status s = Call(*stub, o, &Stub::ListJobs, req, &page);
    if (!s.ok()) return Report(o, s);
    for (v1::Job& j : *page.mutable_jobs()) *resp.add_jobs() = std::move(j);
    req.set_page_token(page.next_page_token());
  } while (!req.page_token().empty());
  if (o.json) {
    std::cout << Json(resp) << "\n";
    return kExitOk;
  }
  Table t({"ID", "NAME", "STATE", "RANKS", "STEP", "LOSS", "VAL LOSS", "TOKENS/S", "REASON"});
  for (const v1::Job& j : resp.jobs()) {
    const auto& p = j.progress();
    t.AddRow({j.id(), j.spec().name(), StateName(j.state()), absl::StrCat(spec::WorldSize(j.spec())),
              p.step() > 0 ? absl::StrCat(p.step(), "/", p.total_steps()) : "-",
              p.step() > 0 ? absl::StrFormat("%.4f", p.loss()) : "-",
              p.val_step() > 0 ? absl::StrFormat("%.4f", p.val_loss()) : "-",
              p.step() > 0 ? FormatCount(p.tokens_per_s()) : "-", j.reason()});
  }
  std::cout << t.ToString();
  return kExitOk;
}

int JobCommand(const ClusterOptions& o, const std::string& job_id) {
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  v1::GetJobResponse resp;
  grpc::Status s = Call(*Connect(o), o, &Stub::GetJob, req, &resp);
  if (!s.ok()) return Report(o, s);
  if (o.json) {
    std::cout << Json(resp.job()) << "\n";
    return kExitOk;
  }
  const v1::Job& j = resp.job();
  std::cout << Summary(j) << "\n";
  Table t({"RANK", "WORKER", "DEVICE"});
  for (const auto& p : j.placement()) t.AddRow({absl::StrCat(p.rank()), p.worker_id(), absl::StrCat(p.local_rank())});
  std::cout << "name: " << j.spec().name() << "\nattempt: " << j.attempt() << " (restarts used "
            << j.restarts_used() << " of " << j.max_restarts() << ")\nlast checkpoint: step "
            << j.progress().last_checkpoint_step() << " in " << j.spec().checkpoint().dir()
            << "\noutput_dir: " << j.spec().output_dir() << "\n";
  if (!j.placement_explanation().empty()) std::cout << "placement: " << j.placement_explanation() << "\n";
  for (const std::string& w : j.progress().warnings()) std::cout << "warning: " << w << "\n";
  if (j.placement_size() > 0) std::cout << t.ToString();
  if (j.history_size() > 0) {
    // Each attempt: where it ran, the steps it covered (from its checkpoint to its last step), how
    // it ended and, when a node ended it, which one; REDONE: steps of earlier attempts it trained again.
    Table h({"ATTEMPT", "WORKERS", "STEPS", "REDONE", "OUTCOME", "FAILED NODE", "REASON"});
    for (const v1::Attempt& a : j.history()) {
      std::string outcome = "running";
      if (a.outcome() != v1::JOB_STATE_UNSPECIFIED) {
        outcome = absl::AsciiStrToLower(StateName(a.outcome()));
      }
      h.AddRow({absl::StrCat(a.attempt()), absl::StrJoin(a.workers(), ","),
                absl::StrCat(a.resumed_from_step() + 1, "..", std::max(a.last_step(), a.resumed_from_step())),
                absl::StrCat(a.recomputed_steps()), outcome,
                a.failed_worker().empty() ? "-" : absl::StrCat(a.failed_worker(), " (", a.failed_host(), ")"),
                a.reason()});
    }
    std::cout << "history:\n" << h.ToString();
  }
  return kExitOk;
}

int CancelCommand(const ClusterOptions& o, const std::string& job_id) {
  v1::CancelJobRequest req;
  req.set_job_id(job_id);
  v1::CancelJobResponse resp;
  grpc::Status s = Call(*Connect(o), o, &Stub::CancelJob, req, &resp);
  if (!s.ok()) return Report(o, s);
  std::cout << Summary(resp.job()) << "\n";
  return kExitOk;
}

int ReleaseWorkerKeyCommand(const ClusterOptions& o, const std::string& name) {
  v1::ReleaseWorkerKeyRequest req;
  req.set_name(name);
  v1::ReleaseWorkerKeyResponse resp;
  grpc::Status s = Call(*Connect(o), o, &Stub::ReleaseWorkerKey, req, &resp);
  if (!s.ok()) return Report(o, s);
  std::cout << "worker " << name << ": key released; its next registration binds the key it presents\n";
  return kExitOk;
}

int WorkersCommand(const ClusterOptions& o) {
  v1::ListWorkersResponse resp;
  grpc::Status s = Call(*Connect(o), o, &Stub::ListWorkers, v1::ListWorkersRequest(), &resp);
  if (!s.ok()) return Report(o, s);
  if (o.json) {
    std::cout << Json(resp) << "\n";
    return kExitOk;
  }
  Table t({"ID", "NAME", "POOL", "STATE", "DEVICES", "IN USE", "MEMORY/DEVICE", "HOST", "LABELS"});
  for (const v1::Worker& w : resp.workers()) {
    const std::string kind = w.device_kind() == v1::DEVICE_KIND_CUDA ? "cuda" : "cpu";
    const std::string state = EnumName(v1::Worker::State_Name(w.state()), "STATE_", w.state());
    const std::map<std::string, std::string> labels(w.labels().begin(), w.labels().end());  // Sorted.
    t.AddRow({w.id(), w.name(), w.pool().empty() ? "default" : w.pool(), state,
              absl::StrCat(kind, ":", w.device_count()), absl::StrCat(w.devices_in_use()),
              absl::StrFormat("%.1f GiB", w.device_memory_bytes() / double(1 << 30)), w.host(),
              absl::StrJoin(labels, ",", absl::PairFormatter("="))});
  }
  std::cout << t.ToString();
  for (const v1::Worker& w : resp.workers()) {
    for (const v1::DeviceQuarantine& q : w.quarantined()) {
      std::cout << w.name() << ": device " << q.device() << " quarantined: " << q.reason() << "\n";
    }
  }
  return kExitOk;
}

int PlanCommand(const ClusterOptions& o, const std::string& spec_path, const std::vector<std::string>& overrides) {
  std::optional<v1::JobSpec> spec = LoadForCluster(spec_path, overrides);
  if (!spec) return kExitBadInput;
  v1::PlanJobRequest req;
  *req.mutable_spec() = *spec;
  v1::PlanJobResponse resp;
  grpc::Status s = Call(*Connect(o), o, &Stub::PlanJob, req, &resp);
  if (!s.ok()) return Report(o, s);
  if (o.json) {
    std::cout << Json(resp) << "\n";
    return kExitOk;
  }
  std::cout << "mesh: dp " << resp.dp() << " × pp " << resp.pp() << " × tp " << resp.tp() << " × sp " << resp.sp()
            << " = " << resp.world_size() << " ranks, order " << resp.order() << "\n";
  if (!resp.placeable_now()) {
    std::cout << "not placeable now: " << resp.reason() << "\n";
    return kExitOk;
  }
  std::cout << "placement: " << resp.reason() << "\n";
  Table t({"RANK", "WORKER", "DEVICE"});
  for (const auto& p : resp.placement()) t.AddRow({absl::StrCat(p.rank()), p.worker_id(), absl::StrCat(p.local_rank())});
  std::cout << t.ToString();
  return kExitOk;
}

int LogsCommand(const ClusterOptions& o, const std::string& job_id, int rank, bool follow) {
  auto stub = Connect(o);
  int64_t offset = 0;
  const auto give_up = FollowDeadline(o);
  while (true) {
    v1::GetJobLogsRequest req;
    req.set_job_id(job_id);
    req.set_rank(rank);
    req.set_offset(offset);
    req.set_max_bytes(1 << 20);
    v1::GetJobLogsResponse resp;
    grpc::Status s = Call(*stub, o, &Stub::GetJobLogs, req, &resp);
    if (!s.ok()) return Report(o, s);
    std::cout << resp.data() << std::flush;
    offset = resp.next_offset();
    if (!resp.data().empty()) continue;  // More may be there already.
    if (!follow) return kExitOk;
    v1::GetJobRequest get;
    get.set_job_id(job_id);
    v1::GetJobResponse job;
    if (grpc::Status js = Call(*stub, o, &Stub::GetJob, get, &job); !js.ok()) return Report(o, js);
    if (Terminal(job.job().state())) return kExitOk;
    if (std::chrono::steady_clock::now() >= give_up) return FollowTimedOut(o, job_id, StateName(job.job().state()));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

}  // namespace tessera::client
