// Trainer::CheckpointWrite: one checkpoint being written by this rank (internal to the trainer's
// checkpoint files): its temporary directory, the files it wrote (fsynced, with their digests), what
// it gathered, and the first failure (kept until every rank has passed the collectives). Deferred
// (checkpoint.async): the files' contents are kept when they are handed over and written by Flush, on
// the checkpoint's background thread. They are the snapshot: the tensors handed over must be copies
// that no later step changes — what the gathers return is (ZeroOptimizer::Gather and StateShard
// clone the master weights and the moments wherever they live, host-offloaded ones included;
// GatherFullTensor clones or assembles new tensors) — and device tensors are moved to host memory.
#ifndef TESSERA_PARALLEL_TRAIN_CHECKPOINT_WRITE_H_
#define TESSERA_PARALLEL_TRAIN_CHECKPOINT_WRITE_H_

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "formats/checkpoint/durable_file.h"
#include "parallel/checkpoint/tensor_convert.h"
#include "parallel/train/trainer.h"

namespace tessera::parallel {

// The file of the optimizer state shard of dp rank `dp_rank`, tp rank `tp_rank` (sharded checkpoints).
inline std::string OptimizerShardFileName(int dp_rank, int tp_rank) {
  return "optimizer.dp" + std::to_string(dp_rank) + ".tp" + std::to_string(tp_rank) + ".safetensors";
}

struct Trainer::CheckpointWrite {
  std::string tmp;
  int64_t step = 0;
  bool sharded_state = false;
  bool deferred = false;
  absl::Status status;
  std::map<std::string, formats::checkpoint::FileDigest> written;
  std::map<std::string, at::Tensor> params, optimizer;  // Gathered by global rank 0 (their names index the files).
  int64_t snapshot_bytes = 0;  // Deferred: host bytes of the tensors held until Flush.

  // A safetensors file `name` of `tensors` (now, or kept for Flush: see above).
  void Save(const std::string& name, const std::map<std::string, at::Tensor>& tensors,
            const std::map<std::string, std::string>& metadata) {
    if (!status.ok()) return;
    if (!deferred) return Write(name, tensors, metadata);
    File f{name, {}, metadata, std::nullopt};
    for (const auto& [key, t] : tensors) {
      at::Tensor host = t.to(at::kCPU);
      snapshot_bytes += static_cast<int64_t>(host.nbytes());
      f.tensors.emplace(key, std::move(host));
    }
    files.push_back(std::move(f));
  }
  // A text file `name` (now, or kept for Flush).
  void SaveText(const std::string& name, const std::string& text) {
    if (!status.ok()) return;
    if (!deferred) return WriteText(name, text);
    files.push_back(File{name, {}, {}, text});
  }
  // Writes what Save and SaveText kept, in order, and releases the copies.
  void Flush() {
    for (File& f : files) {
      if (!status.ok()) break;
      if (f.text) {
        WriteText(f.name, *f.text);
      } else {
        Write(f.name, f.tensors, f.metadata);
      }
      f.tensors.clear();
    }
    files.clear();
  }

 private:
  struct File {
    std::string name;
    std::map<std::string, at::Tensor> tensors;
    std::map<std::string, std::string> metadata;
    std::optional<std::string> text;
  };
  void Write(const std::string& name, const std::map<std::string, at::Tensor>& tensors,
             const std::map<std::string, std::string>& metadata) {
    formats::checkpoint::FileDigest d;
    status = SaveTensors(tmp + "/" + name, tensors, metadata, &d);
    if (status.ok()) written[name] = d;
  }
  void WriteText(const std::string& name, const std::string& text) {
    auto d = formats::checkpoint::WriteFileDurably(tmp + "/" + name, text);
    status = d.status();
    if (d.ok()) written[name] = *d;
  }
  std::vector<File> files;
};

// A deferred CheckpointWrite being written by its thread (Trainer::WriteInBackground).
struct Trainer::BackgroundCheckpoint {
  CheckpointWrite w;
  std::thread thread;
  std::atomic<bool> done{false};    // Set by the thread last.
  std::atomic<bool> cancel{false};  // Stop waiting for votes (the trainer is going away).
  absl::Status status;              // Written by the thread before `done`.
  double write_s = 0;
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_TRAIN_CHECKPOINT_WRITE_H_
