#include "worker/rank_supervisor.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/process/rank_launch.h"
#include "common/process/subprocess.h"
#include "common/spec/model_config_of.h"
#include "common/steplog/step_log.h"
#include "common/userfs/user_files.h"
#include "formats/checkpoint/checkpoint_dir.h"
#include "google/protobuf/util/json_util.h"

namespace tessera::worker {

namespace fs = std::filesystem;

constexpr char kStepLog[] = "steps.jsonl";
// The most of rank 0's step log read in one Poll().
constexpr int64_t kMaxStepBytesPerPoll = 4 << 20;
// Warning lines forwarded per round at most (each cut to steplog::kMaxWarningBytes).
constexpr size_t kMaxWarningsPerPoll = 16;
// A running rank's step log and checkpoint directory (the user's files) are read at most this often.
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
  r.output_dir = a.spec().output_dir();
  r.open_base = r.output_dir;
  if (!options_.output_root.empty()) {
    auto below = userfs::RelativeBelow(options_.output_root, r.output_dir);
    if (!below.ok()) return absl::FailedPreconditionError(absl::StrCat("the job's output_dir: ", below.status().message()));
    r.open_base = options_.output_root, r.open_prefix = *below;
    // A per-user directory (OUTPUT_ROOT/alice) may be an administrator's link to another volume: a link
    // there owned by root or by this worker's user is followed; below it nothing is.
    const size_t slash = below->find('/');
    const std::string first = below->substr(0, slash);
    struct stat st {};
    if (!first.empty() && lstat((options_.output_root + "/" + first).c_str(), &st) == 0 && S_ISLNK(st.st_mode) &&
        (st.st_uid == 0 || st.st_uid == geteuid())) {
      r.open_base = options_.output_root + "/" + first;
      r.open_prefix = slash == std::string::npos ? "" : below->substr(slash + 1);
    }
  }
  r.log_name = absl::StrCat("logs/rank_", a.rank(), ".log");
  auto log = userfs::OpenUnder(r.open_base, r.UserFile(r.log_name), {userfs::Access::kAppend, /*create_dirs=*/true});
  if (!log.ok()) return absl::FailedPreconditionError(absl::StrCat("the rank's log: ", log.status().message()));
  absl::Status header = userfs::WriteAll(log->get(), absl::StrCat("=== tessera-worker: job ", a.job_id(), " attempt ",
                                                                  a.attempt(), " rank ", a.rank(), " ===\n"));
  if (!header.ok()) return absl::UnavailableError(absl::StrCat(r.output_dir, "/", r.log_name, ": ", header.message()));
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
  if (a.rank() == 0) {
    r.checkpoint_dir = a.spec().checkpoint().dir();
    r.reads_steps = true;
    // Report only what this attempt writes: the offset is taken before the rank can write.
    auto steps = userfs::OpenUnder(r.open_base, r.UserFile(kStepLog), {});
    if (!steps.ok() && !absl::IsNotFound(steps.status())) {
      return absl::FailedPreconditionError(absl::StrCat("the job's step log: ", steps.status().message()));
    }
    struct stat st {};
    if (steps.ok() && fstat(steps->get(), &st) == 0) r.steps_offset = st.st_size, r.steps_inode = st.st_ino;
  }
  process::SpawnOptions so;
  so.argv = launch.Argv();
  so.env = launch.Env();
  so.log_fd = log->get();
  auto pid = process::Spawn(so);
  if (!pid.ok()) return pid.status();
  r.pid = *pid;
  r.device = a.local_rank();
  r.flops_per_token = ModelFlopsPerToken(a.spec());
  r.world_size = a.world_size();
  r.samples_per_step = a.spec().train().global_batch();
  ranks_.emplace(key, std::move(r));
  RankEvent started;
  started.event = v1::ReportRankStatusRequest::EVENT_STARTED;
  started.job_id = a.job_id();
  started.attempt = a.attempt();
  started.rank = a.rank();
  pending_.push_back(std::move(started));
  return absl::OkStatus();
}

void RankSupervisor::StopJob(const std::string& job_id, int attempt, const std::string& reason) {
  for (auto& [key, r] : ranks_) {
    if (std::get<0>(key) != job_id || (attempt > 0 && std::get<1>(key) != attempt) || r.stopping) continue;
    r.stopping = true;
    r.stop_reason = reason;
    r.kill_at = options_.clock->Now() + absl::FromChrono(options_.stop_grace);
    kill(-r.pid, SIGTERM);
  }
}

void RankSupervisor::ReadProgress(const Key& key, Rank& r, std::vector<RankEvent>* events) {
  const auto& [job, attempt, rank] = key;
  // Progress from rank 0's step log: step 1 (the baseline loss) and the newest complete line.
  if (!r.reads_steps) return;
  auto in = userfs::OpenUnder(r.open_base, r.UserFile(kStepLog), {});
  if (!in.ok()) {
    // A refusal (a FIFO, a link, a directory in its place) stops the job; a read error that may pass
    // (EIO, ESTALE, EMFILE: Unavailable) is tried again next round.
    const bool refused = absl::IsFailedPrecondition(in.status()) || absl::IsInvalidArgument(in.status());
    if (refused && r.file_error.empty() && !r.stopping) {
      r.file_error = absl::StrCat("error: the worker stopped the job: its step log: ", in.status().message());
      std::cerr << "tessera-worker: job " << job << ": " << r.file_error << std::endl;
      StopJob(job, attempt, r.file_error);
    }
    return;
  }
  // Rank 0 replaces the log at its start (without the steps past the checkpoint it resumes from,
  // written to a new file renamed into place): another file than the one the offset is of is
  // read from its beginning.
  struct stat st {};
  if (fstat(in->get(), &st) != 0) return;
  // Another file (or this one cut shorter in place) is read from its beginning.
  if (st.st_ino != r.steps_inode || st.st_size < r.steps_offset) {
    r.steps_inode = st.st_ino;
    r.steps_offset = 0;
  }
  // At most kMaxStepBytesPerPoll a round: a huge log is caught up with over several rounds.
  const int64_t want = std::clamp<int64_t>(st.st_size - r.steps_offset, 0, kMaxStepBytesPerPoll);
  auto chunk = userfs::ReadAt(in->get(), r.steps_offset, want);
  std::istringstream text(chunk.ok() ? *chunk : std::string());
  std::vector<StepRecord> report;  // Step 1 (the job's baseline loss) and the newest step.
  std::vector<std::string> warnings;  // Warning lines read this round (common/steplog).
  r.steps_offset += steplog::ReadCompleteLines(text, [&](std::string_view line) {
    std::optional<StepRecord> j = steplog::ParseStepLine(line);
    if (!j.has_value()) return;
    if (j->warning.has_value()) {  // Not a step: sent with the next progress report.
      if (warnings.size() < kMaxWarningsPerPoll) warnings.push_back(*std::move(j->warning));
      return;
    }
    if (j->val_loss.has_value()) {
      r.val_step = j->step;
      r.val_loss = *j->val_loss;
    }
    if (report.size() == 2 || (report.size() == 1 && report[0].step != 1)) {
      report.back() = *j;
    } else {
      report.push_back(*j);
    }
  });
  // A line longer than a whole chunk is never complete within one: skip what was read of it.
  if (want == kMaxStepBytesPerPoll && chunk.ok() && chunk->find('\n') == std::string::npos) {
    r.steps_offset += want;
  }
  // The checkpoint of a step is written after its log line: report a newer checkpoint even
  // when no new step came (with the newest step again).
  if (!report.empty()) r.last_step = report.back();
  int64_t checkpoint = r.reported_checkpoint;
  auto all = parallel::ListCheckpoints(r.checkpoint_dir);
  if (!all.empty()) checkpoint = all.back().first;
  if (report.empty() && checkpoint != r.reported_checkpoint && r.last_step.has_value()) {
    report.push_back(*r.last_step);
  }
  r.reported_checkpoint = checkpoint;
  // Warnings without a new step go with the newest step again, or alone (step 0: the coordinator
  // takes only the warnings of such a report).
  if (report.empty() && !warnings.empty()) report.push_back(r.last_step.value_or(StepRecord{}));
  for (const StepRecord& j : report) {
    RankEvent p;
    p.progress.set_last_checkpoint_step(checkpoint);
    p.event = v1::ReportRankStatusRequest::EVENT_PROGRESS;
    p.job_id = job;
    p.attempt = attempt;
    p.rank = rank;
    p.progress.set_step(j.step);
    p.progress.set_resumed_from_step(j.resumed_from);
    p.progress.set_discarded_steps(j.discarded_steps);
    p.progress.set_loss(j.loss);
    p.progress.set_lr(j.lr);
    p.progress.set_grad_norm(j.grad_norm);
    p.progress.set_tokens_per_s(j.tokens_per_s);
    p.progress.set_step_seconds(j.step_seconds);
    if (j.aux_loss) p.progress.set_aux_loss(*j.aux_loss);
    if (j.expert_imbalance) p.progress.set_expert_imbalance(*j.expert_imbalance);
    if (j.checkpoint_blocked_s) p.progress.set_checkpoint_blocked_s(*j.checkpoint_blocked_s);
    if (j.checkpoint_write_s) p.progress.set_checkpoint_write_s(*j.checkpoint_write_s);
    if (r.val_step > 0 && r.val_step <= p.progress.step()) {
      p.progress.set_val_step(r.val_step);
      p.progress.set_val_loss(r.val_loss);
    }
    p.tokens = j.tokens;
    p.bytes_all_reduced = j.bytes_all_reduced;
    p.flops_per_token = r.flops_per_token;
    p.samples = r.samples_per_step;
    p.world_size = r.world_size;
    if (&j == &report.back()) {
      for (std::string& w : warnings) p.progress.add_warnings(std::move(w));
    }
    events->push_back(std::move(p));
  }
}

std::vector<RankEvent> RankSupervisor::Poll() {
  std::vector<RankEvent> events;
  events.swap(pending_);
  const absl::Time now = options_.clock->Now();
  for (auto it = ranks_.begin(); it != ranks_.end();) {
    const auto& [job, attempt, rank] = it->first;
    Rank& r = it->second;
    // Reap first, read progress second: after an exit every line and checkpoint the rank wrote is there.
    int status = 0;
    const bool exited = waitpid(r.pid, &status, WNOHANG) == r.pid;
    const auto read_now = std::chrono::steady_clock::now();
    if (exited || read_now - r.progress_read_at >= kProgressEvery) {
      r.progress_read_at = read_now;
      ReadProgress(it->first, r, &events);
    }
    if (exited) {
      kill(-r.pid, SIGKILL);  // Anything the rank left in its process group.
      RankEvent e;
      e.event = v1::ReportRankStatusRequest::EVENT_EXITED;
      e.job_id = job;
      e.attempt = attempt;
      e.rank = rank;
      e.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      if (e.exit_code != 0) e.error = r.file_error.empty() ? LastError(r) : r.file_error;
      if (e.exit_code != 0 && e.error.empty()) e.error = r.stop_reason;
      events.push_back(std::move(e));
      it = ranks_.erase(it);
      continue;
    }
    if (r.stopping && now >= r.kill_at) kill(-r.pid, SIGKILL);
    ++it;
  }
  return events;
}

std::string RankSupervisor::LastError(const Rank& r) {
  auto log = userfs::OpenUnder(r.open_base, r.UserFile(r.log_name), {});
  return log.ok() ? userfs::LastLineWithPrefix(log->get(), "error: ") : "";
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
  for (const auto& [key, r] : ranks_) out.push_back({std::get<0>(key), std::get<2>(key), r.pid});
  return out;
}

std::vector<pid_t> RankSupervisor::Pids() const {
  std::vector<pid_t> out;
  for (const auto& [key, r] : ranks_) out.push_back(r.pid);
  return out;
}

}  // namespace tessera::worker
