#include "spec/model_config_of.h"

namespace tessera::spec {

layout::ModelConfig ModelConfigOf(const v1::ModelSpec& m) {
  layout::ModelConfig c;
  c.layers = m.layers();
  c.hidden = m.hidden();
  c.heads = m.heads();
  c.vocab = m.vocab();
  c.seq_len = m.seq_len();
  c.family = m.family() == v1::MODEL_FAMILY_LLAMA     ? layout::ModelFamily::kLlama
             : m.family() == v1::MODEL_FAMILY_MIXTRAL ? layout::ModelFamily::kMixtral
                                                      : layout::ModelFamily::kGpt2;
  c.kv_heads = m.kv_heads();
  c.ffn_hidden = m.ffn_hidden();
  if (m.norm_eps() > 0) c.norm_eps = m.norm_eps();
  if (m.rope_theta() > 0) c.rope_theta = m.rope_theta();
  if (m.has_rope_scaling()) {
    const v1::RopeScaling& r = m.rope_scaling();
    c.rope_scaling.factor = r.factor();
    if (r.low_freq_factor() > 0) c.rope_scaling.low_freq_factor = r.low_freq_factor();
    if (r.high_freq_factor() > 0) c.rope_scaling.high_freq_factor = r.high_freq_factor();
    if (r.original_max_positions() > 0) c.rope_scaling.original_max_positions = r.original_max_positions();
  }
  c.tie_embeddings = c.family == layout::ModelFamily::kGpt2 || m.tie_embeddings();
  c.gelu_tanh = m.activation() == v1::ACTIVATION_GELU_TANH;
  c.qkv_bias = m.qkv_bias();
  c.qk_norm = m.qk_norm();
  c.experts = m.experts();
  c.experts_per_token = m.experts_per_token();
  c.moe_ffn_hidden = m.moe_ffn_hidden();
  c.shared_expert_ffn_hidden = m.shared_expert_ffn_hidden();
  c.norm_topk_prob = !m.has_norm_topk_prob() || m.norm_topk_prob();
  c.moe_every = m.moe_every() > 0 ? m.moe_every() : 1;  // 0: a spec stored before the field existed.
  c.dense_layers.assign(m.dense_layers().begin(), m.dense_layers().end());
  c.aux_loss_coef = m.aux_loss_coef();
  c.capacity_factor = m.capacity_factor();
  c.router_bias_rate = m.router_bias_rate();
  c.router_jitter = m.router_jitter();
  if (m.has_lora()) {
    c.lora.rank = m.lora().rank();
    c.lora.alpha = m.lora().alpha() > 0 ? m.lora().alpha() : m.lora().rank();
    c.lora.targets.assign(m.lora().targets().begin(), m.lora().targets().end());
    c.lora.dropout = m.lora().dropout();
  }
  return c;
}

}  // namespace tessera::spec
