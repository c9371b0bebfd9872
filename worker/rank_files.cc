#include "worker/rank_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "formats/checkpoint/checkpoint_dir.h"

namespace tessera::worker {

constexpr char kStepLog[] = "steps.jsonl";
// The most of rank 0's step log read at once.
constexpr int64_t kMaxStepBytesPerRead = 4 << 20;
// Warning lines forwarded per read at most (each cut to steplog::kMaxWarningBytes).
constexpr size_t kMaxWarningsPerRead = 16;

namespace {

StartedFiles OpenRankFilesOrThrow(RankFiles files) {
  StartedFiles out;
  if (files.below_root) {
    // A per-user directory (OUTPUT_ROOT/alice) may be an administrator's link to another volume: a link
    // there owned by root or by this worker's user is followed; below it nothing is.
    const size_t slash = files.prefix.find('/');
    const std::string first = files.prefix.substr(0, slash);
    struct stat st {};
    if (!first.empty() && lstat((files.open_base + "/" + first).c_str(), &st) == 0 && S_ISLNK(st.st_mode) &&
        (st.st_uid == 0 || st.st_uid == geteuid())) {
      files.open_base += "/" + first;
      files.prefix = slash == std::string::npos ? "" : files.prefix.substr(slash + 1);
    }
    files.below_root = false;
  }
  out.files = std::move(files);
  const RankFiles& f = out.files;
  auto log = userfs::OpenUnder(f.open_base, f.Under(f.log_name), {userfs::Access::kAppend, /*create_dirs=*/true});
  if (!log.ok()) {
    out.status = absl::FailedPreconditionError(absl::StrCat("the rank's log: ", log.status().message()));
    return out;
  }
  absl::Status header = userfs::WriteAll(log->get(), absl::StrCat("=== tessera-worker: job ", f.job_id, " attempt ",
                                                                  f.attempt, " rank ", f.rank, " ===\n"));
  if (!header.ok()) {
    out.status = absl::UnavailableError(absl::StrCat(f.shown_dir, "/", f.log_name, ": ", header.message()));
    return out;
  }
  out.log = std::move(*log);
  if (f.reads_steps) {
    // Report only what this attempt writes: the offset is taken before the rank can write.
    auto steps = userfs::OpenUnder(f.open_base, f.Under(kStepLog), {});
    if (!steps.ok() && !absl::IsNotFound(steps.status())) {
      out.status = absl::FailedPreconditionError(absl::StrCat("the job's step log: ", steps.status().message()));
      return out;
    }
    struct stat st {};
    if (steps.ok() && fstat(steps->get(), &st) == 0) out.files.steps_position = {st.st_ino, st.st_size};
  }
  return out;
}

// The progress events of one read of rank 0's step log and checkpoint directory (`read.files` is the
// position, moved on).
void ReadProgress(FilesRead& read) {
  RankFiles& r = read.files;
  auto in = userfs::OpenUnder(r.open_base, r.Under(kStepLog), {});
  if (!in.ok()) {
    // A refusal (a FIFO, a link, a directory in its place) is reported; a read error that may pass
    // (EIO, ESTALE, EMFILE: Unavailable) and a log not written yet are tried again next read.
    if (absl::IsFailedPrecondition(in.status()) || absl::IsInvalidArgument(in.status())) read.step_log = in.status();
    return;
  }
  std::vector<steplog::StepRecord> report;  // Step 1 (the job's baseline loss) and the newest step.
  std::vector<std::string> warnings;        // Warning lines read this time (common/steplog).
  // Rank 0 replaces the log at its start: steplog::ReadAppended reads a new file from its beginning.
  steplog::ReadAppended(in->get(), &r.steps_position, kMaxStepBytesPerRead, [&](std::string_view line) {
    std::optional<steplog::StepRecord> j = steplog::ParseStepLine(line);
    if (!j.has_value()) return;
    if (j->warning.has_value()) {  // Not a step: sent with the next progress report.
      if (warnings.size() < kMaxWarningsPerRead) warnings.push_back(*std::move(j->warning));
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
  // The checkpoint of a step is written after its log line: report a newer checkpoint even when no
  // new step came (with the newest step again).
  if (!report.empty()) r.last_step = report.back();
  int64_t checkpoint = r.reported_checkpoint;
  auto all = formats::checkpoint::ListCheckpoints(r.checkpoint_dir);
  if (!all.empty()) checkpoint = all.back().first;
  if (report.empty() && checkpoint != r.reported_checkpoint && r.last_step.has_value()) {
    report.push_back(*r.last_step);
  }
  r.reported_checkpoint = checkpoint;
  // Warnings without a new step go with the newest step again, or alone (step 0: the coordinator
  // takes only the warnings of such a report).
  if (report.empty() && !warnings.empty()) report.push_back(r.last_step.value_or(steplog::StepRecord{}));
  for (const steplog::StepRecord& j : report) {
    RankEvent p;
    p.progress.set_last_checkpoint_step(checkpoint);
    p.event = v1::ReportRankStatusRequest::EVENT_PROGRESS;
    p.job_id = r.job_id;
    p.attempt = r.attempt;
    p.rank = r.rank;
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
    read.events.push_back(std::move(p));
  }
}

}  // namespace

// These run on threads of their own (worker/off_thread.h), where an exception would end the worker:
// one (memory for a directory of millions of entries, say) is that job's error instead.
StartedFiles OpenRankFiles(RankFiles files) {
  const std::string shown = files.shown_dir;
  try {
    return OpenRankFilesOrThrow(std::move(files));
  } catch (const std::exception& e) {
    StartedFiles out;
    out.status = absl::InternalError(absl::StrCat(shown, ": opening the rank's log failed: ", e.what()));
    return out;
  }
}

FilesRead ReadRankFiles(RankFiles files, bool last_error) {
  FilesRead read;
  read.files = files;  // Its position moves on as the log is read.
  try {
    if (read.files.reads_steps) ReadProgress(read);
    if (last_error) {
      auto log = userfs::OpenUnder(read.files.open_base, read.files.Under(read.files.log_name), {});
      if (log.ok()) read.last_error = userfs::LastLineWithPrefix(log->get(), "error: ");
    }
  } catch (const std::exception& e) {
    read = FilesRead{};
    read.files = std::move(files);  // Where it was.
    read.step_log = absl::InternalError(absl::StrCat("reading its files failed: ", e.what()));
  }
  return read;
}

}  // namespace tessera::worker
