#include "worker/rank_supervisor.h"

#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/process/rank_launch.h"
#include "common/process/subprocess.h"
#include "spec/model_config_of.h"
#include "common/userfs/user_files.h"
#include "google/protobuf/util/json_util.h"

namespace tessera::worker {

namespace fs = std::filesystem;

// A running rank 0's step log and checkpoint directory (the user's files) are read at most this often.
constexpr std::chrono::milliseconds kProgressEvery(200);

double ModelFlopsPerToken(const v1::JobSpec& spec) {
  return spec::ModelConfigOf(spec.model()).TrainingFlopsPerToken();
}

RankSupervisor::~RankSupervisor() {
  std::vector<pid_t> pids = Pids();
  process::StopAll(pids, std::chrono::milliseconds(2000));
}

absl::Status RankSupervisor::Start(const v1::Assignment& a) {
  const Key key{a.job_id(), a.attempt(), a.rank()};
  if (ranks_.count(key)) return absl::OkStatus();  // Already running (a repeated order).
  const std::string dir = absl::StrCat(options_.work_dir, "/jobs/", a.job_id(), "/attempt_", a.attempt());
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot create: ", ec.message()));
  // Written for every rank, never reused: a job.json left by an earlier job of the same id (the
  // coordinator's database recreated, ids starting again) must not start this one with its spec.
  // Each rank renames its own copy into place, so a rank never reads a half-written file.
  const std::string spec_path = absl::StrCat(dir, "/job.json");
  {
    std::string json;
    google::protobuf::util::JsonPrintOptions print;
    print.preserve_proto_field_names = true;
    print.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(a.spec(), &json, print);
    const std::string tmp = absl::StrCat(spec_path, ".tmp.", a.rank());
    std::ofstream out(tmp, std::ios::trunc);
    out << json;
    out.close();
    if (!out) return absl::UnavailableError(absl::StrCat(tmp, ": cannot write the job's spec"));
    fs::rename(tmp, spec_path, ec);
    if (ec) return absl::UnavailableError(absl::StrCat(spec_path, ": cannot rename ", tmp, " into place: ", ec.message()));
  }
  Rank r;
  // Next to the job's checkpoints (storage every node and the coordinator can read); one file per rank
  // over all attempts, each attempt starting with a header line.
  RankFiles& files = r.files;
  files.job_id = a.job_id(), files.attempt = a.attempt(), files.rank = a.rank();
  files.shown_dir = a.spec().output_dir();
  files.open_base = files.shown_dir;
  if (!options_.output_root.empty()) {
    auto below = userfs::RelativeBelow(options_.output_root, files.shown_dir);
    if (!below.ok()) return absl::FailedPreconditionError(absl::StrCat("the job's output_dir: ", below.status().message()));
    files.open_base = options_.output_root, files.prefix = *below, files.below_root = true;
  }
  files.log_name = absl::StrCat("logs/rank_", a.rank(), ".log");
  files.reads_steps = a.rank() == 0;  // Rank 0's step log and checkpoints are read for progress.
  files.checkpoint_dir = a.spec().checkpoint().dir();
  files.flops_per_token = ModelFlopsPerToken(a.spec());
  files.world_size = a.world_size();
  files.samples_per_step = a.spec().train().global_batch();
  process::RankLaunch launch;
  launch.binary = options_.rank_binary;
  launch.spec_path = spec_path;
  launch.rank = a.rank(), launch.world_size = a.world_size(), launch.local_rank = a.local_rank();
  launch.store_host = a.store_host(), launch.store_port = a.store_port();
  launch.host = options_.host;  // NCCL's and Gloo's sockets on the interface other nodes reach this one by.
  launch.interface = options_.interface;
  launch.threads = options_.threads_per_rank;
  launch.peak_flops_per_device = options_.peak_flops_per_device;
  launch.timeout_s = options_.collective_timeout_s;
  if (!a.job_uid().empty()) launch.fence_job = a.job_uid(), launch.fence_attempt = a.attempt();
  r.spawn.argv = launch.Argv();
  r.spawn.env = launch.Env();
  r.device = a.local_rank();
  // The log is opened (and the step log's end taken) on a thread of its own: OUTPUT_DIR may be on a
  // mount that stopped answering. Start waits a little; a later Poll spawns a rank whose log opens later.
  if (!r.opener.Start([files, hook = options_.user_files_hook] {
        if (hook) hook(files.shown_dir);
        return OpenRankFiles(files);
      })) {
    return absl::UnavailableError("no thread to open the rank's log with");
  }
  r.open_started = options_.clock->Now();
  bool sibling_opening = false;  // Then this one waits no more than it.
  for (const auto& [k, other] : ranks_) {
    sibling_opening |= std::get<0>(k) == a.job_id() && std::get<1>(k) == a.attempt() && other.pid < 0;
  }
  std::optional<StartedFiles> opened =
      sibling_opening ? r.opener.Take() : r.opener.WaitFor(options_.start_files_wait);
  if (opened.has_value()) {
    if (absl::Status st = Spawn(key, r, *std::move(opened), &pending_); !st.ok()) return st;
  }
  ranks_.emplace(key, std::move(r));
  return absl::OkStatus();
}

absl::Status RankSupervisor::Spawn(const Key& key, Rank& r, StartedFiles opened, std::vector<RankEvent>* events) {
  if (!opened.status.ok()) return opened.status;
  r.files = std::move(opened.files);
  r.spawn.log_fd = opened.log.get();
  auto pid = process::Spawn(r.spawn);
  r.spawn.log_fd = -1;  // Closed with `opened`.
  if (!pid.ok()) return pid.status();
  r.pid = *pid;
  RankEvent started;
  started.event = v1::ReportRankStatusRequest::EVENT_STARTED;
  std::tie(started.job_id, started.attempt, started.rank) = key;
  events->push_back(std::move(started));
  return absl::OkStatus();
}

bool RankSupervisor::FinishStart(const Key& key, Rank& r, absl::Time now, std::vector<RankEvent>* events) {
  RankEvent e;
  e.event = v1::ReportRankStatusRequest::EVENT_EXITED;
  std::tie(e.job_id, e.attempt, e.rank) = key;
  if (r.stopping) {  // Stopped before it ran.
    r.opener.Abandon();
    e.exit_code = -SIGTERM;
    e.error = r.stop_reason;
  } else if (std::optional<StartedFiles> opened = r.opener.Take()) {
    absl::Status st = Spawn(key, r, *std::move(opened), events);
    if (st.ok()) return false;
    e.exit_code = 127;
    e.error = kCouldNotStart + std::string(st.message());
  } else if (now - r.open_started >= absl::FromChrono(options_.user_files_timeout)) {
    r.opener.Abandon();
    e.exit_code = 127;
    e.error = absl::StrCat(kCouldNotStart, r.files.shown_dir, "/", r.files.log_name, ": did not open in ",
                           absl::FormatDuration(absl::FromChrono(options_.user_files_timeout)),
                           " (is that storage answering?)");
  } else {
    return false;  // Still opening.
  }
  events->push_back(std::move(e));
  return true;
}

void RankSupervisor::StopJob(const std::string& job_id, int attempt, const std::string& reason) {
  for (auto& [key, r] : ranks_) {
    if (std::get<0>(key) != job_id || (attempt > 0 && std::get<1>(key) != attempt) || r.stopping || r.exited) continue;
    r.stopping = true;
    r.stop_reason = reason;
    if (r.pid < 0) continue;  // Not spawned: the next Poll gives it up.
    r.kill_at = options_.clock->Now() + absl::FromChrono(options_.stop_grace);
    kill(-r.pid, SIGTERM);
  }
}

bool RankSupervisor::StartRead(Rank& r, bool last_error) {
  r.progress_read_at = std::chrono::steady_clock::now();
  if (!r.read.Start([files = r.files, last_error, hook = options_.user_files_hook]() mutable {
        if (hook) hook(files.shown_dir);
        return ReadRankFiles(std::move(files), last_error);
      })) {
    return false;
  }
  r.read_started = options_.clock->Now();
  return true;
}

void RankSupervisor::StopForFiles(const Key& key, Rank& r, const std::string& what) {
  if (!r.file_error.empty() || r.stopping) return;
  const auto& [job, attempt, rank] = key;
  r.file_error = absl::StrCat("error: the worker stopped the job: ", what);
  std::cerr << "tessera-worker: job " << job << ": " << r.file_error << std::endl;
  StopJob(job, attempt, r.file_error);
}

void RankSupervisor::ApplyRead(const Key& key, Rank& r, FilesRead read, std::vector<RankEvent>* events) {
  r.files = std::move(read.files);
  for (RankEvent& e : read.events) events->push_back(std::move(e));
  if (!read.last_error.empty()) r.last_error = std::move(read.last_error);
  // A refusal (a FIFO, a link, a directory in the step log's place) stops the job.
  if (!read.step_log.ok()) StopForFiles(key, r, absl::StrCat("its step log: ", read.step_log.message()));
}

RankEvent RankSupervisor::Exited(const Key& key, const Rank& r) {
  RankEvent e;
  e.event = v1::ReportRankStatusRequest::EVENT_EXITED;
  std::tie(e.job_id, e.attempt, e.rank) = key;
  e.exit_code = r.exit_code;
  if (e.exit_code != 0) e.error = r.file_error.empty() ? r.last_error : r.file_error;
  if (e.exit_code != 0 && e.error.empty()) e.error = r.stop_reason;
  return e;
}

std::vector<RankEvent> RankSupervisor::Poll() {
  std::vector<RankEvent> events;
  events.swap(pending_);
  const absl::Time now = options_.clock->Now();
  for (auto it = ranks_.begin(); it != ranks_.end();) {
    const Key& key = it->first;
    Rank& r = it->second;
    if (r.pid < 0) {  // Its log is still opening.
      if (FinishStart(key, r, now, &events)) {
        it = ranks_.erase(it);
        continue;
      }
      if (r.pid < 0) {
        ++it;
        continue;
      }
    }
    // A finished read is applied; one that has not answered in user_files_timeout is abandoned (its
    // thread may stay blocked in the kernel), and no file of the rank is read again.
    if (r.read.busy()) {
      if (std::optional<FilesRead> done = r.read.Take()) {
        ApplyRead(key, r, *std::move(done), &events);
      } else if (now - r.read_started >= absl::FromChrono(options_.user_files_timeout)) {
        r.read.Abandon();
        const std::string what = absl::StrCat("its files under ", r.files.shown_dir, " did not answer in ",
                                              absl::FormatDuration(absl::FromChrono(options_.user_files_timeout)),
                                              " (is that storage answering?)");
        // The attempt's other ranks share that directory: none of them reads it again either (their
        // reads would hang as long, each leaving a thread behind).
        for (auto& [k, other] : ranks_) {
          if (std::get<0>(k) != std::get<0>(key) || std::get<1>(k) != std::get<1>(key)) continue;
          other.files_hung = true;
          if (other.exited && other.last_error.empty()) other.last_error = "error: " + what;
        }
        StopForFiles(key, r, what);
      }
    }
    // Reap first, read second: after an exit every line and checkpoint the rank wrote is there.
    if (!r.exited) {
      int status = 0;
      if (waitpid(r.pid, &status, WNOHANG) == r.pid) {
        kill(-r.pid, SIGKILL);  // Anything the rank left in its process group.
        r.exited = true;
        r.exited_at = now;
        r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      }
    }
    if (r.exited) {
      // One read after the exit (progress to the end, the error line of a failed rank); EXITED once
      // it is done.
      if (!r.final_read && !r.read.busy()) {
        const bool last_error = r.exit_code != 0 && r.file_error.empty();
        const bool needed = !r.files_hung && (r.files.reads_steps || last_error);
        // Without a thread for it (the system refused one) it is tried again each Poll, given up after
        // user_files_timeout.
        r.final_read = !needed || StartRead(r, last_error) ||
                       now - r.exited_at >= absl::FromChrono(options_.user_files_timeout);
      }
      if (r.final_read && !r.read.busy()) {
        events.push_back(Exited(key, r));
        it = ranks_.erase(it);
        continue;
      }
    } else {
      if (r.files.reads_steps && !r.files_hung && !r.read.busy() &&
          std::chrono::steady_clock::now() - r.progress_read_at >= kProgressEvery) {
        StartRead(r, /*last_error=*/false);
      }
      if (r.stopping && now >= r.kill_at) kill(-r.pid, SIGKILL);
    }
    ++it;
  }
  return events;
}

std::vector<v1::RunningRank> RankSupervisor::Running() const {
  std::vector<v1::RunningRank> out;
  for (const auto& [key, r] : ranks_) {
    v1::RunningRank rr;
    rr.set_job_id(std::get<0>(key));
    rr.set_attempt(std::get<1>(key));
    rr.set_rank(std::get<2>(key));
    rr.set_device(r.device);
    out.push_back(std::move(rr));
  }
  return out;
}

std::vector<RankProcess> RankSupervisor::Processes() const {
  std::vector<RankProcess> out;
  for (const auto& [key, r] : ranks_) {
    if (r.pid > 0 && !r.exited) out.push_back({std::get<0>(key), std::get<2>(key), r.pid});
  }
  return out;
}

std::vector<pid_t> RankSupervisor::Pids() const {
  std::vector<pid_t> out;
  for (const auto& [key, r] : ranks_) {
    if (r.pid > 0 && !r.exited) out.push_back(r.pid);  // A reaped pid may be another process's now.
  }
  return out;
}

}  // namespace tessera::worker
