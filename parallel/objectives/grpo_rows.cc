#include "parallel/objectives/grpo_rows.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace tessera::parallel {

absl::StatusOr<GrpoRows> MakeGrpoRows(const std::vector<Rollout>& rollouts, int64_t seq_len) {
  GrpoRows out;
  out.rows = static_cast<int64_t>(rollouts.size());
  out.seq_len = seq_len;
  const int64_t T = seq_len, width = 2 * T + 1;
  out.tokens.assign(static_cast<size_t>(out.rows * (T + 1)), -1);  // Padding: token 0, untrained.
  out.data.assign(static_cast<size_t>(out.rows * width), 0.0);
  for (int64_t i = 0; i < out.rows; ++i) {
    const Rollout& r = rollouts[static_cast<size_t>(i)];
    const int64_t P = static_cast<int64_t>(r.prompt.size()), C = static_cast<int64_t>(r.completion.size());
    auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat("rollout ", i, ": ", what));
    };
    if (P == 0) return bad("the prompt has no tokens");
    if (C == 0) return bad("the completion has no tokens");
    if (P + C > T + 1) {
      return bad(absl::StrCat(P, " prompt and ", C, " completion tokens, more than seq_len + 1 = ", T + 1));
    }
    if (static_cast<int64_t>(r.logprobs.size()) != C) {
      return bad(absl::StrCat(r.logprobs.size(), " sampler log-probabilities for ", C, " completion tokens"));
    }
    if (!r.ref_logprobs.empty() && static_cast<int64_t>(r.ref_logprobs.size()) != C) {
      return bad(absl::StrCat(r.ref_logprobs.size(), " reference log-probabilities for ", C, " completion tokens"));
    }
    if (!std::isfinite(r.advantage)) return bad("the advantage is not finite");
    int64_t* row = out.tokens.data() + i * (T + 1);
    double* data = out.data.data() + i * width;
    for (int64_t t = 0; t < P; ++t) row[t] = t == 0 ? r.prompt[0] : -int64_t{r.prompt[t]} - 1;
    for (int64_t k = 0; k < C; ++k) {
      row[P + k] = r.completion[k];
      const double old = r.logprobs[k], ref = r.ref_logprobs.empty() ? 0.0 : r.ref_logprobs[k];
      if (!std::isfinite(old) || (!r.ref_logprobs.empty() && !std::isfinite(ref))) {
        return bad(absl::StrCat("completion token ", k, "'s log-probability is not finite"));
      }
      data[P + k - 1] = old;  // Predicted from position P + k − 1.
      data[T + P + k - 1] = ref;
    }
    data[2 * T] = r.advantage;
  }
  return out;
}

std::vector<double> GrpoDataBlock(const GrpoRows& rows, int block, int blocks) {
  const int64_t T = rows.seq_len, L = T / blocks, width = 2 * T + 1, out_width = 2 * L + 1;
  std::vector<double> out(static_cast<size_t>(rows.rows * out_width));
  for (int64_t i = 0; i < rows.rows; ++i) {
    const double* in = rows.data.data() + i * width;
    double* o = out.data() + i * out_width;
    for (int64_t t = 0; t < L; ++t) {
      o[t] = in[block * L + t];
      o[L + t] = in[T + block * L + t];
    }
    o[2 * L] = in[2 * T];
  }
  return out;
}

}  // namespace tessera::parallel
