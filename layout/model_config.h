// What model to build: a decoder-only transformer of one family and its sizes. No torch and no proto:
// the control plane (validation, the planner, metrics) and the engine share it. The family fixes the
// architecture (formats/model/family.h); the sizes are the spec's model.* fields.
#ifndef TESSERA_LAYOUT_MODEL_CONFIG_H_
#define TESSERA_LAYOUT_MODEL_CONFIG_H_

#include <algorithm>

namespace tessera::layout {

enum class ModelFamily {
  kGpt2,   // GPT-2: LayerNorm, learned positions, GELU MLP of 4·hidden, biases, tied head.
  kLlama,  // Llama 2/3 shape: RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases
           // (Qwen2: the same with qkv_bias).
};

// Llama 3's rope scaling (transformers' rope_type "llama3"): rotary frequencies whose wavelength
// exceeds original_max_positions / low_freq_factor are divided by factor, those below
// original_max_positions / high_freq_factor kept, those between interpolated smoothly.
struct RopeScaling {
  double factor = 0;  // 0: no scaling.
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int original_max_positions = 8192;

  bool enabled() const { return factor > 0; }
  bool operator==(const RopeScaling& o) const {
    return factor == o.factor && low_freq_factor == o.low_freq_factor && high_freq_factor == o.high_freq_factor &&
           original_max_positions == o.original_max_positions;
  }
};

struct ModelConfig {
  int layers = 4;
  int hidden = 256;
  int heads = 4;
  int vocab = 256;
  int seq_len = 128;
  ModelFamily family = ModelFamily::kGpt2;
  int kv_heads = 0;          // Key/value heads (grouped-query attention); 0: heads. Llama only.
  int ffn_hidden = 0;        // The MLP's inner width; 0: the family's default (FfnHidden()).
  double norm_eps = 1e-5;    // LayerNorm / RMSNorm epsilon.
  double rope_theta = 1e4;   // Rotary positions' base. Llama only.
  RopeScaling rope_scaling;  // Llama only.
  bool qkv_bias = false;     // Llama shape: q, k and v projections with biases (Qwen2).
  bool tie_embeddings = true;  // The LM head is the token embedding (GPT-2 always).
  bool gelu_tanh = false;      // GPT-2: GELU's tanh approximation instead of erf.
  // Mixture of Experts (0: a dense model): experts per MoE layer and how many each token is routed to.
  int experts = 0;
  int experts_per_token = 0;

  int HeadDim() const { return hidden / heads; }
  int KvHeads() const { return kv_heads > 0 ? kv_heads : heads; }
  // GPT-2: 4·hidden. Llama: Megatron's SwiGLU default, 2/3 of 4·hidden rounded down to a multiple
  // of 64 (at least 64), unless given.
  int FfnHidden() const {
    if (ffn_hidden > 0) return ffn_hidden;
    if (family == ModelFamily::kGpt2) return 4 * hidden;
    return std::max(64, static_cast<int>(4.0 * hidden * 2 / 3 / 64) * 64);
  }
  // Parameters of one block: attention (q and the output projection h², k and v h·kv each), the MLP
  // (GPT-2: two matrices h·ffn; Llama's SwiGLU: three), norms, and GPT-2's biases.
  double BlockParameters() const {
    const double h = hidden, kv = static_cast<double>(KvHeads()) * HeadDim(), f = FfnHidden();
    if (family == ModelFamily::kGpt2) return 2 * h * h + 2 * h * kv + 2 * h * f + (3 * h + h + f + h) + 4 * h;
    return 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h + (qkv_bias ? h + 2 * kv : 0);
  }
  // Parameters outside the blocks: those of the first pipeline stage (token and learned position
  // embeddings), the last's untied head (0 when tied), and the final norm.
  double EmbeddingParameters() const {
    return static_cast<double>(vocab) * hidden + (family == ModelFamily::kGpt2 ? static_cast<double>(seq_len) * hidden : 0);
  }
  double HeadParameters() const {
    return family == ModelFamily::kGpt2 || tie_embeddings ? 0 : static_cast<double>(vocab) * hidden;
  }
  double FinalNormParameters() const { return family == ModelFamily::kGpt2 ? 2.0 * hidden : hidden; }
  double Parameters() const {
    return layers * BlockParameters() + EmbeddingParameters() + HeadParameters() + FinalNormParameters();
  }
  // Model FLOPs of training on one token (forward and backward): 6 per parameter and the attention
  // scores and values, 12·layers·hidden·seq_len (the MFU convention; no recomputation counted).
  double TrainingFlopsPerToken() const {
    return 6 * Parameters() + 12.0 * layers * hidden * seq_len;
  }
};

}  // namespace tessera::layout

#endif  // TESSERA_LAYOUT_MODEL_CONFIG_H_
