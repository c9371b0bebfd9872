#include "parallel/models/generate.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "formats/model/family.h"

namespace tessera::parallel {

using formats::model::FamilyOf;
using formats::model::PositionKind;

absl::StatusOr<std::vector<int64_t>> Generate(Decoder& model, const std::vector<int64_t>& prompt,
                                              const GenerateOptions& o, const std::function<void(int64_t)>& on_token,
                                              at::Tensor* prompt_logits) {
  const ModelConfig& c = model.config();
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty (at least one token)");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= c.vocab) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", i, " is ", prompt[i], ", outside the vocabulary [0, ",
                                                     c.vocab, ")"));
    }
  }
  if (o.max_new_tokens < 0) return absl::InvalidArgumentError(absl::StrCat("max-new-tokens ", o.max_new_tokens, " is negative"));
  if (!(o.temperature >= 0)) return absl::InvalidArgumentError(absl::StrCat("temperature ", o.temperature, " is negative"));
  if (o.top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top-k ", o.top_k, " is negative"));
  // Positions the model reads: the prompt's and every generated token's but the last (never fed back).
  const int64_t needed = static_cast<int64_t>(prompt.size()) + std::max<int64_t>(o.max_new_tokens - 1, 0);
  if (FamilyOf(c.family).positions == PositionKind::kLearned && needed > c.seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt (", prompt.size(), " tokens) and max-new-tokens ",
                                                   o.max_new_tokens, " need ", needed, " positions, more than the model's ",
                                                   c.seq_len, " learned positions"));
  }
  const c10::Device device = model.params().front().value.device();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  KvCache cache;
  std::vector<int64_t> out;
  at::Tensor tokens = at::tensor(prompt, at::kLong).unsqueeze(0).to(device);
  for (int n = 0; n < o.max_new_tokens || (prompt_logits != nullptr && n == 0); ++n) {
    at::Tensor logits = model.DecodeStep(tokens, &cache);  // [1, T, vocab]
    if (n == 0 && prompt_logits != nullptr) *prompt_logits = logits[0].cpu();
    if (n >= o.max_new_tokens) break;
    at::Tensor last = logits[0][-1].cpu();
    int64_t next;
    if (o.temperature == 0) {
      next = last.argmax().item<int64_t>();
    } else {
      at::Tensor scaled = last / o.temperature;
      if (o.top_k > 0 && o.top_k < c.vocab) {
        const double kth = std::get<0>(scaled.topk(o.top_k))[-1].item<double>();
        scaled = scaled.masked_fill(scaled < kth, -std::numeric_limits<float>::infinity());
      }
      next = at::multinomial(at::softmax(scaled, -1), 1, /*replacement=*/false, gen).item<int64_t>();
    }
    out.push_back(next);
    if (on_token) on_token(next);
    if (next == o.stop_token) break;
    tokens = at::full({1, 1}, next, at::TensorOptions().dtype(at::kLong).device(device));
  }
  return out;
}

}  // namespace tessera::parallel
