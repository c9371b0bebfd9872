#include "parallel/models/reward_scoring.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <exception>

#include "parallel/objectives/reward_objective.h"

namespace tessera::parallel {

absl::Status ScoreSequences(Decoder& model, const std::vector<ScoredSequence>& seqs) {
  at::NoGradGuard no_grad;
  const c10::Device device = model.params().front().value.device();
  int64_t longest = 1;
  for (const ScoredSequence& q : seqs) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(q.prompt->size() + q.completion->size()));
  }
  const int64_t n = static_cast<int64_t>(seqs.size());
  // Rows of longest + 1 ids (right-padded with −1: token 0, untrained).
  std::vector<int64_t> rows(static_cast<size_t>(n * (longest + 1)), -1);
  std::vector<double> where;
  for (int64_t i = 0; i < n; ++i) {
    const ScoredSequence& q = seqs[static_cast<size_t>(i)];
    WriteRewardRow(*q.prompt, *q.completion, rows.data() + i * (longest + 1));
    where.push_back(static_cast<double>(q.index));
  }
  try {
    const at::Tensor window = at::from_blob(rows.data(), {n, longest + 1}, at::kLong).to(device);
    model.set_sample_data(at::tensor(where, at::TensorOptions().dtype(at::kDouble)).to(device));
    (void)model.Loss(window.narrow(1, 0, longest), window.narrow(1, 1, longest));
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  }
  return absl::OkStatus();
}

}  // namespace tessera::parallel
