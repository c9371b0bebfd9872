#include "formats/model/hf_config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::formats::model {
namespace {

using ::testing::HasSubstr;

// The keys of transformers' GPT2Config / LlamaConfig as save_pretrained writes them (a subset).
constexpr char kGpt2[] = R"({"model_type": "gpt2", "n_layer": 3, "n_embd": 96, "n_head": 4, "vocab_size": 1000,
  "n_positions": 64, "n_ctx": 64, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "n_inner": null,
  "resid_pdrop": 0.1, "tie_word_embeddings": true})";
constexpr char kLlama[] = R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
  "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 160, "vocab_size": 250,
  "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "hidden_act": "silu",
  "tie_word_embeddings": false, "attention_bias": false, "mlp_bias": false, "rope_scaling": null, "head_dim": 8})";

TEST(HfConfigTest, ReadsGpt2) {
  auto c = ParseHfConfig("config.json", kGpt2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->type, HfModelType::kGpt2);
  EXPECT_EQ(c->config.family, ModelFamily::kGpt2);
  EXPECT_EQ(c->config.layers, 3);
  EXPECT_EQ(c->config.hidden, 96);
  EXPECT_EQ(c->config.heads, 4);
  EXPECT_EQ(c->config.vocab, 1000);
  EXPECT_EQ(c->max_positions, 64);
  EXPECT_TRUE(c->config.gelu_tanh);  // gelu_new is the tanh approximation.
  EXPECT_TRUE(c->config.tie_embeddings);
}

TEST(HfConfigTest, ReadsLlamaWithGroupedQueryAttention) {
  auto c = ParseHfConfig("config.json", kLlama);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->config.family, ModelFamily::kLlama);
  EXPECT_EQ(c->config.heads, 8);
  EXPECT_EQ(c->config.KvHeads(), 2);
  EXPECT_EQ(c->config.FfnHidden(), 160);
  EXPECT_EQ(c->config.vocab, 250);
  EXPECT_DOUBLE_EQ(c->config.norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c->config.rope_theta, 500000.0);
  EXPECT_FALSE(c->config.tie_embeddings);
  EXPECT_EQ(c->max_positions, 2048);
}

TEST(HfConfigTest, ReadsLlama3RopeScaling) {
  std::string j = kLlama;
  j.replace(j.find("\"rope_scaling\": null"), 20, R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0,
    "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})");
  auto c = ParseHfConfig("config.json", j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->config.rope_scaling.enabled());
  EXPECT_EQ(c->config.rope_scaling.factor, 8.0);
  EXPECT_EQ(c->config.rope_scaling.original_max_positions, 8192);
  auto back = ParseHfConfig("export", HfConfigJson(c->config, 128, "float32"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->config.rope_scaling == c->config.rope_scaling);
}

TEST(HfConfigTest, Qwen2IsLlamaWithQkvBiases) {
  std::string j = kLlama;
  j.replace(j.find("\"llama\""), 7, "\"qwen2\"");
  const std::string biases = R"(, "attention_bias": false, "mlp_bias": false)";
  j.replace(j.find(biases), biases.size(), "");
  auto c = ParseHfConfig("config.json", j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->type, HfModelType::kQwen2);
  EXPECT_EQ(c->config.family, ModelFamily::kLlama);
  EXPECT_TRUE(c->config.qkv_bias);
  auto back = ParseHfConfig("export", HfConfigJson(c->config, 128, "float32"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->model_type, "qwen2");
  EXPECT_TRUE(back->config.qkv_bias);
}

TEST(HfConfigTest, MistralIsLlamaWithItsSlidingWindow) {
  std::string j = kLlama;
  j.replace(j.find("\"llama\""), 7, "\"mistral\"");
  j.insert(1, R"("sliding_window": 4096, )");
  auto c = ParseHfConfig("config.json", j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->type, HfModelType::kMistral);
  EXPECT_EQ(c->config.family, ModelFamily::kLlama);
  EXPECT_EQ(c->sliding_window, 4096);
}

TEST(HfConfigTest, WhatTesseraDoesNotImplementIsAnErrorNamingTheKey) {
  auto error = [](std::string json, const std::string& key, const std::string& value) {
    const size_t at = json.find("\"" + key + "\"");
    if (at == std::string::npos) {
      json.insert(1, "\"" + key + "\": " + value + ", ");
    } else {
      const size_t colon = json.find(':', at), end = json.find_first_of(",}", colon);
      json.replace(colon + 1, end - colon - 1, " " + value);
    }
    auto c = ParseHfConfig("dir/config.json", json);
    return c.ok() ? std::string("ok") : std::string(c.status().message());
  };
  EXPECT_THAT(error(kLlama, "hidden_act", "\"gelu\""), HasSubstr("dir/config.json: hidden_act: \"gelu\": llama's MLP is SwiGLU"));
  EXPECT_THAT(error(kLlama, "rope_scaling", R"({"rope_type": "yarn", "factor": 8.0})"),
              HasSubstr("rope_scaling: rope_type \"yarn\": only llama3"));
  EXPECT_THAT(error(kLlama, "rope_scaling", R"({"rope_type": "llama3", "factor": 8.0})"),
              HasSubstr("rope_scaling: original_max_position_embeddings: missing"));
  EXPECT_THAT(error(kLlama, "attention_bias", "true"), HasSubstr("attention_bias: true: attention biases"));
  EXPECT_THAT(error(kLlama, "head_dim", "16"), HasSubstr("head_dim: only hidden_size / num_attention_heads = 8"));
  EXPECT_THAT(error(kLlama, "num_attention_heads", "7"), HasSubstr("num_attention_heads: 7 does not divide hidden_size 64"));
  EXPECT_THAT(error(kLlama, "hidden_size", "-64"), HasSubstr("hidden_size: -64 is not a positive integer"));
  EXPECT_THAT(error(kLlama, "vocab_size", "1e99"), HasSubstr("vocab_size: 1e+99 is not a positive integer"));
  EXPECT_THAT(error(kLlama, "model_type", "\"deepseek_v3\""), HasSubstr("model_type: \"deepseek_v3\": tessera reads gpt2, llama"));
  EXPECT_THAT(error(kGpt2, "activation_function", "\"relu\""), HasSubstr("activation_function: \"relu\""));
  EXPECT_THAT(error(kGpt2, "n_inner", "100"), HasSubstr("n_inner: gpt's MLP is 4·n_embd = 384"));
  EXPECT_THAT(error(kGpt2, "tie_word_embeddings", "false"), HasSubstr("tie_word_embeddings: false"));
  EXPECT_THAT(error(kGpt2, "scale_attn_by_inverse_layer_idx", "true"), HasSubstr("scale_attn_by_inverse_layer_idx"));
  EXPECT_THAT(std::string(ParseHfConfig("c.json", R"({"model_type": "gpt2"})").status().message()),
              HasSubstr("c.json: n_layer: missing"));
  EXPECT_THAT(std::string(ParseHfConfig("c.json", "[1, 2").status().message()), HasSubstr("c.json: not a JSON object"));
  EXPECT_THAT(std::string(ReadHfConfig("/nonexistent-dir").status().message()), HasSubstr("cannot read"));
}

TEST(HfConfigTest, MixturesOfExpertsReadBackAsTheSameModel) {
  ModelConfig base;
  base.family = ModelFamily::kLlama;
  base.layers = 3, base.hidden = 64, base.heads = 4, base.kv_heads = 2, base.ffn_hidden = 80, base.vocab = 256;
  base.experts = 4, base.experts_per_token = 2, base.moe_ffn_hidden = 48, base.aux_loss_coef = 0.02;
  ModelConfig mixtral = base, qwen2 = base, qwen3 = base, dense_qwen3 = base;
  mixtral.family = ModelFamily::kMixtral;
  mixtral.moe_ffn_hidden = 80;
  qwen2.qkv_bias = true, qwen2.shared_expert_ffn_hidden = 64, qwen2.norm_topk_prob = false, qwen2.dense_layers = {1};
  qwen3.qk_norm = true, qwen3.moe_every = 2;
  dense_qwen3.qk_norm = true, dense_qwen3.experts = 0;
  for (const auto& [want_type, c] : std::vector<std::pair<std::string, ModelConfig>>{
           {"mixtral", mixtral}, {"qwen2_moe", qwen2}, {"qwen3_moe", qwen3}, {"qwen3", dense_qwen3}}) {
    ASSERT_TRUE(HfExportable(c).ok()) << want_type;
    auto back = ParseHfConfig("export", HfConfigJson(c, 128, "float32"));
    ASSERT_TRUE(back.ok()) << want_type << ": " << back.status();
    const ModelConfig& b = back->config;
    EXPECT_EQ(back->model_type, want_type);
    EXPECT_EQ(b.family, c.family) << want_type;
    EXPECT_EQ(b.experts, c.experts) << want_type;
    EXPECT_EQ(b.qk_norm, c.qk_norm) << want_type;
    EXPECT_EQ(b.qkv_bias, c.qkv_bias) << want_type;
    if (!c.IsMoe()) continue;
    EXPECT_EQ(b.experts_per_token, c.experts_per_token) << want_type;
    EXPECT_EQ(b.MoeFfnHidden(), c.MoeFfnHidden()) << want_type;
    EXPECT_EQ(b.shared_expert_ffn_hidden, c.shared_expert_ffn_hidden) << want_type;
    EXPECT_EQ(b.norm_topk_prob, c.norm_topk_prob) << want_type;
    EXPECT_EQ(b.moe_every, c.moe_every) << want_type;
    EXPECT_EQ(b.dense_layers, c.dense_layers) << want_type;
    EXPECT_EQ(b.aux_loss_coef, c.aux_loss_coef) << want_type;
    for (int i = 0; i < c.layers; ++i) EXPECT_EQ(b.IsMoeLayer(i), c.IsMoeLayer(i)) << want_type << " block " << i;
  }
  // Without output_router_logits transformers leaves the balancing loss out of outputs.loss.
  base.aux_loss_coef = 0;
  auto quiet = ParseHfConfig("export", HfConfigJson(base, 128, "float32"));
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  EXPECT_EQ(quiet->config.aux_loss_coef, 0);
  // What no model_type holds is refused before anything is written.
  ModelConfig both = qwen3;
  both.shared_expert_ffn_hidden = 64;
  EXPECT_THAT(std::string(HfExportable(both).message()), HasSubstr("q/k norms with a shared expert"));
  // MoE keys tessera does not implement, or that contradict each other, name the key.
  auto error = [](const std::string& json) {
    auto c = ParseHfConfig("dir/config.json", json);
    return c.ok() ? std::string("ok") : std::string(c.status().message());
  };
  const std::string moe = R"({"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64,
      "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 256, "num_local_experts": 4)";
  EXPECT_EQ(error(moe + "}"), "ok");
  EXPECT_EQ(ParseHfConfig("c.json", moe + R"(, "router_jitter_noise": 0.1})")->config.router_jitter, 0.1);
  EXPECT_THAT(error(moe + R"(, "router_jitter_noise": 1.5})"), HasSubstr("router_jitter_noise: 1.5 must be below 1"));
  EXPECT_THAT(error(moe + R"(, "num_experts_per_tok": 5})"), HasSubstr("num_experts_per_tok: 5 exceeds the experts 4"));
  EXPECT_THAT(error(moe + R"(, "router_aux_loss_coef": -1})"), HasSubstr("router_aux_loss_coef: -1 is not a finite number >= 0"));
  const std::string qwen = R"({"model_type": "qwen2_moe", "num_hidden_layers": 2, "hidden_size": 64,
      "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 256, "num_experts": 4)";
  EXPECT_THAT(error(qwen + R"(, "mlp_only_layers": [2]})"), HasSubstr("mlp_only_layers: 2 is not an index below 2"));
  EXPECT_THAT(error(qwen + R"(, "decoder_sparse_step": 0})"), HasSubstr("decoder_sparse_step: 0 is not a positive integer"));
}

TEST(HfConfigTest, WrittenConfigReadsBackAsTheSameModel) {
  for (const char* json : {kGpt2, kLlama}) {
    auto c = ParseHfConfig("config.json", json);
    ASSERT_TRUE(c.ok()) << c.status();
    auto back = ParseHfConfig("export", HfConfigJson(c->config, c->max_positions, "float32"));
    ASSERT_TRUE(back.ok()) << back.status();
    const ModelConfig &a = c->config, &b = back->config;
    EXPECT_EQ(a.family, b.family);
    EXPECT_EQ(a.layers, b.layers);
    EXPECT_EQ(a.hidden, b.hidden);
    EXPECT_EQ(a.heads, b.heads);
    EXPECT_EQ(a.KvHeads(), b.KvHeads());
    EXPECT_EQ(a.FfnHidden(), b.FfnHidden());
    EXPECT_EQ(a.vocab, b.vocab);
    EXPECT_EQ(a.norm_eps, b.norm_eps);
    EXPECT_EQ(a.rope_theta, b.rope_theta);
    EXPECT_EQ(a.tie_embeddings, b.tie_embeddings);
    EXPECT_EQ(a.gelu_tanh, b.gelu_tanh);
    EXPECT_EQ(c->max_positions, back->max_positions);
  }
}

}  // namespace
}  // namespace tessera::formats::model
