// Trainer: the run loop — steps until train.steps, evaluations when due, rank 0's step log and
// TensorBoard events, every rank's own measurements (OUTPUT_DIR/ranks/rank_R.jsonl) and progress
// lines, checkpoints (synchronous, or snapshot then background: trainer_async_checkpoint.cc), and
// debug dumps. One step is Trainer::Step (trainer.cc).
#include <chrono>
#include <utility>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/userfs/user_files.h"
#include "formats/checkpoint/checkpoint_dir.h"
#include "nlohmann/json.hpp"
#include "parallel/checkpoint/tensor_convert.h"
#include "parallel/train/checkpoint_write.h"
#include "parallel/train/status_macros.h"
#include "parallel/train/trainer.h"

namespace tessera::parallel {

using formats::checkpoint::AbortCheckpoint;

namespace fs = std::filesystem;

absl::Status Trainer::Run(const std::function<void(const StepStats&)>& on_step) {
  if (step_ > options_.steps) {
    // Nothing of the user's is touched (the step log keeps the steps past train.steps).
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoint resumed from is of step ", step_, ", past train.steps ", options_.steps,
        ": nothing to train (raise train.steps to continue, or give a new output_dir to start over)"));
  }
  if (groups_.global_rank == 0) TESSERA_RETURN_IF_ERROR(TrimStepLog());
  if (groups_.global_rank == 0 && grpo()) TESSERA_RETURN_IF_ERROR(TrimRolloutLog());
  // OUTPUT_DIR is the user's: a checkpoint directory below it must not be a planted link (say into
  // another job's directory).
  TESSERA_RETURN_IF_ERROR(userfs::CheckDirBelow(options_.output_dir, options_.checkpoint_dir));
  // Every rank's own measurements of this run (communication, memory, pipeline waiting), one line
  // per step, for benchmarks and debugging: output_dir/ranks/rank_R.jsonl (restarted with the run),
  // opened once through common/userfs (a planted link is refused).
  auto rank_log = userfs::OpenUnder(options_.output_dir, absl::StrCat("ranks/rank_", groups_.global_rank, ".jsonl"),
                                    {userfs::Access::kWrite, /*create_dirs=*/true});
  if (!rank_log.ok()) return rank_log.status();
  // An asynchronous checkpoint's snapshot whose background write never started (the run failed between
  // the two): its temporary directory is removed, not left to fill the disk.
  auto abort_snapshot = absl::MakeCleanup([this] {
    if (snapshot_ && groups_.global_rank == 0) AbortCheckpoint(snapshot_->tmp);
    snapshot_.reset();
  });
  while (step_ < options_.steps) {
    auto stats = Step();
    if (!stats.ok()) return stats.status();
    stats->reference_seconds = std::exchange(reference_seconds_, std::nullopt);
    if (EvaluatesNow()) {
      const auto start = std::chrono::steady_clock::now();
      auto val = Evaluate();
      if (!val.ok()) return val.status();
      stats->val_loss = *val;
      stats->val_objective_metrics = eval_metrics();
      stats->eval_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    // checkpoint.async: a background write that ended is reported (and its failure ends the run); on a
    // checkpoint step the snapshot is taken before the step is logged (the step line says how long it
    // held the step), and the write starts only after the line: a checkpoint is never committed
    // before the line of its step is in steps.jsonl. A synchronous write is reported the same way, on
    // the line after it (it held training for all of its checkpoint_write_s).
    const bool periodic = options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0;
    const bool checkpoint = periodic || step_ == options_.steps;
    if (BackgroundCheckpointEnded()) TESSERA_RETURN_IF_ERROR(WaitForCheckpoint());
    if (checkpoint && options_.checkpoint_async) {
      TESSERA_RETURN_IF_ERROR(SnapshotCheckpoint());
      stats->checkpoint_blocked_s = snapshot_blocked_s_;
      stats->checkpoint_snapshot_bytes = snapshot_->snapshot_bytes;
    }
    if (write_ended_) {
      stats->checkpoint_write_step = write_ended_->first;
      stats->checkpoint_write_s = write_ended_->second;
      write_ended_.reset();
    }
    if (groups_.global_rank == 0) TESSERA_RETURN_IF_ERROR(AppendStepLog(*stats));
    nlohmann::json mine = {{"step", stats->step}, {"step_seconds", stats->step_seconds},
                           {"bytes_communicated", stats->bytes_communicated}, {"rss_peak_bytes", stats->rss_peak_bytes},
                           {"rss_base_bytes", rss_base_bytes_}, {"live_peak_bytes", stats->live_peak_bytes},
                           {"model_state_bytes", stats->model_state_bytes},
                           {"optimizer_state_bytes", stats->optimizer_state_bytes},
                           {"frozen_param_bytes", stats->frozen_param_bytes},
                           {"pipeline_wait_s", stats->pipeline_wait_s}};
    if (layout::IsZeroBubble(options_.layout.pp_schedule) && options_.layout.pp > 1) {
      mine["weight_pending_peak_bytes"] = stats->weight_pending_peak_bytes;
    }
    if (stats->checkpoint_blocked_s) {
      mine["checkpoint_blocked_s"] = *stats->checkpoint_blocked_s;
      mine["checkpoint_snapshot_bytes"] = stats->checkpoint_snapshot_bytes;
    }
    if (stats->checkpoint_write_s) {
      mine["checkpoint_write_s"] = *stats->checkpoint_write_s;
      mine["checkpoint_write_step"] = stats->checkpoint_write_step;
    }
    TESSERA_RETURN_IF_ERROR(userfs::WriteAll(rank_log->get(), mine.dump() + "\n"));
    if (options_.log_every > 0 && (step_ % options_.log_every == 0 || step_ == options_.steps)) {
      LogProgress(*stats);
    }
    if (on_step) on_step(*stats);
    if (options_.dump_at_step == step_) TESSERA_RETURN_IF_ERROR(DumpDebug());
    if (checkpoint && options_.checkpoint_async) {
      TESSERA_RETURN_IF_ERROR(StartBackgroundCheckpoint());
    } else if (checkpoint) {
      // Synchronous: training waits for the whole write, which the next step's line reports (its own
      // line is already written, so that the checkpoint is never committed before it).
      const auto start = std::chrono::steady_clock::now();
      TESSERA_RETURN_IF_ERROR(SaveCheckpoint());
      write_ended_ = {step_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
    }
  }
  // The last background write is part of the run (the final checkpoint, committed before the ranks end).
  TESSERA_RETURN_IF_ERROR(WaitForCheckpoint());
  if (write_ended_) {
    std::cerr << "tessera: rank " << groups_.global_rank << ": checkpoint of step " << write_ended_->first
              << (options_.checkpoint_async ? " written in the background in " : " written in ")
              << write_ended_->second << " s" << std::endl;
  }
  return groups_.world->Barrier();
}

absl::Status Trainer::DumpDebug() {
  auto params = GatherFull(What::kParams);
  if (!params.ok()) return params.status();
  auto grads = GatherFull(What::kGrads);
  if (!grads.ok()) return grads.status();
  if (groups_.global_rank != 0) return absl::OkStatus();
  std::map<std::string, at::Tensor> all;
  for (auto& [name, t] : *params) all.emplace("param." + name, t);
  for (auto& [name, t] : *grads) all.emplace("grad." + name, t);
  TESSERA_RETURN_IF_ERROR(userfs::CheckDirBelow(options_.output_dir, options_.output_dir + "/debug"));
  return SaveTensors(absl::StrCat(options_.output_dir, "/debug/step_", step_, ".safetensors"), all);
}

}  // namespace tessera::parallel
