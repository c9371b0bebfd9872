#include "formats/model/trainer_state.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tessera::formats::model {
namespace {

using Json = nlohmann::json;

// Typed reads of one JSON object's members; the first problem is kept (later reads are no-ops).
class Fields {
 public:
  Fields(const Json& object, std::string prefix, const std::string& where, absl::Status* error)
      : object_(object), prefix_(std::move(prefix)), where_(where), error_(error) {}

  bool Has(const char* key) const { return object_.is_object() && object_.contains(key) && !object_[key].is_null(); }

  // An integer in [lo, hi]; `fallback` when absent (nullopt: required).
  int64_t Int(const char* key, int64_t lo, int64_t hi, std::optional<int64_t> fallback) {
    if (!Has(key)) return Missing(key, fallback.value_or(0), fallback.has_value());
    const Json& v = object_[key];
    if (!v.is_number_integer()) return Fail(key, "is not an integer"), 0;
    // Unsigned values above INT64_MAX are out of every range here.
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Fail(key, absl::StrCat("is not in [", lo, ", ", hi, "]")), 0;
    }
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) return Fail(key, absl::StrCat(x, " is not in [", lo, ", ", hi, "]")), 0;
    return x;
  }
  double Number(const char* key, double fallback) {
    if (!Has(key)) return fallback;
    const Json& v = object_[key];
    if (!v.is_number() || !std::isfinite(v.get<double>())) return Fail(key, "is not a finite number"), fallback;
    return v.get<double>();
  }
  bool Bool(const char* key, bool fallback) {
    if (!Has(key)) return fallback;
    if (!object_[key].is_boolean()) return Fail(key, "is not true or false"), fallback;
    return object_[key].get<bool>();
  }
  std::string String(const char* key, const std::string& fallback) {
    if (!Has(key)) return fallback;
    if (!object_[key].is_string()) return Fail(key, "is not a string"), fallback;
    return object_[key].get<std::string>();
  }
  // The member `key` if it is an object (absent: nullptr; another type: an error).
  const Json* Object(const char* key, bool required) {
    if (!Has(key)) {
      if (required) Fail(key, "is missing");
      return nullptr;
    }
    if (!object_[key].is_object()) return Fail(key, "is not an object"), nullptr;
    return &object_[key];
  }
  const Json* Array(const char* key) {
    if (!Has(key)) return nullptr;
    if (!object_[key].is_array()) return Fail(key, "is not an array"), nullptr;
    return &object_[key];
  }
  void Fail(const std::string& key, const std::string& problem) {
    if (error_->ok()) *error_ = absl::DataLossError(absl::StrCat(where_, ": ", prefix_, key, ": ", problem));
  }

 private:
  int64_t Missing(const char* key, int64_t fallback, bool optional) {
    if (!optional) Fail(key, "is missing");
    return fallback;
  }

  const Json& object_;
  const std::string prefix_;
  const std::string& where_;
  absl::Status* error_;
};

}  // namespace

absl::StatusOr<TrainerState> ParseTrainerState(std::string_view text, const std::string& where) {
  if (static_cast<int64_t>(text.size()) > kMaxTrainerStateBytes) {
    return absl::DataLossError(absl::StrCat(where, ": ", text.size(), " bytes, more than a trainer state has (",
                                            kMaxTrainerStateBytes, ")"));
  }
  const Json root = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::DataLossError(absl::StrCat(where, ": not a JSON object"));
  }
  absl::Status error;
  TrainerState s;
  Fields top(root, "", where, &error);
  constexpr int64_t kMaxSteps = int64_t{1} << 40;
  s.step = top.Int("step", 0, kMaxSteps, std::nullopt);
  s.precision = top.String("precision", "");

  if (const Json* m = top.Object("model", /*required=*/true)) {
    Fields model(*m, "model.", where, &error);
    const std::string family = model.String("family", "gpt");  // Absent before families existed.
    if (family != "gpt" && family != "llama" && family != "mixtral") {
      model.Fail("family", "\"" + family + "\" is not gpt, llama or mixtral");
    }
    ModelConfig& c = s.model;
    c.family = family == "llama" ? ModelFamily::kLlama : family == "mixtral" ? ModelFamily::kMixtral : ModelFamily::kGpt2;
    c.layers = static_cast<int>(model.Int("layers", 1, kMaxTrainerStateSize, std::nullopt));
    c.hidden = static_cast<int>(model.Int("hidden", 1, kMaxTrainerStateSize, std::nullopt));
    c.heads = static_cast<int>(model.Int("heads", 1, kMaxTrainerStateSize, std::nullopt));
    c.vocab = static_cast<int>(model.Int("vocab", 1, kMaxTrainerStateSize, std::nullopt));
    c.seq_len = static_cast<int>(model.Int("seq_len", 1, kMaxTrainerStateSize, std::nullopt));
    c.kv_heads = static_cast<int>(model.Int("kv_heads", 1, kMaxTrainerStateSize, 0));
    c.ffn_hidden = static_cast<int>(model.Int("ffn_hidden", 1, kMaxTrainerStateSize, 0));
    if (error.ok() && c.hidden % c.heads != 0) {
      model.Fail("heads", absl::StrCat(c.heads, " does not divide hidden ", c.hidden));
    }
    if (error.ok() && c.kv_heads > 0 && c.heads % c.kv_heads != 0) {
      model.Fail("kv_heads", absl::StrCat(c.kv_heads, " does not divide heads ", c.heads));
    }
    c.norm_eps = model.Number("norm_eps", 1e-5);
    c.rope_theta = model.Number("rope_theta", 1e4);
    c.tie_embeddings = c.family == ModelFamily::kGpt2 || model.Bool("tie_embeddings", false);
    c.gelu_tanh = model.String("activation", "gelu") == "gelu_tanh";
    c.qkv_bias = model.Bool("qkv_bias", false);
    c.qk_norm = model.Bool("qk_norm", false);
    // The head (absent: older checkpoints, an LM head): "lm" or a reward model's "score".
    if (const std::string head = model.String("head", "lm"); head == "score") {
      c.score_head = true;
    } else if (head != "lm") {
      model.Fail("head", absl::StrCat("\"", head.substr(0, 32), "\" is neither lm nor score"));
    }
    // Mixture of Experts (absent: a dense model).
    c.experts = static_cast<int>(model.Int("experts", 0, kMaxTrainerStateSize, 0));
    c.experts_per_token = static_cast<int>(model.Int("experts_per_token", 0, kMaxTrainerStateSize, 0));
    c.moe_ffn_hidden = static_cast<int>(model.Int("moe_ffn_hidden", 0, kMaxTrainerStateSize, 0));
    c.shared_expert_ffn_hidden = static_cast<int>(model.Int("shared_expert_ffn_hidden", 0, kMaxTrainerStateSize, 0));
    c.norm_topk_prob = model.Bool("norm_topk_prob", true);
    c.moe_every = static_cast<int>(model.Int("moe_every", 1, kMaxTrainerStateSize, 1));
    c.capacity_factor = model.Number("capacity_factor", 0.0);
    c.router_bias_rate = model.Number("router_bias_rate", 0.0);
    c.router_jitter = model.Number("router_jitter", 0.0);
    if (c.capacity_factor < 0) model.Fail("capacity_factor", "is negative");
    if (error.ok() && c.experts > 0 && (c.experts_per_token < 1 || c.experts_per_token > c.experts)) {
      model.Fail("experts_per_token", absl::StrCat(c.experts_per_token, " is not between 1 and experts ", c.experts));
    }
    if (const Json* d = model.Array("dense_layers")) {
      for (const Json& layer : *d) {
        if (!layer.is_number_integer() || layer.get<int64_t>() < 0 || layer.get<int64_t>() >= c.layers) {
          model.Fail("dense_layers", absl::StrCat(layer.dump(), " is not a block index below layers ", c.layers));
          break;
        }
        c.dense_layers.push_back(layer.get<int>());
      }
    }
    if (const Json* l = model.Object("lora", /*required=*/false)) {
      Fields lora(*l, "model.lora.", where, &error);
      c.lora.rank = static_cast<int>(lora.Int("rank", 1, 4096, std::nullopt));
      c.lora.alpha = lora.Number("alpha", 0.0);
      if (!(c.lora.alpha > 0)) lora.Fail("alpha", "must be positive");
      if (const Json* t = lora.Array("targets")) {
        for (const Json& target : *t) {
          if (!target.is_string()) {
            lora.Fail("targets", "must hold module names");
            break;
          }
          c.lora.targets.push_back(target.get<std::string>());
        }
      }
      c.lora.dropout = lora.Number("dropout", 0.0);  // Older checkpoints: 0.
      if (!(c.lora.dropout >= 0 && c.lora.dropout < 1)) lora.Fail("dropout", "must be in [0, 1)");
      s.lora_base = lora.String("base", "");
    }
    if (const Json* r = model.Object("rope_scaling", /*required=*/false)) {
      Fields rope(*r, "model.rope_scaling.", where, &error);
      c.rope_scaling.factor = rope.Number("factor", 0.0);
      c.rope_scaling.low_freq_factor = rope.Number("low_freq_factor", 1.0);
      c.rope_scaling.high_freq_factor = rope.Number("high_freq_factor", 4.0);
      c.rope_scaling.original_max_positions =
          static_cast<int>(rope.Int("original_max_positions", 1, kMaxTrainerStateSize, 8192));
    }
  }
  // Loss-free balancing's per-expert biases: one list per block, each empty or of model.experts.
  if (const Json* b = top.Array("router_bias"); b != nullptr && error.ok()) {
    if (static_cast<int64_t>(b->size()) != s.model.layers) top.Fail("router_bias", "needs one list per block");
    for (const Json& row : *b) {
      std::vector<double> values;
      if (!row.is_array() || (!row.empty() && static_cast<int64_t>(row.size()) != s.model.experts)) {
        top.Fail("router_bias", "a block's list is not empty or one number per expert");
        break;
      }
      for (const Json& v : row) {
        if (!v.is_number() || !std::isfinite(v.get<double>())) {
          top.Fail("router_bias", "holds something that is not a finite number");
          break;
        }
        values.push_back(v.get<double>());
      }
      s.router_bias.push_back(std::move(values));
    }
  }
  s.optimizer_step = s.step;
  if (const Json* o = top.Object("optimizer", /*required=*/false)) {
    Fields optimizer(*o, "optimizer.", where, &error);
    s.optimizer_step = optimizer.Int("step", 0, kMaxSteps, s.step);
    s.optimizer_sharded = optimizer.Bool("sharded", false);
  }
  if (const Json* m = top.Object("mesh", /*required=*/false)) {
    Fields mesh(*m, "mesh.", where, &error);
    s.mesh_tp = static_cast<int>(mesh.Int("tp", 1, 4096, 0));
  }
  if (const Json* l = top.Object("loss_scale", /*required=*/false)) {
    Fields scale(*l, "loss_scale.", where, &error);
    if (scale.Has("scale")) s.loss_scale = scale.Number("scale", 0.0);
    s.good_steps = scale.Int("good_steps", 0, kMaxSteps, 0);
  }
  if (const Json* d = top.Object("data", /*required=*/false)) {
    Fields data(*d, "data.", where, &error);
    s.next_sample = data.Int("next_sample", 0, std::numeric_limits<int64_t>::max(), -1);
    if (const Json* blend = data.Array("blend")) {
      for (size_t i = 0; i < blend->size() && error.ok(); ++i) {
        const std::string name = absl::StrCat("data.blend[", i, "].");
        Fields source((*blend)[i], name, where, &error);
        if (!(*blend)[i].is_object()) {
          data.Fail(absl::StrCat("blend[", i, "]"), "is not an object");
          break;
        }
        s.blend_samples_taken.push_back(source.Int("samples_taken", 0, std::numeric_limits<int64_t>::max(), -1));
      }
    }
  }
  if (!error.ok()) return error;
  return s;
}

absl::StatusOr<TrainerState> ReadTrainerState(const std::string& checkpoint) {
  const std::string path = checkpoint + "/trainer_state.json";
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::DataLossError(absl::StrCat(path, ": missing or unreadable"));
  // The file's size, capped one byte past the limit (ParseTrainerState refuses that), so a huge or
  // growing file never costs more than the limit.
  const int64_t size = std::min<int64_t>(static_cast<int64_t>(in.tellg()), kMaxTrainerStateBytes + 1);
  if (size < 0) return absl::DataLossError(absl::StrCat(path, ": unreadable"));
  std::string text(static_cast<size_t>(size), '\0');
  in.seekg(0);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return ParseTrainerState(text, path);
}

}  // namespace tessera::formats::model
