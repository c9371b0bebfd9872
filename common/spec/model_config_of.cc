#include "common/spec/model_config_of.h"

namespace tessera::spec {

parallel::ModelConfig ModelConfigOf(const v1::ModelSpec& m) {
  parallel::ModelConfig c;
  c.layers = m.layers();
  c.hidden = m.hidden();
  c.heads = m.heads();
  c.vocab = m.vocab();
  c.seq_len = m.seq_len();
  c.family = m.family() == v1::MODEL_FAMILY_LLAMA ? parallel::ModelFamily::kLlama : parallel::ModelFamily::kGpt2;
  c.kv_heads = m.kv_heads();
  c.ffn_hidden = m.ffn_hidden();
  if (m.norm_eps() > 0) c.norm_eps = m.norm_eps();
  if (m.rope_theta() > 0) c.rope_theta = m.rope_theta();
  c.tie_embeddings = c.family == parallel::ModelFamily::kGpt2 || m.tie_embeddings();
  c.gelu_tanh = m.activation() == v1::ACTIVATION_GELU_TANH;
  return c;
}

}  // namespace tessera::spec
