// Trainer: asynchronous checkpoints (checkpoint.async). At the checkpoint step every rank does the
// collective part of a checkpoint as a synchronous one does — the gathers, rank 0's temporary
// directory — but copies what it would write (CheckpointWrite::deferred): parameters and optimizer
// state wherever they live, host-offloaded moments included, and rank 0's trainer_state.json with the
// data position, all taken before the next step can change them. A background thread then writes and
// fsyncs the files; the vote of the two-phase commit goes through the temporary directory (a small
// file per rank that wrote a file, fsynced), because the training thread owns the communicators; rank
// 0 commits (index, rename, prune) once every vote is in. One write at a time: the next checkpoint
// step waits for the previous write (the wait counts as blocked time).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "formats/checkpoint/checkpoint_dir.h"
#include "formats/checkpoint/durable_file.h"
#include "nlohmann/json.hpp"
#include "parallel/train/checkpoint_write.h"
#include "parallel/train/status_macros.h"
#include "parallel/train/trainer.h"

namespace tessera::parallel {

using formats::checkpoint::WriteFileDurably;

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

// How long rank 0 waits for the other ranks' votes. A rank that died ends the attempt (the training
// thread's next collective fails and the destructor cancels the wait), so this bounds only a rank
// that hangs while writing.
constexpr auto kVoteTimeout = std::chrono::minutes(30);

std::string VotePath(const std::string& tmp, int rank) { return absl::StrCat(tmp, "/vote.rank_", rank, ".json"); }

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

}  // namespace

Trainer::~Trainer() {
  if (background_ && background_->thread.joinable()) {
    background_->cancel = true;
    background_->thread.join();
  }
}

absl::Status Trainer::SnapshotCheckpoint() {
  const auto start = Clock::now();
  TESSERA_RETURN_IF_ERROR(WaitForCheckpoint());
  auto w = std::make_unique<CheckpointWrite>();
  TESSERA_RETURN_IF_ERROR(PrepareCheckpoint(*w));
  snapshot_ = std::move(w);
  snapshot_blocked_s_ = Seconds(start);
  return absl::OkStatus();
}

absl::Status Trainer::StartBackgroundCheckpoint() {
  if (!snapshot_) return absl::FailedPreconditionError("no checkpoint snapshot to write");
  std::unique_ptr<CheckpointWrite> w = std::move(snapshot_);
  // Ranks that wrote nothing (unsharded state: only global rank 0 writes) have nothing to vote on.
  if (groups_.global_rank != 0 && !w->sharded_state) return absl::OkStatus();
  background_ = std::make_unique<BackgroundCheckpoint>();
  background_->w = std::move(*w);
  background_->thread = std::thread([this, b = background_.get()] { WriteInBackground(*b); });
  return absl::OkStatus();
}

bool Trainer::BackgroundCheckpointEnded() const { return background_ && background_->done; }

absl::Status Trainer::WaitForCheckpoint() {
  if (!background_) return absl::OkStatus();
  background_->thread.join();
  const int64_t step = background_->w.step;
  absl::Status status = background_->status;
  write_ended_ = std::make_pair(step, background_->write_s);
  background_.reset();
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("checkpoint of step ", step, ": ", status.message(),
                                                    " (written in the background)"));
  }
  return absl::OkStatus();
}

void Trainer::WriteInBackground(BackgroundCheckpoint& b) {
  if (options_.before_background_write) options_.before_background_write();
  const auto start = Clock::now();
  CheckpointWrite& w = b.w;
  w.Flush();
  const int rank = groups_.global_rank;
  const int world = groups_.world->size();
  const int tp = groups_.tp->size();
  const int shards = w.sharded_state ? groups_.dp->size() * tp : 0;
  const std::string shard = OptimizerShardFileName(groups_.dp->rank(), groups_.tp->rank());
  const int slot = groups_.dp->rank() * tp + groups_.tp->rank();
  if (rank != 0) {
    // Sharded state: this rank's vote, its shard's slot and digest (what the synchronous vote carries).
    nlohmann::json vote = {{"ok", w.status.ok()}, {"slot", slot}};
    if (w.status.ok()) {
      vote["bytes"] = w.written.at(shard).bytes;
      vote["crc32c"] = w.written.at(shard).crc32c;
    }
    // Written under a temporary name and renamed: rank 0, polling for the name, never reads half a vote.
    const std::string path = VotePath(w.tmp, rank), tmp = path + ".tmp";
    absl::Status voted = WriteFileDurably(tmp, vote.dump()).status();
    std::error_code ec;
    if (voted.ok()) fs::rename(tmp, path, ec);
    if (voted.ok() && ec) voted = absl::UnavailableError(absl::StrCat(path, ": cannot rename its vote: ", ec.message()));
    b.status = !w.status.ok() ? w.status : voted;
  } else {
    at::Tensor votes = OwnVote(w);  // The others' from their files.
    const auto deadline = Clock::now() + kVoteTimeout;
    for (int r = 1; r < world && w.sharded_state && w.status.ok(); ++r) {
      const std::string path = VotePath(w.tmp, r);
      while (!fs::exists(path) && !b.cancel && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      nlohmann::json vote = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
      if (vote.is_discarded() || !vote.is_object()) {
        w.status = absl::DeadlineExceededError(
            absl::StrCat("rank ", r, "'s vote did not come", b.cancel ? " (the attempt ended)" : ""));
        break;
      }
      const bool ok = vote.value("ok", false);
      votes[r] = ok ? 0 : 1;
      const int64_t s = vote.value("slot", int64_t{-1});
      if (ok && s >= 0 && s < shards) {
        votes[world + 2 * s] = vote.value("bytes", int64_t{0});
        votes[world + 2 * s + 1] = vote.value("crc32c", int64_t{0});
      }
      std::error_code ec;
      fs::remove(path, ec);  // Not part of the checkpoint.
    }
    CommitCheckpointFiles(w, votes);
    b.status = w.status;
  }
  b.write_s = Seconds(start);
  if (!b.status.ok()) {
    std::cerr << "tessera: rank " << rank << ": checkpoint of step " << w.step << " written in the background failed: "
              << b.status.message() << std::endl;
  }
  b.done = true;
}

}  // namespace tessera::parallel
