// Sampling tokens from a model with a KV cache (Decoder::DecodeStep): the prompt in one pass (the
// prefill), then one token per step for every completion still going, as one batch. Greedy
// (temperature 0) picks the arg-max, as transformers' generate with do_sample=False; otherwise each
// token is drawn from softmax of the logits / temperature kept by top-k, then by top-p (the order and
// the rules of transformers' TemperatureLogitsWarper, TopKLogitsWarper and TopPLogitsWarper), by
// inverse transform: one uniform draw of the completion's own generator a token. The cache is
// allocated once for the prompt and the tokens fed back (KvCache::capacity); finished completions
// leave the batch when a quarter of its rows are done (until then they are decoded along, unread).
#ifndef TESSERA_PARALLEL_MODELS_GENERATE_H_
#define TESSERA_PARALLEL_MODELS_GENERATE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "parallel/models/decoder.h"

namespace tessera::parallel {

struct GenerateOptions {
  int max_new_tokens = 32;
  double temperature = 0;  // 0: greedy.
  int top_k = 0;           // 0: every token.
  double top_p = 1;        // In (0, 1]: the smallest set of most likely tokens whose probability reaches it; 1: every token.
  uint64_t seed = 0;       // Of the sampler (with temperature > 0): see SampleSeed.
  int64_t stop_token = -1; // A completion ends after drawing it; -1: none.
  int num_samples = 1;     // Completions of the prompt (1 .. kMaxSamples), decoded together after one prefill.
};

inline constexpr int kMaxSamples = 1 << 16;

struct Completion {
  std::vector<int64_t> tokens;   // Ends with stop_token when it was drawn.
  // Of each token, the log-probability the sampler gave it: log_softmax(logits / T) at that token,
  // T the temperature (1 when greedy), before top-k and top-p — as TRL scores a completion's tokens.
  std::vector<double> logprobs;
  bool truncated = false;  // max_new_tokens reached without drawing stop_token (always, without one).
};

// The seed of completion i's generator (a CPU generator of its own, so that completion i draws the
// same tokens whatever num_samples is): SplitMix64 of seed + i · 0x9E3779B97F4A7C15.
uint64_t SampleSeed(uint64_t seed, int i);

// num_samples completions after `prompt` (ids below the vocabulary; with learned positions, prompt
// + new tokens fit in seq_len). Calls `on_token(i, token)` with each new token of completion i as it
// is chosen. `prompt_logits`, when given, receives the fp32 logits of every prompt position [T, vocab]
// (CPU). InvalidArgument names the offending option or token. The model must be whole on this rank,
// or on each rank of its 1D tp group (DecodeStep): then every member calls Sample with the same
// arguments and draws the same tokens (the same logits, the same generators), in lockstep.
absl::StatusOr<std::vector<Completion>> Sample(Decoder& model, const std::vector<int64_t>& prompt,
                                               const GenerateOptions& options,
                                               const std::function<void(int, int64_t)>& on_token = nullptr,
                                               at::Tensor* prompt_logits = nullptr);

// Several prompts decoded as one batch (the prefill left-pads them to the longest: KvCache::offsets):
// num_samples completions of each, prompt p's completion i drawn by the generator of SampleSeed(seeds[p],
// i) (options.seed is not read) — Sample's draws for each prompt alone, up to the rounding of the
// padded batch's arithmetic. At most kMaxSamples completions in all. Errors name the prompt.
absl::StatusOr<std::vector<std::vector<Completion>>> SampleBatch(Decoder& model,
                                                                 const std::vector<std::vector<int64_t>>& prompts,
                                                                 const std::vector<uint64_t>& seeds,
                                                                 const GenerateOptions& options);

// One completion (options.num_samples must be 1): its tokens.
absl::StatusOr<std::vector<int64_t>> Generate(Decoder& model, const std::vector<int64_t>& prompt,
                                              const GenerateOptions& options,
                                              const std::function<void(int64_t)>& on_token = nullptr,
                                              at::Tensor* prompt_logits = nullptr);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_MODELS_GENERATE_H_
