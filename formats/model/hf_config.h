// transformers' config.json as tessera's model config, and back. Which keys of which model_type map
// to which ModelConfig field is documented in docs/models.md ("Hugging Face models").
#ifndef TESSERA_FORMATS_MODEL_HF_CONFIG_H_
#define TESSERA_FORMATS_MODEL_HF_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "formats/model/model_config.h"

namespace tessera::formats::model {

// The model_types read: gpt2 (GPT2LMHeadModel) and the Llama shape — llama, mistral where its
// sliding window does not bind, qwen2 (q, k, v biases), qwen3 (q/k norms), and the Mixtures of
// Experts mixtral, qwen2_moe (shared expert) and qwen3_moe.
enum class HfModelType { kGpt2, kLlama, kMistral, kQwen2, kQwen3, kMixtral, kQwen2Moe, kQwen3Moe };

struct HfModelConfig {
  HfModelType type = HfModelType::kGpt2;
  std::string model_type;     // As written: "gpt2", "llama", "mistral".
  ModelConfig config;         // Family and sizes; seq_len is left at its default (a training choice).
  int64_t max_positions = 0;  // gpt2 n_positions (the rows of wpe), llama max_position_embeddings; 0: absent.
  int64_t sliding_window = 0; // mistral: attention is limited to this many tokens; 0: none.
};

// Parses config.json text; `path` names the file in errors. Fails with InvalidArgument naming the
// key and the problem: a missing or non-positive size, an unknown model_type, or a setting tessera's
// families do not implement (an activation, biases, rope scaling, ...) — a model is never loaded as
// something it is not. A *ForSequenceClassification architecture of one label is a reward model
// (config.score_head).
absl::StatusOr<HfModelConfig> ParseHfConfig(const std::string& path, std::string_view json);

// Reads and parses DIR/config.json.
absl::StatusOr<HfModelConfig> ReadHfConfig(const std::string& dir);

// The model_type that represents `config`: gpt2; the Llama shape as llama, qwen2 (qkv_bias), qwen3
// (qk_norm); mixtral; a llama-family Mixture of Experts as qwen3_moe (qk_norm) or qwen2_moe.
HfModelType HfTypeOf(const ModelConfig& config);
// Whether HfTypeOf's model_type holds every feature of `config` (FailedPrecondition naming the one
// it lacks).
absl::Status HfExportable(const ModelConfig& config);

// config.json text for `config` that transformers' AutoConfig reads back as the same model
// (GPT2LMHeadModel, LlamaForCausalLM, or Qwen2ForCausalLM with qkv_bias), with `max_positions` positions (at least seq_len for gpt2:
// its wpe has that many rows) and torch_dtype `dtype` ("float32", "bfloat16"). A reward model
// (config.score_head): the family's *ForSequenceClassification with one label and `pad_token_id`
// (-1: null).
std::string HfConfigJson(const ModelConfig& config, int64_t max_positions, const std::string& dtype,
                         int64_t pad_token_id = -1);

}  // namespace tessera::formats::model

#endif  // TESSERA_FORMATS_MODEL_HF_CONFIG_H_
