// The trainer's step log (OUTPUT_DIR/steps.jsonl, rank 0): trimmed to the resumed step at the start,
// one JSON line appended per step; both checked against the attempt's fencing token first. The same
// numbers go to TensorBoard (OUTPUT_DIR/tensorboard/, formats/tensorboard): every number of a step's
// line as a scalar tagged "train/FIELD" ("val/FIELD" for the evaluation's val_loss, eval_seconds and
// val_ metrics), the event file trimmed to the resumed step alike.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/steplog/step_log.h"
#include "common/userfs/user_files.h"
#include "formats/tensorboard/event_file.h"
#include "parallel/train/status_macros.h"
#include "parallel/train/trainer.h"

namespace tessera::parallel {

namespace fs = std::filesystem;

constexpr char kStepLog[] = "steps.jsonl";

absl::Status Trainer::TrimStepLog() {
  TESSERA_RETURN_IF_ERROR(Fence().Check());
  const std::string path = options_.output_dir + "/steps.jsonl";
  // OUTPUT_DIR is the user's: its files are opened through common/userfs (no link followed, no FIFO
  // waited on), and a step log that is not a regular file ends the run naming it.
  std::string old;
  if (auto in = userfs::OpenUnder(options_.output_dir, kStepLog, {}); in.ok()) {
    auto size = userfs::FileSize(in->get());
    if (!size.ok()) return size.status();
    // Read whole to be trimmed: bounded (a log made huge, truncate -s 1T, must not exhaust memory).
    constexpr int64_t kMaxStepLogBytes = int64_t{1} << 30;
    if (*size > kMaxStepLogBytes) {
      return absl::FailedPreconditionError(absl::StrCat(path, ": ", *size, " bytes, over the ", kMaxStepLogBytes,
                                                        " a step log may have; move it away to start a new one"));
    }
    auto bytes = userfs::ReadAt(in->get(), 0, *size);
    if (!bytes.ok()) return absl::UnavailableError(absl::StrCat(path, ": ", bytes.status().message()));
    old = *std::move(bytes);
  } else if (!absl::IsNotFound(in.status())) {
    return in.status();
  }
  std::istringstream in(old);
  std::stringstream kept;
  std::string line;
  resumed_from_ = step_;
  discarded_steps_ = 0;
  while (std::getline(in, line)) {
    const std::optional<steplog::StepRecord> r = steplog::ParseStepLine(line);
    if (!r.has_value()) continue;  // Not a line of ours.
    if (r->step <= step_) {
      kept << line << "\n";
    } else if (!r->warning.has_value()) {
      ++discarded_steps_;  // Trained by an earlier run past the checkpoint this one resumes from.
    }
  }
  // A new file renamed into place, never truncated in place: a crash leaves the old log or the new one,
  // and a reader holding an offset into the old one (the worker) sees another file. (rename replaces
  // a link at the final name; it never writes through one.)
  const std::string tmp = path + ".tmp";
  {
    auto out = userfs::OpenUnder(options_.output_dir, absl::StrCat(kStepLog, ".tmp"), {userfs::Access::kWrite, true});
    if (!out.ok()) return out.status();
    if (absl::Status w = userfs::WriteAll(out->get(), kept.str()); !w.ok()) {
      return absl::UnavailableError(absl::StrCat(tmp, ": ", w.message()));
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return absl::UnavailableError(absl::StrCat(path, ": cannot rename ", tmp, " into place: ", ec.message()));
  auto events = formats::tensorboard::EventFileWriter::Open(options_.output_dir, "tensorboard", step_);
  if (events.ok()) {
    events_ = std::move(*events);
  } else {
    Warn(absl::StrCat("no TensorBoard events: ", events.status().message()));
  }
  return FlushWarnings();
}

void Trainer::Warn(const std::string& message) {
  std::cerr << "tessera: warning: " << message << std::endl;
  if (groups_.global_rank != 0) return;
  std::lock_guard<std::mutex> lock(warnings_mu_);
  // Bounded: a warning repeated every step is kept once per flush, and at most 16 wait.
  if (pending_warnings_.size() < 16 &&
      std::find(pending_warnings_.begin(), pending_warnings_.end(), message) == pending_warnings_.end()) {
    pending_warnings_.push_back(message);
  }
}

absl::Status Trainer::FlushWarnings() {
  std::vector<std::string> warnings;
  {
    std::lock_guard<std::mutex> lock(warnings_mu_);
    warnings.swap(pending_warnings_);
  }
  if (warnings.empty()) return absl::OkStatus();
  TESSERA_RETURN_IF_ERROR(Fence().Check());
  std::string lines;
  for (const std::string& w : warnings) absl::StrAppend(&lines, steplog::FormatWarningLine(step_, w), "\n");
  auto out = userfs::OpenUnder(options_.output_dir, kStepLog, {userfs::Access::kAppend});
  if (!out.ok()) return out.status();
  if (absl::Status w = userfs::WriteAll(out->get(), lines); !w.ok()) {
    return absl::InternalError(absl::StrCat(options_.output_dir, "/steps.jsonl: ", w.message()));
  }
  return absl::OkStatus();
}

void Trainer::LogProgress(const StepStats& s) const {
  std::string line = absl::StrFormat("tessera: rank %d: step %d/%d loss %.4f", groups_.global_rank, s.step,
                                     options_.steps, s.loss);
  if (s.val_loss) absl::StrAppendFormat(&line, " val_loss %.4f", *s.val_loss);
  absl::StrAppendFormat(&line, " tokens/s %.0f step %.3f s rss %.0f MiB", s.tokens_per_s, s.step_seconds,
                        s.rss_peak_bytes / 1048576.0);
  if (s.live_peak_bytes > 0) absl::StrAppendFormat(&line, " live %.0f MiB", s.live_peak_bytes / 1048576.0);
  if (s.skipped) line += " (skipped: fp16 overflow)";
  std::cerr << line << std::endl;
}

absl::Status Trainer::AppendStepLog(const StepStats& s) {
  TESSERA_RETURN_IF_ERROR(FlushWarnings());
  TESSERA_RETURN_IF_ERROR(Fence().Check());
  steplog::StepRecord r;
  r.step = s.step, r.loss = s.loss, r.lr = s.lr, r.grad_norm = s.grad_norm;
  r.tokens_per_s = s.tokens_per_s, r.step_seconds = s.step_seconds, r.tokens = s.tokens;
  r.bytes_all_reduced = s.bytes_all_reduced, r.bytes_communicated = s.bytes_communicated;
  r.optimizer_state_bytes = s.optimizer_state_bytes, r.model_state_bytes = s.model_state_bytes;
  r.rss_peak_bytes = s.rss_peak_bytes, r.rss_base_bytes = rss_base_bytes_;
  r.resumed_from = resumed_from_, r.discarded_steps = discarded_steps_;
  r.skipped = s.skipped;
  r.trained_tokens = s.trained_tokens;
  r.lm_loss = s.lm_loss, r.aux_loss = s.aux_loss;
  for (const auto& [name, value] : s.objective_metrics) {
    if (std::optional<double>* m = steplog::ObjectiveMetric(r, name)) {
      *m = value;
    } else if (grpo()) {
      r.grpo_metrics.emplace_back(name, value);
    }
  }
  for (const auto& [name, value] : s.val_objective_metrics) {
    if (std::optional<double>* m = steplog::ObjectiveMetric(r, name)) *m = value;
  }
  if (!s.expert_imbalance.empty()) {
    r.expert_imbalance = *std::max_element(s.expert_imbalance.begin(), s.expert_imbalance.end());
    r.expert_imbalance_layers = s.expert_imbalance;
  }
  if (s.val_loss) r.val_loss = *s.val_loss, r.eval_seconds = s.eval_seconds;
  r.reference_seconds = s.reference_seconds;
  if (layout_) r.pipeline_wait_s = s.pipeline_wait_s;
  r.pipeline_bubble = s.pipeline_bubble;
  if (s.live_peak_bytes > 0) r.live_peak_bytes = s.live_peak_bytes;
  if (options_.precision == layout::Precision::kFp16) r.loss_scale = s.loss_scale;
  if (options_.model.lora.enabled()) r.frozen_param_bytes = s.frozen_param_bytes;
  r.checkpoint_blocked_s = s.checkpoint_blocked_s, r.checkpoint_snapshot_bytes = s.checkpoint_snapshot_bytes;
  r.checkpoint_write_s = s.checkpoint_write_s, r.checkpoint_write_step = s.checkpoint_write_step;
  if (options_.peak_flops_per_device > 0) {
    r.mfu = s.tokens_per_s * options_.model.TrainingFlopsPerToken() /
            (options_.peak_flops_per_device * groups_.world->size());
  }
  auto out = userfs::OpenUnder(options_.output_dir, kStepLog, {userfs::Access::kAppend});
  if (!out.ok()) return out.status();
  if (absl::Status w = userfs::WriteAll(out->get(), steplog::FormatStepLine(r) + "\n"); !w.ok()) {
    return absl::InternalError(absl::StrCat(options_.output_dir, "/steps.jsonl: ", w.message()));
  }
  if (events_) {
    const std::vector<std::pair<std::string, double>> scalars = steplog::Scalars(r);
    // TensorBoard is a view: a failed write is reported once and the events stop, training goes on.
    if (absl::Status written = events_->AddScalars(s.step, scalars); !written.ok()) {
      Warn(absl::StrCat("TensorBoard events stop: ", written.message()));
      events_.reset();
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::parallel
