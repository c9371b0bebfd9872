// Sampling tokens from a model with a KV cache (Decoder::DecodeStep): the prompt in one pass, then
// one token per step. Greedy (temperature 0) picks the arg-max, as transformers' generate with
// do_sample=False; otherwise softmax(logits / temperature) over the top_k most likely tokens.
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
  uint64_t seed = 0;       // Of the sampler (with temperature > 0).
  int64_t stop_token = -1; // Generation ends after producing it; -1: none.
};

// Generates after `prompt` (ids below the vocabulary; with learned positions, prompt + new tokens fit
// in seq_len). Calls `on_token` with each new token as it is chosen. `prompt_logits`, when given,
// receives the fp32 logits of every prompt position [T, vocab] (CPU). InvalidArgument names the
// offending option or token.
absl::StatusOr<std::vector<int64_t>> Generate(Decoder& model, const std::vector<int64_t>& prompt,
                                              const GenerateOptions& options,
                                              const std::function<void(int64_t)>& on_token = nullptr,
                                              at::Tensor* prompt_logits = nullptr);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_MODELS_GENERATE_H_
