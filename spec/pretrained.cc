// ApplyPretrained: model.pretrained's config.json as the spec's model fields.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spec/job_spec.h"
#include "spec/model_config_of.h"
#include "formats/model/hf_config.h"

namespace tessera::spec {
namespace {

using formats::model::HfModelConfig;
using layout::ModelFamily;

// Collects "field: N in the spec, M in FILE" for every written field that disagrees.
class Agreement {
 public:
  explicit Agreement(std::string file) : file_(std::move(file)) {}

  template <typename T>
  void Check(const std::string& field, T written, T from_config, const std::string& key, bool was_written) {
    if (!was_written || written == from_config) return;
    errors_.push_back({"model." + field, absl::StrCat(written, " in the spec, ", from_config, " in ", file_,
                                                      " (", key, ")")});
  }
  void Fail(const std::string& field, const std::string& why) { errors_.push_back({"model." + field, why}); }
  const std::vector<SpecError>& errors() const { return errors_; }

 private:
  std::string file_;
  std::vector<SpecError> errors_;
};

const char* FamilyWord(v1::ModelFamily f) {
  return f == v1::MODEL_FAMILY_LLAMA ? "llama" : f == v1::MODEL_FAMILY_MIXTRAL ? "mixtral" : "gpt";
}
const char* ActivationWord(v1::Activation a) {
  switch (a) {
    case v1::ACTIVATION_GELU: return "gelu";
    case v1::ACTIVATION_GELU_TANH: return "gelu_tanh";
    case v1::ACTIVATION_SILU: return "silu";
    default: return "unspecified";
  }
}

}  // namespace

absl::Status ApplyPretrained(const v1::ModelSpec& w, v1::JobSpec* spec) {
  v1::ModelSpec* m = spec->mutable_model();
  if (m->pretrained().empty()) return absl::OkStatus();
  if (!m->init_from().empty()) {
    return ToStatus({{"model.pretrained", "excludes model.init_from (both give the initial weights)"}});
  }
  auto hf = formats::model::ReadHfConfig(m->pretrained());
  if (!hf.ok()) return ToStatus({{"model.pretrained", std::string(hf.status().message())}});
  const layout::ModelConfig& c = hf->config;
  if (c.score_head && spec->train().objective() != v1::OBJECTIVE_REWARD) {
    // A reward model's directory has a score head and no LM head: nothing else trains from it.
    return ToStatus({{"model.pretrained",
                      absl::StrCat(m->pretrained(), " is a reward model (a *ForSequenceClassification with a score "
                                                    "head, no LM head): train.objective ",
                                   spec->train().objective() == v1::OBJECTIVE_DPO ? "dpo" : "cross_entropy",
                                   " needs a causal LM (a *ForCausalLM directory)")}});
  }
  const bool gpt = c.family == ModelFamily::kGpt2;
  Agreement a(m->pretrained() + "/config.json");
  const v1::ModelFamily family = gpt                                  ? v1::MODEL_FAMILY_GPT
                                 : c.family == ModelFamily::kMixtral ? v1::MODEL_FAMILY_MIXTRAL
                                                                     : v1::MODEL_FAMILY_LLAMA;
  if (w.family() != v1::MODEL_FAMILY_UNSPECIFIED && w.family() != family) {
    a.Fail("family", absl::StrCat(FamilyWord(w.family()), " in the spec, ", FamilyWord(family), " in ",
                                  m->pretrained(), "/config.json (model_type ", hf->model_type, ")"));
  }
  a.Check("layers", w.layers(), c.layers, gpt ? "n_layer" : "num_hidden_layers", w.layers() != 0);
  a.Check("hidden", w.hidden(), c.hidden, gpt ? "n_embd" : "hidden_size", w.hidden() != 0);
  a.Check("heads", w.heads(), c.heads, gpt ? "n_head" : "num_attention_heads", w.heads() != 0);
  a.Check("kv_heads", w.kv_heads(), c.KvHeads(), gpt ? "n_head" : "num_key_value_heads", w.kv_heads() != 0);
  a.Check("ffn_hidden", w.ffn_hidden(), c.FfnHidden(), gpt ? "4·n_embd" : "intermediate_size", w.ffn_hidden() != 0);
  a.Check("vocab", w.vocab(), c.vocab, "vocab_size", w.vocab() != 0);
  a.Check("norm_eps", w.norm_eps(), c.norm_eps, gpt ? "layer_norm_epsilon" : "rms_norm_eps", w.norm_eps() != 0);
  if (!gpt) a.Check("rope_theta", w.rope_theta(), c.rope_theta, "rope_theta", w.rope_theta() != 0);
  a.Check("tie_embeddings", w.tie_embeddings(), c.tie_embeddings, "tie_word_embeddings", w.has_tie_embeddings());
  a.Check("qkv_bias", w.qkv_bias(), c.qkv_bias, "model_type " + hf->model_type, w.has_qkv_bias());
  a.Check("qk_norm", w.qk_norm(), c.qk_norm, "model_type " + hf->model_type, w.has_qk_norm());
  const bool mixtral = c.family == ModelFamily::kMixtral;
  a.Check("experts", w.experts(), c.experts, mixtral ? "num_local_experts" : "num_experts", w.experts() != 0);
  if (c.IsMoe()) {
    // experts_per_token has a spec default (2): a differing value is only an error where experts was written too.
    a.Check("experts_per_token", w.experts_per_token(), c.experts_per_token, "num_experts_per_tok",
            w.experts() != 0 && w.experts_per_token() != 2);
    a.Check("moe_ffn_hidden", w.moe_ffn_hidden(), c.MoeFfnHidden(),
            mixtral ? "intermediate_size" : "moe_intermediate_size", w.moe_ffn_hidden() != 0);
    a.Check("shared_expert_ffn_hidden", w.shared_expert_ffn_hidden(), c.shared_expert_ffn_hidden,
            "shared_expert_intermediate_size", w.shared_expert_ffn_hidden() != 0);
    a.Check("norm_topk_prob", w.norm_topk_prob(), c.norm_topk_prob, "norm_topk_prob", w.has_norm_topk_prob());
    a.Check("moe_every", w.moe_every(), c.moe_every, "decoder_sparse_step", w.moe_every() != 1 && w.moe_every() != 0);
    if (w.dense_layers_size() > 0 &&
        !std::equal(w.dense_layers().begin(), w.dense_layers().end(), c.dense_layers.begin(), c.dense_layers.end())) {
      a.Fail("dense_layers", absl::StrCat("differs from ", m->pretrained(), "/config.json's mlp_only_layers"));
    }
  }
  if (w.has_rope_scaling()) {
    // Written scaling must be the file's (compared as the model reads both).
    if (!(ModelConfigOf(w).rope_scaling == c.rope_scaling)) {
      a.Fail("rope_scaling", absl::StrCat("differs from ", m->pretrained(), "/config.json's rope_scaling"));
    }
  }
  const v1::Activation act = !gpt ? v1::ACTIVATION_SILU : c.gelu_tanh ? v1::ACTIVATION_GELU_TANH : v1::ACTIVATION_GELU;
  if (w.activation() != v1::ACTIVATION_UNSPECIFIED && w.activation() != act) {
    a.Fail("activation", absl::StrCat(ActivationWord(w.activation()), " in the spec, ", ActivationWord(act), " in ",
                                      m->pretrained(), "/config.json (", gpt ? "activation_function" : "hidden_act", ")"));
  }
  m->set_family(family);
  m->set_layers(c.layers);
  m->set_hidden(c.hidden);
  m->set_heads(c.heads);
  m->set_vocab(c.vocab);
  m->set_norm_eps(c.norm_eps);
  m->set_activation(act);
  if (gpt) {
    m->set_kv_heads(0);
    m->set_ffn_hidden(0);
  } else {
    m->set_kv_heads(c.KvHeads());
    m->set_ffn_hidden(c.FfnHidden());
    m->set_rope_theta(c.rope_theta);
    m->set_tie_embeddings(c.tie_embeddings);
    m->set_qkv_bias(c.qkv_bias);
    m->set_qk_norm(c.qk_norm);
    m->set_experts(c.experts);
    if (c.IsMoe()) {
      m->set_experts_per_token(c.experts_per_token);
      m->set_moe_ffn_hidden(c.MoeFfnHidden());
      m->set_shared_expert_ffn_hidden(c.shared_expert_ffn_hidden);
      m->set_norm_topk_prob(c.norm_topk_prob);
      m->set_moe_every(c.moe_every);
      m->clear_dense_layers();
      for (int layer : c.dense_layers) m->add_dense_layers(layer);
      // The spec's coefficient wins (the "or the spec sets the coefficient"); else config.json's
      // when output_router_logits is true.
      if (!w.has_aux_loss_coef()) m->set_aux_loss_coef(c.aux_loss_coef);
    }
    if (c.rope_scaling.enabled()) {
      v1::RopeScaling* r = m->mutable_rope_scaling();
      r->set_factor(c.rope_scaling.factor);
      r->set_low_freq_factor(c.rope_scaling.low_freq_factor);
      r->set_high_freq_factor(c.rope_scaling.high_freq_factor);
      r->set_original_max_positions(c.rope_scaling.original_max_positions);
    } else {
      m->clear_rope_scaling();
    }
  }
  // seq_len is how long the training windows are; GPT-2 has n_positions learned positions.
  if (gpt && hf->max_positions > 0 && m->seq_len() > hf->max_positions) {
    if (w.seq_len() == 0) {
      m->set_seq_len(static_cast<int32_t>(hf->max_positions));
    } else {
      a.Fail("seq_len", absl::StrCat(m->seq_len(), " exceeds the ", hf->max_positions, " learned positions of ",
                                     m->pretrained(), "/config.json (n_positions)"));
    }
  }
  if (hf->sliding_window > 0 && m->seq_len() > hf->sliding_window) {
    a.Fail("seq_len", absl::StrCat(m->seq_len(), " exceeds the sliding_window ", hf->sliding_window, " of ",
                                   m->pretrained(), "/config.json: attention here is over the whole window"));
  }
  return ToStatus(a.errors());
}

}  // namespace tessera::spec
