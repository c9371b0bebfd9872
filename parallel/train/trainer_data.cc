// The trainer's samples (trainer.h): each rank's part of a micro-batch (with packed sequences, its
// positions), and SFT data's weighing of trained targets. The training loop is in trainer.cc.
#include <ATen/ATen.h>

#include <cstdio>
#include <vector>

#include "parallel/train/status_macros.h"
#include "parallel/train/trainer.h"

namespace tessera::parallel {

using formats::data::TrainingData;

at::Tensor Trainer::SampleChunkOf(const at::Tensor& rows) const {
  const auto [chunk, chunks] = model_->SampleChunk();
  if (chunks <= 1) return rows;
  const int64_t n = rows.size(0) / chunks;
  return rows.narrow(0, chunk * n, n);
}

absl::StatusOr<at::Tensor> Trainer::ReadMicroBatch(TrainingData& data, int64_t first, int a, int accum,
                                                   at::Tensor* positions) {
  // Sample j of the global batch for dp rank d, micro-batch a, row i: d·micro·accum + a·micro + i.
  // With sequence parallelism, sp rank s keeps tokens [s·Tl, (s+1)·Tl] of each window (inputs and
  // their next-token targets).
  const int micro = options_.micro_batch;
  const int64_t T = options_.model.seq_len;
  std::vector<int64_t> tokens, token_positions;
  const bool packed = positions != nullptr && data.packed();
  tokens.reserve(micro * (T + 1));
  for (int i = 0; i < micro; ++i) {
    const int64_t g = first + groups_.dp->rank() * micro * accum + a * micro + i;
    TESSERA_RETURN_IF_ERROR(data.Read(g, &tokens, packed ? &token_positions : nullptr));
  }
  // This rank's part: with grid tensor parallelism its chunk of the samples, with sequence
  // parallelism its block of each window (the positions stay whole: Decoder::set_positions).
  const int sp = groups_.sp->size();
  auto part = [&](const at::Tensor& w) { return SampleChunkOf(w).to(device_, /*non_blocking=*/false, /*copy=*/true); };
  if (positions != nullptr) {
    *positions = packed ? part(at::from_blob(token_positions.data(), {micro, T + 1}, at::kLong).narrow(1, 0, T))
                        : at::Tensor();
  }
  at::Tensor window = at::from_blob(tokens.data(), {micro, T + 1}, at::kLong);
  if (sp > 1) window = window.narrow(1, groups_.sp->rank() * (T / sp), T / sp + 1);
  return part(window);
}

absl::StatusOr<at::Tensor> Trainer::ReadTokens(TrainingData& data, int64_t first, int a, int accum) {
  if (!data.packed()) return ReadMicroBatch(data, first, a, accum);
  at::Tensor positions;
  auto tokens = ReadMicroBatch(data, first, a, accum, &positions);
  if (tokens.ok()) read_ahead_ = {&data, first, a, std::move(positions)};
  return tokens;
}

absl::StatusOr<at::Tensor> Trainer::ReadPositions(TrainingData& data, int64_t first, int a, int accum) {
  if (read_ahead_.data == &data && read_ahead_.first == first && read_ahead_.a == a) {
    at::Tensor positions = std::move(read_ahead_.positions);
    read_ahead_ = {};
    return positions;
  }
  at::Tensor positions;
  auto tokens = ReadMicroBatch(data, first, a, accum, &positions);
  if (!tokens.ok()) return tokens.status();
  return positions;
}

absl::Status Trainer::WeighTrainedTargets(TrainingData& data, int64_t first, int accum, int64_t* trained_out) {
  *trained_out = options_.global_batch * options_.model.seq_len;
  if (!data.sft()) return absl::OkStatus();
  // Every rank counts the trained targets of the whole global batch (the masks are local files).
  int64_t trained = 0;
  for (int64_t g = first; g < first + options_.global_batch; ++g) {
    auto n = data.TrainedTargets(g);
    if (!n.ok()) return n.status();
    trained += *n;
  }
  *trained_out = trained;
  // Each micro-batch's loss is a mean over this rank's micro × T/sp targets, weighted by 1 / (accum ·
  // dp · sp) (LossWeight) and summed over the dp × sp replicas: weighing each trained target by that count over the global
  // one makes the step's objective Σ cross-entropy / trained.
  const double local = static_cast<double>(options_.micro_batch) * (options_.model.seq_len / groups_.sp->size());
  const double weight = trained > 0 ? local * accum * groups_.dp_sp->size() / static_cast<double>(trained) : 0.0;
  model_->set_target_weight(weight);
  if (trained == 0 && groups_.global_rank == 0 && &data == data_.get()) {
    std::fprintf(stderr, "step %lld: the global batch has no trained target (its conversations have no assistant "
                         "token within seq_len): loss 0, no gradient\n", static_cast<long long>(step_ + 1));
  }
  return absl::OkStatus();
}

}  // namespace tessera::parallel
