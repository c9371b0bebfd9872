#include "formats/model/trainer_state.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera::formats::model {
namespace {

// What Trainer::TrainerStateJson writes for a small Llama with a blend and fp16.
nlohmann::json Written() {
  return nlohmann::json::parse(R"({
    "format": "tessera-checkpoint", "version": 1, "step": 12, "samples_seen": 96,
    "data": {"next_sample": 96, "shuffle": true, "seed": 7,
             "blend": [{"path": "/d/a", "weight": 0.7, "samples_taken": 70},
                       {"path": "/d/b", "weight": 0.3, "samples_taken": 26}]},
    "model": {"family": "llama", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn_hidden": 192,
              "vocab": 300, "seq_len": 32, "norm_eps": 1e-6, "rope_theta": 500000.0, "tie_embeddings": false,
              "activation": "silu", "qkv_bias": true,
              "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_positions": 8192}},
    "mesh": {"sp_mode": "ring", "dp": 2, "tp": 2, "pp": 1, "sp": 1, "order": "tp-dp-pp"},
    "optimizer": {"name": "adamw", "step": 11, "sharded": true, "shards": ["a", "b"]},
    "zero_stage": 1, "precision": "fp16", "loss_scale": {"scale": 1024.0, "good_steps": 5},
    "rng": {"init_seed": 1}})");
}

absl::StatusOr<TrainerState> Parse(const nlohmann::json& j) { return ParseTrainerState(j.dump(), "ckpt/trainer_state.json"); }

TEST(TrainerStateTest, ReadsWhatTheTrainerWrites) {
  auto s = Parse(Written());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->step, 12);
  EXPECT_EQ(s->optimizer_step, 11);
  EXPECT_TRUE(s->optimizer_sharded);
  EXPECT_EQ(s->mesh_tp, 2);
  EXPECT_EQ(s->precision, "fp16");
  ASSERT_TRUE(s->loss_scale.has_value());
  EXPECT_EQ(*s->loss_scale, 1024.0);
  EXPECT_EQ(s->good_steps, 5);
  EXPECT_EQ(s->next_sample, 96);
  EXPECT_EQ(s->blend_samples_taken, (std::vector<int64_t>{70, 26}));
  const ModelConfig& c = s->model;
  EXPECT_EQ(c.family, ModelFamily::kLlama);
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.ffn_hidden, 192);
  EXPECT_EQ(c.vocab, 300);
  EXPECT_EQ(c.seq_len, 32);
  EXPECT_EQ(c.norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.original_max_positions, 8192);
}

TEST(TrainerStateTest, OldGptStateGetsGpt2Defaults) {
  // Written before model families: no family, kv_heads, ffn_hidden, optimizer, data or mesh.
  auto s = Parse(nlohmann::json::parse(
      R"({"step": 3, "model": {"layers": 2, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 32}})"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->model.family, ModelFamily::kGpt2);
  EXPECT_EQ(s->model.KvHeads(), 4);
  EXPECT_EQ(s->model.FfnHidden(), 256);
  EXPECT_EQ(s->optimizer_step, 3);
  EXPECT_FALSE(s->optimizer_sharded);
  EXPECT_EQ(s->mesh_tp, 0);
  EXPECT_EQ(s->next_sample, -1);
  EXPECT_TRUE(s->blend_samples_taken.empty());
  EXPECT_FALSE(s->loss_scale.has_value());
}

// Each damage gives DataLoss naming the file and the field. Before this reader, the type errors
// threw nlohmann::json::type_error out of the rank (abort) instead of an error.
TEST(TrainerStateTest, DamageIsAnErrorNamingTheField) {
  struct Case {
    const char* pointer;  // JSON pointer of the member to set.
    nlohmann::json value;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"/step", "12", "step: is not an integer"},
      {"/step", -1, "step: -1 is not in [0,"},
      {"/step", 1.5, "step: is not an integer"},
      {"/model", 5, "model: is not an object"},
      {"/model/family", "bert", "model.family: \"bert\" is not gpt, llama or mixtral"},
      {"/model/family", 3, "model.family: is not a string"},
      {"/model/hidden", 0, "model.hidden: 0 is not in [1, 16777216]"},
      {"/model/hidden", int64_t{1} << 31, "model.hidden: 2147483648 is not in"},
      {"/model/hidden", 18446744073709551615ull, "model.hidden: is not in"},
      {"/model/heads", 5, "model.heads: 5 does not divide hidden 64"},
      {"/model/kv_heads", 3, "model.kv_heads: 3 does not divide heads 4"},
      {"/model/norm_eps", "small", "model.norm_eps: is not a finite number"},
      {"/model/tie_embeddings", "yes", "model.tie_embeddings: is not true or false"},
      {"/model/activation", nlohmann::json::array(), "model.activation: is not a string"},
      {"/model/rope_scaling", "x", "model.rope_scaling: is not an object"},
      {"/model/rope_scaling/factor", "x", "model.rope_scaling.factor: is not a finite number"},
      {"/optimizer", nlohmann::json::array(), "optimizer: is not an object"},
      {"/optimizer/sharded", 1, "optimizer.sharded: is not true or false"},
      {"/mesh/tp", 0, "mesh.tp: 0 is not in [1, 4096]"},
      {"/loss_scale/good_steps", "5", "loss_scale.good_steps: is not an integer"},
      {"/data/blend", 1, "data.blend: is not an array"},
      {"/data/blend/0", 1, "data.blend[0]: is not an object"},
      {"/data/blend/1/samples_taken", -5, "data.blend[1].samples_taken: -5 is not in"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = Written();
    j[nlohmann::json::json_pointer(c.pointer)] = c.value;
    auto s = Parse(j);
    ASSERT_FALSE(s.ok()) << c.pointer;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << c.pointer;
    EXPECT_NE(std::string(s.status().message()).find(std::string("ckpt/trainer_state.json: ") + c.expected),
              std::string::npos)
        << c.pointer << ": " << s.status();
  }
  nlohmann::json no_layers = Written();
  no_layers["model"].erase("layers");
  EXPECT_NE(std::string(Parse(no_layers).status().message()).find("model.layers: is missing"), std::string::npos);
  nlohmann::json no_model = Written();
  no_model.erase("model");
  EXPECT_NE(std::string(Parse(no_model).status().message()).find("model: is missing"), std::string::npos);
}

TEST(TrainerStateTest, NotJsonOrTooLarge) {
  for (const std::string text : {"", "{", "[1, 2]", "5", "null", "{\"step\": 1,}"}) {
    auto s = ParseTrainerState(text, "f");
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << text;
  }
  const std::string huge(static_cast<size_t>(kMaxTrainerStateBytes) + 1, ' ');
  auto s = ParseTrainerState(huge, "f");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("more than a trainer state has"), std::string::npos);
}

}  // namespace
}  // namespace tessera::formats::model
