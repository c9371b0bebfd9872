// What model to build: a decoder-only transformer of one family and its sizes. No torch and no proto:
// the control plane (validation, the planner, metrics) and the engine share it. The family fixes the
// architecture (formats/model/family.h); the sizes are the spec's model.* fields.
#ifndef TESSERA_LAYOUT_MODEL_CONFIG_H_
#define TESSERA_LAYOUT_MODEL_CONFIG_H_

#include <algorithm>
#include <string>
#include <vector>

namespace tessera::layout {

enum class ModelFamily {
  kGpt2,     // GPT-2: LayerNorm, learned positions, GELU MLP of 4·hidden, biases, tied head.
  kLlama,    // Llama 2/3 shape: RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases
             // (Qwen2: the same with qkv_bias; Qwen3: with qk_norm; Qwen2/3-MoE: with experts).
  kMixtral,  // The Llama shape whose MLPs are Mixtral's sparse blocks (its parameter names).
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

// LoRA (docs/fine-tuning.md "LoRA"): rank-r adapters A [r, in], B [out, r] on the linears whose
// transformers module name (the last part of their parameter name's role) is a target; the linear
// computes W·x + (alpha / r)·B·A·x and only the adapters train.
struct LoraConfig {
  int rank = 0;  // 0: no LoRA.
  double alpha = 0;
  std::vector<std::string> targets;
  double dropout = 0;  // PEFT's lora_dropout on each adapter's input, in training (Decoder::set_dropout_seed).

  bool enabled() const { return rank > 0; }
  double scale() const { return alpha / rank; }
  // A module name of an MLP's linears (a Mixture of Experts' experts: gate_proj, up_proj, down_proj,
  // Mixtral's w1, w2, w3).
  static bool IsMlpModule(const std::string& m) {
    return m == "gate_proj" || m == "up_proj" || m == "down_proj" || m == "w1" || m == "w2" || m == "w3";
  }
  bool Targets(const std::string& module) const {
    return std::find(targets.begin(), targets.end(), module) != targets.end();
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
  bool qk_norm = false;         // Llama shape: RMSNorm over each head's q and k before rotary (Qwen3).
  // Mixture of Experts (experts 0: a dense model). A block is sparse (IsMoeLayer) unless listed in
  // dense_layers or (i + 1) % moe_every != 0 (transformers' mlp_only_layers, decoder_sparse_step);
  // a sparse block's MLP is `experts` SwiGLU experts of moe_ffn_hidden, each token routed to
  // experts_per_token of them (softmax in fp32, top-k, renormalised when norm_topk_prob), plus a
  // shared expert of shared_expert_ffn_hidden with a sigmoid gate when > 0 (Qwen2-MoE).
  int experts = 0;
  int experts_per_token = 0;
  int moe_ffn_hidden = 0;  // 0: FfnHidden().
  int shared_expert_ffn_hidden = 0;
  bool norm_topk_prob = true;
  int moe_every = 1;
  std::vector<int> dense_layers;
  // The balancing loss's weight in the objective (transformers' router_aux_loss_coef; 0: reported,
  // not trained).
  double aux_loss_coef = 0;
  // > 0: an expert takes at most ceil(capacity_factor · N · k / E) of the N·k assignments of a rank's
  // micro-batch per sparse block, in token order, the rest dropped; 0: dropless.
  double capacity_factor = 0;
  // > 0: loss-free balancing: per sparse block a bias b added to the probabilities to choose the
  // top-k (the weights stay the probabilities), after every step b += rate · sign(mean load − load).
  double router_bias_rate = 0;
  // > 0: in training a sparse block's input is multiplied by noise uniform in [1 − j, 1 + j]
  // (transformers' Mixtral router_jitter_noise); 0: none.
  double router_jitter = 0;
  LoraConfig lora;  // Adapters (lora.enabled()): only they train.
  // A reward model (train.objective reward): the head is `score.weight` [1, hidden], no bias, read at
  // a sequence's last token (transformers' *ForSequenceClassification with num_labels 1) instead of
  // the LM head; the token embedding is then the embedding only.
  bool score_head = false;

  int HeadDim() const { return hidden / heads; }
  bool IsMoe() const { return experts > 0; }
  bool IsMoeLayer(int layer) const {
    if (experts <= 0 || moe_every <= 0 || (layer + 1) % moe_every != 0) return false;
    return std::find(dense_layers.begin(), dense_layers.end(), layer) == dense_layers.end();
  }
  int MoeFfnHidden() const { return moe_ffn_hidden > 0 ? moe_ffn_hidden : FfnHidden(); }
  int MoeLayers() const {
    int n = 0;
    for (int i = 0; i < layers; ++i) n += IsMoeLayer(i) ? 1 : 0;
    return n;
  }
  int KvHeads() const { return kv_heads > 0 ? kv_heads : heads; }
  // GPT-2: 4·hidden. Llama: Megatron's SwiGLU default, 2/3 of 4·hidden rounded down to a multiple
  // of 64 (at least 64), unless given.
  int FfnHidden() const {
    if (ffn_hidden > 0) return ffn_hidden;
    if (family == ModelFamily::kGpt2) return 4 * hidden;
    return std::max(64, static_cast<int>(4.0 * hidden * 2 / 3 / 64) * 64);
  }
  // Parameters of block `layer`: attention (q and the output projection h², k and v h·kv each), the
  // MLP (GPT-2: two matrices h·ffn; SwiGLU: three; a sparse block: the router E·h, E experts and the
  // shared expert with its gate), norms, and biases. `active`: a sparse block counts only the
  // experts_per_token experts one token uses.
  double BlockParameters(int layer, bool active = false) const {
    const double h = hidden, kv = static_cast<double>(KvHeads()) * HeadDim(), f = FfnHidden();
    if (family == ModelFamily::kGpt2) return 2 * h * h + 2 * h * kv + 2 * h * f + (3 * h + h + f + h) + 4 * h;
    double mlp = 3 * h * f;
    if (IsMoeLayer(layer)) {
      mlp = static_cast<double>(experts) * h + (active ? experts_per_token : experts) * 3.0 * h * MoeFfnHidden();
      if (shared_expert_ffn_hidden > 0) mlp += 3.0 * h * shared_expert_ffn_hidden + h;
    }
    return 2 * h * h + 2 * h * kv + mlp + 2 * h + (qkv_bias ? h + 2 * kv : 0) + (qk_norm ? 2.0 * HeadDim() : 0);
  }
  // The mean over the blocks (the planner's per-layer size).
  double MeanBlockParameters(bool active = false) const {
    double sum = 0;
    for (int i = 0; i < layers; ++i) sum += BlockParameters(i, active);
    return layers > 0 ? sum / layers : 0;
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
  // All parameters, or (`active`) those one token uses (Mixture of Experts: experts_per_token experts
  // of each sparse block).
  double Parameters(bool active = false) const {
    return layers * MeanBlockParameters(active) + EmbeddingParameters() + HeadParameters() + FinalNormParameters();
  }
  // Model FLOPs of training on one token (forward and backward): 6 per active parameter and the
  // attention scores and values, 12·layers·hidden·seq_len (the MFU convention; no recomputation
  // counted).
  double TrainingFlopsPerToken() const {
    return 6 * Parameters(/*active=*/true) + 12.0 * layers * hidden * seq_len;
  }
};

}  // namespace tessera::layout

#endif  // TESSERA_LAYOUT_MODEL_CONFIG_H_
