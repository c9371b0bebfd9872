#include "formats/model/hf_config.h"

#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <vector>
#include <limits>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tessera::formats::model {
namespace {

using Json = nlohmann::json;

// Reads keys of one config.json, recording the first problem (named by file and key).
class Reader {
 public:
  Reader(const std::string& path, const Json& j) : path_(path), j_(j) {}

  absl::Status status() const { return status_; }
  void Fail(const std::string& key, const std::string& why) {
    if (status_.ok()) status_ = absl::InvalidArgumentError(absl::StrCat(path_, ": ", key, ": ", why));
  }
  bool Has(const std::string& key) const { return j_.contains(key) && !j_[key].is_null(); }

  // A positive integer that fits in int (required unless `fallback` > 0).
  int Size(const std::string& key, int fallback = 0) {
    if (!Has(key)) {
      if (fallback <= 0) Fail(key, "missing (a positive integer)");
      return fallback;
    }
    const Json& v = j_[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > std::numeric_limits<int>::max()) {
      Fail(key, absl::StrCat(v.dump(), " is not a positive integer below 2^31"));
      return fallback > 0 ? fallback : 1;
    }
    return static_cast<int>(v.get<int64_t>());
  }
  // The first of `keys` present, as Size.
  int SizeOf(std::initializer_list<const char*> keys, int fallback = 0) {
    for (const char* k : keys) {
      if (Has(k)) return Size(k);
    }
    return Size(*keys.begin(), fallback);
  }
  double Number(const std::string& key, double fallback) {
    if (!Has(key)) return fallback;
    if (!j_[key].is_number() || !(j_[key].get<double>() > 0)) {
      Fail(key, absl::StrCat(j_[key].dump(), " is not a positive number"));
      return fallback;
    }
    return j_[key].get<double>();
  }
  // A finite number >= 0 (0 allowed, unlike Number).
  double NonNegative(const std::string& key, double fallback) {
    if (!Has(key)) return fallback;
    if (!j_[key].is_number() || !(j_[key].get<double>() >= 0) || !std::isfinite(j_[key].get<double>())) {
      Fail(key, absl::StrCat(j_[key].dump(), " is not a finite number >= 0"));
      return fallback;
    }
    return j_[key].get<double>();
  }
  // A list of integers in [0, limit) (absent or null: empty).
  std::vector<int> IndexList(const std::string& key, int limit) {
    std::vector<int> out;
    if (!Has(key)) return out;
    if (!j_[key].is_array()) {
      Fail(key, absl::StrCat(j_[key].dump(), " is not a list"));
      return out;
    }
    for (const Json& v : j_[key]) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= limit) {
        Fail(key, absl::StrCat(v.dump(), " is not an index below ", limit));
        return {};
      }
      out.push_back(static_cast<int>(v.get<int64_t>()));
    }
    return out;
  }
  bool Bool(const std::string& key, bool fallback) {
    if (!Has(key)) return fallback;
    if (!j_[key].is_boolean()) {
      Fail(key, absl::StrCat(j_[key].dump(), " is not true or false"));
      return fallback;
    }
    return j_[key].get<bool>();
  }
  std::string String(const std::string& key, const std::string& fallback) {
    if (!Has(key)) return fallback;
    if (!j_[key].is_string()) {
      Fail(key, absl::StrCat(j_[key].dump(), " is not a string"));
      return fallback;
    }
    return j_[key].get<std::string>();
  }
  // rope_scaling: {"rope_type" (or "type"): "llama3", factor, low_freq_factor, high_freq_factor,
  // original_max_position_embeddings}; other kinds are not implemented.
  void RopeScalingOf(RopeScaling* out) {
    const Json& s = j_["rope_scaling"];
    if (!s.is_object()) return Fail("rope_scaling", absl::StrCat(s.dump(), " is not an object"));
    const std::string kind = s.contains("rope_type") ? s["rope_type"].dump() : s.contains("type") ? s["type"].dump() : "";
    if (kind == "\"default\"") return;
    if (kind != "\"llama3\"") {
      return Fail("rope_scaling", absl::StrCat("rope_type ", kind.empty() ? "missing" : kind,
                                               ": only llama3 (Llama 3.1's) is implemented"));
    }
    Reader r(path_ + ": rope_scaling", s);
    out->factor = r.Number("factor", 0);
    out->low_freq_factor = r.Number("low_freq_factor", 1);
    out->high_freq_factor = r.Number("high_freq_factor", 4);
    out->original_max_positions = r.Size("original_max_position_embeddings");
    if (r.status().ok() && !(out->factor >= 1)) r.Fail("factor", "missing or below 1");
    if (r.status().ok() && !(out->high_freq_factor > out->low_freq_factor)) {
      r.Fail("high_freq_factor", "must exceed low_freq_factor");
    }
    if (!r.status().ok() && status_.ok()) status_ = r.status();
  }

  // `key`, when present, must be `want` (a setting tessera's family fixes).
  void Expect(const std::string& key, bool want, const std::string& why) {
    if (Has(key) && Bool(key, want) != want) Fail(key, absl::StrCat(want ? "false" : "true", ": ", why));
  }

 private:
  std::string path_;
  const Json& j_;
  absl::Status status_;
};

void ReadGpt2(Reader& r, HfModelConfig* out) {
  ModelConfig& c = out->config;
  c.family = ModelFamily::kGpt2;
  c.layers = r.Size("n_layer");
  c.hidden = r.Size("n_embd");
  c.heads = r.Size("n_head");
  c.vocab = r.Size("vocab_size");
  out->max_positions = r.SizeOf({"n_positions", "n_ctx"});
  c.norm_eps = r.Number("layer_norm_epsilon", 1e-5);
  const std::string act = r.String("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") {
    c.gelu_tanh = true;
  } else if (act != "gelu") {
    r.Fail("activation_function", absl::StrCat("\"", act, "\": gpt's MLP is gelu_new (tanh), gelu_pytorch_tanh or gelu"));
  }
  if (r.Has("n_inner") && static_cast<int64_t>(r.Size("n_inner")) != 4 * static_cast<int64_t>(c.hidden)) {
    r.Fail("n_inner", absl::StrCat("gpt's MLP is 4·n_embd = ", 4 * static_cast<int64_t>(c.hidden)));
  }
  r.Expect("tie_word_embeddings", true, "gpt's head is always the token embedding");
  r.Expect("scale_attn_weights", true, "attention scores here are always scaled by 1/sqrt(head_dim)");
  r.Expect("scale_attn_by_inverse_layer_idx", false, "not implemented (scores scaled per layer)");
  c.tie_embeddings = true;
}

void ReadLlama(Reader& r, HfModelConfig* out) {
  ModelConfig& c = out->config;
  c.family = ModelFamily::kLlama;
  c.layers = r.Size("num_hidden_layers");
  c.hidden = r.Size("hidden_size");
  c.heads = r.Size("num_attention_heads");
  c.kv_heads = r.Size("num_key_value_heads", c.heads);
  c.ffn_hidden = r.Size("intermediate_size");
  c.vocab = r.Size("vocab_size");
  if (r.Has("max_position_embeddings")) out->max_positions = r.Size("max_position_embeddings");
  c.norm_eps = r.Number("rms_norm_eps", 1e-6);
  c.rope_theta = r.Number("rope_theta", 1e4);
  c.tie_embeddings = r.Bool("tie_word_embeddings", false);
  if (r.status().ok() && c.hidden % c.heads != 0) {
    r.Fail("num_attention_heads", absl::StrCat(c.heads, " does not divide hidden_size ", c.hidden));
  }
  if (r.Has("head_dim") && r.status().ok() && r.Size("head_dim") != c.hidden / c.heads) {
    r.Fail("head_dim", absl::StrCat("only hidden_size / num_attention_heads = ", c.hidden / c.heads,
                                    " is implemented"));
  }
  const std::string act = r.String("hidden_act", "silu");
  if (act != "silu") r.Fail("hidden_act", absl::StrCat("\"", act, "\": llama's MLP is SwiGLU (silu)"));
  if (out->type == HfModelType::kQwen2 || out->type == HfModelType::kQwen2Moe) {
    // Qwen2's q, k, v projections have biases (Qwen2-MoE: unless qkv_bias false), its output projection none.
    c.qkv_bias = out->type == HfModelType::kQwen2 || r.Bool("qkv_bias", true);
  }
  if (out->type == HfModelType::kQwen2 || out->type == HfModelType::kQwen2Moe || out->type == HfModelType::kQwen3 ||
      out->type == HfModelType::kQwen3Moe) {
    if (r.Bool("use_sliding_window", false) && r.Has("sliding_window")) out->sliding_window = r.Size("sliding_window");
  }
  // Qwen3: RMSNorm over each head's queries and keys.
  c.qk_norm = out->type == HfModelType::kQwen3 || out->type == HfModelType::kQwen3Moe;
  r.Expect("attention_bias", false, "attention biases (q, k, v and output) are not implemented for llama");
  r.Expect("mlp_bias", false, "MLP biases are not implemented for llama");
  if (r.Has("rope_scaling")) r.RopeScalingOf(&c.rope_scaling);
  if ((out->type == HfModelType::kMistral || out->type == HfModelType::kMixtral) && r.Has("sliding_window")) {
    out->sliding_window = r.Size("sliding_window");
  }
}

// The sparse blocks of mixtral, qwen2_moe and qwen3_moe, with transformers' defaults for absent keys.
void ReadMoe(Reader& r, HfModelConfig* out) {
  ModelConfig& c = out->config;
  if (out->type == HfModelType::kMixtral) {
    c.family = ModelFamily::kMixtral;
    c.experts = r.Size("num_local_experts", 8);
    c.experts_per_token = r.Size("num_experts_per_tok", 2);
    c.moe_ffn_hidden = c.ffn_hidden;  // Mixtral's experts are intermediate_size wide.
    c.norm_topk_prob = true;
    c.router_jitter = r.NonNegative("router_jitter_noise", 0);
    if (c.router_jitter >= 1) r.Fail("router_jitter_noise", absl::StrCat(c.router_jitter, " must be below 1"));
  } else {
    const bool qwen2 = out->type == HfModelType::kQwen2Moe;
    c.experts = r.Has("num_experts") && r.NonNegative("num_experts", 0) == 0 ? 0 : r.Size("num_experts", qwen2 ? 60 : 128);
    c.experts_per_token = r.Size("num_experts_per_tok", qwen2 ? 4 : 8);
    c.moe_ffn_hidden = r.Size("moe_intermediate_size", qwen2 ? 1408 : 768);
    // 0: no shared expert (transformers then builds an empty one whose output is 0).
    const char* shared = "shared_expert_intermediate_size";
    c.shared_expert_ffn_hidden = !qwen2 ? 0 : r.Has(shared) && r.NonNegative(shared, 1) == 0 ? 0 : r.Size(shared, 5632);
    c.norm_topk_prob = r.Bool("norm_topk_prob", false);
    c.moe_every = r.Size("decoder_sparse_step", 1);
    c.dense_layers = r.IndexList("mlp_only_layers", c.layers);
  }
  if (r.status().ok() && c.experts > 0 && c.experts_per_token > c.experts) {
    r.Fail("num_experts_per_tok", absl::StrCat(c.experts_per_token, " exceeds the experts ", c.experts));
  }
  // transformers adds the balancing loss to outputs.loss only with output_router_logits.
  const double coef = r.NonNegative("router_aux_loss_coef", 0.001);
  c.aux_loss_coef = r.Bool("output_router_logits", false) ? coef : 0;
}

std::optional<HfModelType> LlamaShapeType(const std::string& model_type) {
  static const std::map<std::string, HfModelType> kTypes = {
      {"llama", HfModelType::kLlama},     {"mistral", HfModelType::kMistral},     {"qwen2", HfModelType::kQwen2},
      {"qwen3", HfModelType::kQwen3},     {"mixtral", HfModelType::kMixtral},     {"qwen2_moe", HfModelType::kQwen2Moe},
      {"qwen3_moe", HfModelType::kQwen3Moe}};
  auto it = kTypes.find(model_type);
  if (it == kTypes.end()) return std::nullopt;
  return it->second;
}

}  // namespace

absl::StatusOr<HfModelConfig> ParseHfConfig(const std::string& path, std::string_view json) {
  Json j = Json::parse(json.begin(), json.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  Reader r(path, j);
  HfModelConfig out;
  out.model_type = r.String("model_type", "");
  if (out.model_type == "gpt2") {
    out.type = HfModelType::kGpt2;
    ReadGpt2(r, &out);
  } else if (const auto llama_shape = LlamaShapeType(out.model_type)) {
    out.type = *llama_shape;
    ReadLlama(r, &out);
    if (out.type == HfModelType::kMixtral || out.type == HfModelType::kQwen2Moe || out.type == HfModelType::kQwen3Moe) {
      ReadMoe(r, &out);
    }
  } else {
    r.Fail("model_type", absl::StrCat(out.model_type.empty() ? "missing" : "\"" + out.model_type + "\"",
                                      ": tessera reads gpt2, llama, mistral, qwen2, qwen3, mixtral, qwen2_moe and qwen3_moe"));
  }
  // A reward model: the family's *ForSequenceClassification of one label (its score head).
  if (j.contains("architectures") && j["architectures"].is_array() && j["architectures"].size() == 1 &&
      j["architectures"][0].is_string() &&
      absl::EndsWith(j["architectures"][0].get<std::string>(), "ForSequenceClassification")) {
    out.config.score_head = true;
    if (j.contains("id2label") && j["id2label"].is_object() && j["id2label"].size() != 1) {
      r.Fail("id2label", absl::StrCat(j["id2label"].size(), " labels: tessera's reward models have one (a score)"));
    }
  }
  if (!r.status().ok()) return r.status();
  return out;
}

absl::StatusOr<HfModelConfig> ReadHfConfig(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read (a transformers model directory has one)"));
  std::stringstream text;
  text << in.rdbuf();
  return ParseHfConfig(path, text.str());
}

HfModelType HfTypeOf(const ModelConfig& c) {
  if (c.family == ModelFamily::kGpt2) return HfModelType::kGpt2;
  if (c.family == ModelFamily::kMixtral) return HfModelType::kMixtral;
  if (c.IsMoe()) return c.qk_norm ? HfModelType::kQwen3Moe : HfModelType::kQwen2Moe;
  if (c.qk_norm) return HfModelType::kQwen3;
  return c.qkv_bias ? HfModelType::kQwen2 : HfModelType::kLlama;
}

absl::Status HfExportable(const ModelConfig& c) {
  const HfModelType type = HfTypeOf(c);
  if ((type == HfModelType::kQwen3 || type == HfModelType::kQwen3Moe) && c.qkv_bias) {
    return absl::FailedPreconditionError("q/k norms with q, k, v biases: no transformers model_type has both");
  }
  if (type == HfModelType::kQwen3Moe && c.shared_expert_ffn_hidden > 0) {
    return absl::FailedPreconditionError("q/k norms with a shared expert: no transformers model_type has both");
  }
  if (type == HfModelType::kMixtral && (c.qkv_bias || c.qk_norm)) {
    return absl::FailedPreconditionError("mixtral has neither q, k, v biases nor q/k norms");
  }
  return absl::OkStatus();
}

std::string HfConfigJson(const ModelConfig& c, int64_t max_positions, const std::string& dtype, int64_t pad_token_id) {
  Json j;
  if (c.family == ModelFamily::kGpt2) {
    j = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"n_layer", c.layers},
         {"n_embd", c.hidden},
         {"n_head", c.heads},
         {"n_inner", nullptr},
         {"vocab_size", c.vocab},
         {"n_positions", max_positions},
         {"n_ctx", max_positions},
         {"layer_norm_epsilon", c.norm_eps},
         {"activation_function", c.gelu_tanh ? "gelu_new" : "gelu"},
         {"resid_pdrop", 0.0},
         {"embd_pdrop", 0.0},
         {"attn_pdrop", 0.0},
         {"scale_attn_weights", true},
         {"tie_word_embeddings", true}};
  } else {
    j = {{"architectures", {"LlamaForCausalLM"}},
         {"model_type", "llama"},
         {"num_hidden_layers", c.layers},
         {"hidden_size", c.hidden},
         {"num_attention_heads", c.heads},
         {"num_key_value_heads", c.KvHeads()},
         {"head_dim", c.HeadDim()},
         {"intermediate_size", c.FfnHidden()},
         {"vocab_size", c.vocab},
         {"max_position_embeddings", max_positions},
         {"rms_norm_eps", c.norm_eps},
         {"rope_theta", c.rope_theta},
         {"rope_scaling", c.rope_scaling.enabled()
                              ? Json{{"rope_type", "llama3"},
                                     {"factor", c.rope_scaling.factor},
                                     {"low_freq_factor", c.rope_scaling.low_freq_factor},
                                     {"high_freq_factor", c.rope_scaling.high_freq_factor},
                                     {"original_max_position_embeddings", c.rope_scaling.original_max_positions}}
                              : Json(nullptr)},
         {"hidden_act", "silu"},
         {"attention_bias", false},
         {"mlp_bias", false},
         {"attention_dropout", 0.0},
         {"tie_word_embeddings", c.tie_embeddings}};
  }
  switch (HfTypeOf(c)) {
    case HfModelType::kQwen2:
      // Qwen2: Llama's keys less the bias flags and head_dim, plus its sliding-window switch (off).
      j["architectures"] = {"Qwen2ForCausalLM"};
      j["model_type"] = "qwen2";
      j.erase("attention_bias");
      j.erase("mlp_bias");
      j.erase("head_dim");
      j["use_sliding_window"] = false;
      break;
    case HfModelType::kQwen3:
      j["architectures"] = {"Qwen3ForCausalLM"};
      j["model_type"] = "qwen3";
      j.erase("mlp_bias");
      j["use_sliding_window"] = false;
      break;
    case HfModelType::kMixtral:
      j["architectures"] = {"MixtralForCausalLM"};
      j["model_type"] = "mixtral";
      j.erase("attention_bias");
      j.erase("mlp_bias");
      j["intermediate_size"] = c.MoeFfnHidden();
      j["num_local_experts"] = c.experts;
      j["num_experts_per_tok"] = c.experts_per_token;
      j["router_jitter_noise"] = c.router_jitter;
      j["sliding_window"] = nullptr;
      break;
    case HfModelType::kQwen2Moe:
    case HfModelType::kQwen3Moe: {
      const bool qwen2 = HfTypeOf(c) == HfModelType::kQwen2Moe;
      j["architectures"] = {qwen2 ? "Qwen2MoeForCausalLM" : "Qwen3MoeForCausalLM"};
      j["model_type"] = qwen2 ? "qwen2_moe" : "qwen3_moe";
      j.erase("mlp_bias");
      if (qwen2) {
        j.erase("attention_bias");
        j["qkv_bias"] = c.qkv_bias;
        j["shared_expert_intermediate_size"] = c.shared_expert_ffn_hidden;
      }
      j["num_experts"] = c.experts;
      j["num_experts_per_tok"] = c.experts_per_token;
      j["moe_intermediate_size"] = c.MoeFfnHidden();
      j["norm_topk_prob"] = c.norm_topk_prob;
      j["decoder_sparse_step"] = c.moe_every;
      j["mlp_only_layers"] = c.dense_layers;
      j["use_sliding_window"] = false;
      break;
    }
    default:
      break;
  }
  if (c.IsMoe()) {
    j["output_router_logits"] = c.aux_loss_coef > 0;
    j["router_aux_loss_coef"] = c.aux_loss_coef > 0 ? c.aux_loss_coef : 0.001;
  }
  if (c.score_head) {
    // A reward model: transformers' *ForSequenceClassification of one label, scored at the last token
    // that is not pad_token_id (null: the last token; transformers then refuses batches of several).
    std::string arch = j["architectures"][0].get<std::string>();
    for (const char* head : {"ForCausalLM", "LMHeadModel"}) {
      if (const size_t at = arch.rfind(head); at != std::string::npos) arch = arch.substr(0, at);
    }
    j["architectures"] = {arch + "ForSequenceClassification"};
    j["id2label"] = {{"0", "LABEL_0"}};
    j["label2id"] = {{"LABEL_0", 0}};
    j["pad_token_id"] = pad_token_id >= 0 ? Json(pad_token_id) : Json(nullptr);
  }
  j["torch_dtype"] = dtype;
  return j.dump(2) + "\n";
}

}  // namespace tessera::formats::model
