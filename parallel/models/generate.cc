#include "parallel/models/generate.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/DistributionsHelper.h>

#include <algorithm>
#include <string>
#include <cmath>
#include <limits>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "formats/model/family.h"

namespace tessera::parallel {

using formats::model::FamilyOf;
using formats::model::PositionKind;

namespace {

// The scores of one row [V] (logits / temperature) with top-k then top-p applied: the tokens left out
// at −inf. top-k keeps the tokens scoring at least the k-th largest (ties kept); top-p sorts the kept
// tokens by score, ascending, and drops those whose cumulative probability stays at or below 1 − p,
// never the most likely one.
at::Tensor Filter(at::Tensor scores, int top_k, double top_p) {
  const double minus_inf = -std::numeric_limits<double>::infinity();
  if (top_k > 0 && top_k < scores.size(-1)) {
    const at::Tensor kth = std::get<0>(scores.topk(top_k, -1)).narrow(-1, top_k - 1, 1);
    scores = scores.masked_fill(scores < kth, minus_inf);
  }
  if (top_p < 1) {
    auto [sorted, order] = scores.sort(/*dim=*/-1, /*descending=*/false);
    at::Tensor drop = sorted.softmax(-1).cumsum(-1) <= (1 - top_p);
    drop.select(-1, drop.size(-1) - 1).fill_(false);
    scores = scores.masked_fill(at::zeros_like(drop).scatter(-1, order, drop), minus_inf);
  }
  return scores;
}

// The token whose cumulative probability `cdf` [V] (non-decreasing, its last ≈ 1) first exceeds a
// uniform draw of `generator` scaled to the total; never a token of probability 0.
int64_t DrawToken(const double* cdf, int64_t V, at::Generator& generator) {
  double u;
  {
    auto* gen = at::check_generator<at::CPUGeneratorImpl>(generator);
    std::lock_guard<std::mutex> lock(generator.mutex());
    u = at::uniform_real_distribution<double>(0.0, 1.0)(gen) * cdf[V - 1];
  }
  int64_t token = std::upper_bound(cdf, cdf + V, u) - cdf;
  token = std::min(token, V - 1);
  while (token > 0 && cdf[token] == cdf[token - 1]) --token;  // Rounding past the last likely token.
  return token;
}

}  // namespace

uint64_t SampleSeed(uint64_t seed, int i) {
  uint64_t z = seed + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {

// Sample and SampleBatch: prompts[p]'s completion i is row p·G + i, drawn by SampleSeed(seeds[p], i).
absl::StatusOr<std::vector<std::vector<Completion>>> Decode(Decoder& model, const std::vector<std::vector<int64_t>>& prompts,
                                                            const std::vector<uint64_t>& seeds, const GenerateOptions& o,
                                                            const std::function<void(int, int64_t)>& on_token,
                                                            at::Tensor* prompt_logits) {
  const ModelConfig& c = model.config();
  if (prompts.empty()) return absl::InvalidArgumentError("no prompt");
  if (seeds.size() != prompts.size()) return absl::InvalidArgumentError("one seed per prompt");
  if (o.max_new_tokens < 0) return absl::InvalidArgumentError(absl::StrCat("max-new-tokens ", o.max_new_tokens, " is negative"));
  if (!(o.temperature >= 0) || std::isinf(o.temperature)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature ", o.temperature, " is not a finite number >= 0"));
  }
  if (o.top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top-k ", o.top_k, " is negative"));
  if (!(o.top_p > 0 && o.top_p <= 1)) return absl::InvalidArgumentError(absl::StrCat("top-p ", o.top_p, " is not in (0, 1]"));
  if (o.num_samples < 1 || o.num_samples > kMaxSamples) {
    return absl::InvalidArgumentError(absl::StrCat("num-samples ", o.num_samples, " is not in [1, ", kMaxSamples, "]"));
  }
  const int64_t N = static_cast<int64_t>(prompts.size());
  if (N * o.num_samples > kMaxSamples) {
    return absl::InvalidArgumentError(absl::StrCat(N, " prompts × num-samples ", o.num_samples, " exceed ", kMaxSamples,
                                                   " completions in one batch"));
  }
  int64_t longest = 0;
  for (int64_t p = 0; p < N; ++p) {
    const std::vector<int64_t>& prompt = prompts[p];
    const std::string which = N > 1 ? absl::StrCat("prompt ", p, ": ") : "";
    if (prompt.empty()) return absl::InvalidArgumentError(which + "the prompt is empty (at least one token)");
    for (size_t i = 0; i < prompt.size(); ++i) {
      if (prompt[i] < 0 || prompt[i] >= c.vocab) {
        return absl::InvalidArgumentError(absl::StrCat(which, "prompt token ", i, " is ", prompt[i],
                                                       ", outside the vocabulary [0, ", c.vocab, ")"));
      }
    }
    // Positions the model reads: the prompt's and every generated token's but the last (never fed back).
    const int64_t needed = static_cast<int64_t>(prompt.size()) + std::max<int64_t>(o.max_new_tokens - 1, 0);
    if (FamilyOf(c.family).positions == PositionKind::kLearned && needed > c.seq_len) {
      return absl::InvalidArgumentError(absl::StrCat(which, "the prompt (", prompt.size(), " tokens) and max-new-tokens ",
                                                     o.max_new_tokens, " need ", needed, " positions, more than the model's ",
                                                     c.seq_len, " learned positions"));
    }
    longest = std::max<int64_t>(longest, static_cast<int64_t>(prompt.size()));
  }
  const c10::Device device = model.params().front().value.device();
  const int G = o.num_samples;
  const int64_t rows_total = N * G;
  std::vector<at::Generator> generators;
  if (o.temperature > 0) {
    for (int64_t p = 0; p < N; ++p) {
      for (int i = 0; i < G; ++i) generators.push_back(at::make_generator<at::CPUGeneratorImpl>(SampleSeed(seeds[p], i)));
    }
  }
  std::vector<std::vector<Completion>> out(N, std::vector<Completion>(G));
  if (o.max_new_tokens == 0 && prompt_logits == nullptr) return out;
  // The prefill: one row per prompt, left-padded to the longest (KvCache::offsets) when they differ;
  // the cache allocated once for the prompt and every token fed back.
  KvCache cache;
  cache.capacity = longest + std::max<int64_t>(o.max_new_tokens - 1, 0);
  std::vector<int64_t> padded(static_cast<size_t>(N * longest), 0), offsets(N);
  for (int64_t p = 0; p < N; ++p) {
    offsets[p] = longest - static_cast<int64_t>(prompts[p].size());
    std::copy(prompts[p].begin(), prompts[p].end(), padded.begin() + p * longest + offsets[p]);
  }
  if (std::any_of(offsets.begin(), offsets.end(), [](int64_t x) { return x > 0; })) cache.offsets = at::tensor(offsets, at::kLong);
  at::Tensor logits = model.DecodeStep(at::tensor(padded, at::kLong).view({N, longest}).to(device), &cache);  // [N, T, V]
  if (prompt_logits != nullptr) *prompt_logits = logits[0].cpu();
  if (o.max_new_tokens == 0) return out;
  // Every completion continues its prompt: the cache and the last logits, once per completion.
  at::Tensor last = logits.select(1, -1);  // [N, V]
  if (G > 1) {
    const at::Tensor rows = at::arange(N, at::kLong).repeat_interleave(G);
    last = last.index_select(0, rows.to(device));
    cache.SelectRows(rows);
  }
  // The completion (p·G + i) of each row of the batch; −1: finished, decoded along until the batch is
  // compacted (rows are dropped from the cache only when a quarter of them are done: each drop copies it).
  std::vector<int64_t> active(rows_total);
  for (int64_t r = 0; r < rows_total; ++r) active[r] = r;
  const double T = o.temperature > 0 ? o.temperature : 1.0;
  for (int n = 0; n < o.max_new_tokens; ++n) {
    const at::Tensor scores = last.to(at::kFloat).cpu() / T;  // [A, V]
    const at::Tensor logprobs = at::log_softmax(scores.to(at::kDouble), -1).contiguous();
    const int64_t A = logprobs.size(0), V = logprobs.size(1);
    const double* logprob_at = logprobs.data_ptr<double>();
    std::vector<int64_t> next(A, 0);
    if (o.temperature == 0) {
      const at::Tensor best = scores.argmax(-1).contiguous();
      std::copy(best.data_ptr<int64_t>(), best.data_ptr<int64_t>() + best.numel(), next.begin());
    } else {
      // Each row's token by inverse transform: one uniform from its completion's generator against
      // the cumulative probabilities (the first token whose cumulative sum passes it).
      const at::Tensor cumulative = at::softmax(Filter(scores, o.top_k, o.top_p).to(at::kDouble), -1).cumsum(-1).contiguous();
      const double* cdf = cumulative.data_ptr<double>();
      for (int64_t r = 0; r < A; ++r) {
        if (active[r] >= 0) next[r] = DrawToken(cdf + r * V, V, generators[active[r]]);
      }
    }
    int64_t live = 0;
    for (int64_t r = 0; r < A; ++r) {
      if (active[r] < 0) continue;
      Completion& done = out[active[r] / G][active[r] % G];
      done.tokens.push_back(next[r]);
      done.logprobs.push_back(logprob_at[r * V + next[r]]);
      if (on_token) on_token(static_cast<int>(active[r]), next[r]);
      if (next[r] == o.stop_token) {
        active[r] = -1;
      } else if (n + 1 == o.max_new_tokens) {
        done.truncated = true;
        active[r] = -1;
      } else {
        ++live;
      }
    }
    if (live == 0) break;
    if (4 * live <= 3 * A) {
      // Finished completions leave the batch (their rows of the cache with them).
      std::vector<int64_t> keep, still, tokens;
      for (int64_t r = 0; r < A; ++r) {
        if (active[r] < 0) continue;
        keep.push_back(r);
        still.push_back(active[r]);
        tokens.push_back(next[r]);
      }
      cache.SelectRows(at::tensor(keep, at::kLong));
      active = std::move(still);
      next = std::move(tokens);
    }
    last = model.DecodeStep(at::tensor(next, at::kLong).unsqueeze(1).to(device), &cache).select(1, -1);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Completion>> Sample(Decoder& model, const std::vector<int64_t>& prompt,
                                               const GenerateOptions& o, const std::function<void(int, int64_t)>& on_token,
                                               at::Tensor* prompt_logits) {
  auto done = Decode(model, {prompt}, {o.seed}, o, on_token, prompt_logits);
  if (!done.ok()) return done.status();
  return std::move(done->front());
}

absl::StatusOr<std::vector<std::vector<Completion>>> SampleBatch(Decoder& model,
                                                                 const std::vector<std::vector<int64_t>>& prompts,
                                                                 const std::vector<uint64_t>& seeds,
                                                                 const GenerateOptions& o) {
  return Decode(model, prompts, seeds, o, nullptr, nullptr);
}

absl::StatusOr<std::vector<int64_t>> Generate(Decoder& model, const std::vector<int64_t>& prompt,
                                              const GenerateOptions& o, const std::function<void(int64_t)>& on_token,
                                              at::Tensor* prompt_logits) {
  if (o.num_samples != 1) return absl::InvalidArgumentError("Generate makes one completion (num_samples 1)");
  auto each = on_token ? std::function<void(int, int64_t)>([&](int, int64_t t) { on_token(t); }) : nullptr;
  auto completions = Sample(model, prompt, o, each, prompt_logits);
  if (!completions.ok()) return completions.status();
  return std::move(completions->front().tokens);
}

}  // namespace tessera::parallel
