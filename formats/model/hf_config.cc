#include "formats/model/hf_config.h"

#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tessera::parallel {
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
  if (out->type == HfModelType::kQwen2) {
    c.qkv_bias = true;  // Qwen2's q, k, v projections always have biases, its output projection none.
    if (r.Bool("use_sliding_window", false) && r.Has("sliding_window")) out->sliding_window = r.Size("sliding_window");
  }
  r.Expect("attention_bias", false, "attention biases (q, k, v and output) are not implemented for llama");
  r.Expect("mlp_bias", false, "MLP biases are not implemented for llama");
  if (r.Has("rope_scaling")) r.RopeScalingOf(&c.rope_scaling);
  if (out->type == HfModelType::kMistral && r.Has("sliding_window")) out->sliding_window = r.Size("sliding_window");
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
  } else if (out.model_type == "llama" || out.model_type == "mistral" || out.model_type == "qwen2") {
    out.type = out.model_type == "llama"     ? HfModelType::kLlama
               : out.model_type == "mistral" ? HfModelType::kMistral
                                             : HfModelType::kQwen2;
    ReadLlama(r, &out);
  } else {
    r.Fail("model_type", absl::StrCat(out.model_type.empty() ? "missing" : "\"" + out.model_type + "\"",
                                      ": tessera reads gpt2, llama, mistral and qwen2"));
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

std::string HfConfigJson(const ModelConfig& c, int64_t max_positions, const std::string& dtype) {
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
  if (c.family == ModelFamily::kLlama && c.qkv_bias) {
    // Qwen2: Llama's keys less the bias flags and head_dim, plus its sliding-window switch (off).
    j["architectures"] = {"Qwen2ForCausalLM"};
    j["model_type"] = "qwen2";
    j.erase("attention_bias");
    j.erase("mlp_bias");
    j.erase("head_dim");
    j["use_sliding_window"] = false;
  }
  j["torch_dtype"] = dtype;
  return j.dump(2) + "\n";
}

}  // namespace tessera::parallel
