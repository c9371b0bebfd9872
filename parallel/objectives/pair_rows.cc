#include "parallel/objectives/pair_rows.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace tessera::parallel {

void WriteSharedPromptRow(const std::vector<int32_t>& prompt, const std::vector<int32_t>& chosen,
                          const std::vector<int32_t>& rejected, int64_t T, PairTargets targets, int64_t* row,
                          int64_t* positions) {
  const int64_t P = static_cast<int64_t>(prompt.size());
  const bool completions = targets == PairTargets::kCompletions;
  int64_t at = 0;
  auto put = [&](int64_t id, bool trained, int64_t position) {
    row[at] = trained || at == 0 ? id : -id - 1;  // The first entry is never a target.
    if (positions != nullptr && at <= 2 * T) positions[at] = std::min(position, T - 1);
    ++at;
  };
  for (int64_t t = 0; t + 1 < P; ++t) put(prompt[t], false, t);
  for (const std::vector<int32_t>* completion : {&chosen, &rejected}) {
    // The branch's first token: a reward model's target after chosen's last token is the rejected
    // branch's first (its score is read there).
    const bool scored = !completions && completion == &rejected;
    put(P > 0 ? prompt[P - 1] : (*completion)[0], scored, std::max<int64_t>(P - 1, 0));
    for (size_t t = P > 0 ? 0 : 1; t < completion->size(); ++t) {
      put((*completion)[t], completions, P + static_cast<int64_t>(t));
    }
  }
  if (!completions) row[at] = 0;  // The rejected completion's scored target (no input: no position).
}

at::Tensor PairCompletionOf(const at::Tensor& index, int64_t positions, PairRows rows, const at::Tensor& starts) {
  const at::Tensor sample = at::div(index, positions, "floor");
  if (rows == PairRows::kSeparate) return sample;
  const at::Tensor start = starts.to(index.device(), at::kLong).index_select(0, sample.reshape({-1})).view_as(sample);
  return sample * 2 + (index - sample * positions).ge(start).to(at::kLong);
}

at::Tensor PairValues(const at::Tensor& sample_data, int64_t samples, PairRows rows, const char* who) {
  if (rows == PairRows::kSeparate) {
    TORCH_CHECK(samples % 2 == 0, who, ": a micro-batch of ", samples, " samples is not pairs");
    TORCH_CHECK(sample_data.defined() && sample_data.numel() == samples, who, ": the micro-batch has no value per completion");
    return sample_data.reshape({-1, 2});
  }
  TORCH_CHECK(sample_data.defined() && sample_data.dim() == 2 && sample_data.size(0) == samples && sample_data.size(1) == 3,
              who, ": the shared-prompt micro-batch has no values per pair");
  return sample_data.narrow(1, 0, 2);
}

at::Tensor PairStarts(const at::Tensor& sample_data, PairRows rows) {
  return rows == PairRows::kSharedPrompt ? sample_data.select(1, 2) : at::Tensor();
}

}  // namespace tessera::parallel
