// OpenHfWeights on hand-written model directories: name mapping, Conv1D transposes, positions cut to
// seq_len, and every way a directory can be wrong. (Files written by transformers itself are read in
// tests/python/hf_import_test.py.)
#include "parallel/models/hf_weights.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>

#include "formats/model/family.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "parallel/checkpoint/tensor_convert.h"

namespace tessera::parallel {

using formats::model::FamilyOf;
using formats::model::FamilySpec;
using formats::model::ModelPart;
using formats::model::ParamSpec;
using formats::model::ParamSpecs1D;

namespace {

using ::testing::HasSubstr;

ModelConfig Gpt2() {
  ModelConfig c;
  c.layers = 1;
  c.hidden = 8;
  c.heads = 2;
  c.vocab = 16;
  c.seq_len = 4;
  return c;
}

ModelConfig Llama() {
  ModelConfig c = Gpt2();
  c.family = ModelFamily::kLlama;
  c.kv_heads = 1;
  c.ffn_hidden = 12;
  c.tie_embeddings = false;
  return c;
}

// transformers' tensors of a model of `c`: its names and layouts (GPT-2: Conv1D [in, out], 6 learned
// positions, causal-mask buffers), values numbered so that a mix-up shows.
std::map<std::string, at::Tensor> HfTensors(const ModelConfig& c) {
  const FamilySpec& f = FamilyOf(c.family);
  std::map<std::string, at::Tensor> out;
  double k = 0;
  for (const ParamSpec& p : ParamSpecs1D(c, ModelPart::Whole(c.layers), 1)) {
    std::vector<int64_t> shape = p.shape;
    if (f.hf_conv1d && p.layer >= 0 && shape.size() == 2) std::swap(shape[0], shape[1]);
    if (p.name == "wpe.weight") shape[0] = 6;
    at::Tensor t = at::arange(k, k + at::ones(shape).numel(), at::kFloat).reshape(shape);
    k += t.numel();
    out[(p.name == "lm_head.weight" ? "" : f.hf_prefix) + p.name] = t;
  }
  if (c.family == ModelFamily::kGpt2) out["transformer.h.0.attn.bias"] = at::ones({1, 1, 6, 6});
  return out;
}

std::string Dir(const std::string& name) {
  const std::string d = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

TEST(HfWeightsTest, MapsGpt2NamesTransposesConv1DAndCutsPositions) {
  const ModelConfig c = Gpt2();
  const std::string dir = Dir("gpt2");
  auto hf = HfTensors(c);
  ASSERT_TRUE(SaveTensors(dir + "/model.safetensors", hf).ok());
  auto w = OpenHfWeights(dir, c);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->tensors.size(), ParamSpecs1D(c, ModelPart::Whole(1), 1).size());
  EXPECT_TRUE(at::equal(w->tensors.at("h.0.attn.c_attn.weight"), hf.at("transformer.h.0.attn.c_attn.weight").t()));
  EXPECT_TRUE(at::equal(w->tensors.at("h.0.mlp.c_proj.weight"), hf.at("transformer.h.0.mlp.c_proj.weight").t()));
  EXPECT_TRUE(at::equal(w->tensors.at("h.0.ln_1.weight"), hf.at("transformer.h.0.ln_1.weight")));
  EXPECT_TRUE(at::equal(w->tensors.at("wpe.weight"), hf.at("transformer.wpe.weight").narrow(0, 0, 4)));
}

TEST(HfWeightsTest, ReadsShardsNamedByTheIndexInTheirDtype) {
  const ModelConfig c = Llama();
  const std::string dir = Dir("llama");
  auto hf = HfTensors(c);
  std::map<std::string, at::Tensor> a, b;
  std::string map;
  for (const auto& [name, t] : hf) {
    const bool first = name.find("layers.0.mlp") == std::string::npos;
    (first ? a : b)[name] = t.to(at::kBFloat16);
    map += (map.empty() ? "" : ",") + std::string("\"") + name + "\": \"" + (first ? "a" : "b") + ".safetensors\"";
  }
  ASSERT_TRUE(SaveTensors(dir + "/a.safetensors", a).ok());
  ASSERT_TRUE(SaveTensors(dir + "/b.safetensors", b).ok());
  std::ofstream(dir + "/model.safetensors.index.json") << "{\"metadata\": {}, \"weight_map\": {" << map << "}}";
  auto w = OpenHfWeights(dir, c);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->files.size(), 2u);
  const at::Tensor& up = w->tensors.at("layers.0.mlp.up_proj.weight");
  EXPECT_EQ(up.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(up, b.at("model.layers.0.mlp.up_proj.weight")));
  EXPECT_TRUE(at::equal(w->tensors.at("lm_head.weight"), a.at("lm_head.weight")));
}

// A Mixtral: experts under transformers' names; a file whose experts do not match config.json (a
// conversion gone wrong: more experts, an extra or a missing expert tensor) is refused naming the
// tensor — never a model with experts silently dropped or left at their initial values.
TEST(HfWeightsTest, MixtureOfExpertsTensorsAreCheckedByName) {
  ModelConfig c = Llama();
  c.family = ModelFamily::kMixtral;
  c.experts = 2, c.experts_per_token = 1;
  const std::string dir = Dir("mixtral");
  auto hf = HfTensors(c);
  ASSERT_TRUE(hf.count("model.layers.0.block_sparse_moe.experts.1.w3.weight"));
  ASSERT_TRUE(SaveTensors(dir + "/model.safetensors", hf).ok());
  auto w = OpenHfWeights(dir, c);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(at::equal(w->tensors.at("layers.0.block_sparse_moe.experts.1.w2.weight"),
                        hf.at("model.layers.0.block_sparse_moe.experts.1.w2.weight")));
  // config.json with fewer experts than the file: the router's shape says so first.
  ModelConfig one = c;
  one.experts = 1;
  EXPECT_THAT(std::string(OpenHfWeights(dir, one).status().message()),
              HasSubstr("block_sparse_moe.gate.weight has shape [2, 8], the model of config.json and the spec needs [1, 8]"));
  // An expert tensor beyond the config's experts, or one missing: named.
  auto extra = hf;
  extra["model.layers.0.block_sparse_moe.experts.2.w1.weight"] = hf.at("model.layers.0.block_sparse_moe.experts.1.w1.weight");
  const std::string extra_dir = Dir("mixtral_extra");
  ASSERT_TRUE(SaveTensors(extra_dir + "/model.safetensors", extra).ok());
  EXPECT_THAT(std::string(OpenHfWeights(extra_dir, c).status().message()),
              HasSubstr("model.layers.0.block_sparse_moe.experts.2.w1.weight is not a parameter of a mixtral model"));
  auto missing = hf;
  missing.erase("model.layers.0.block_sparse_moe.experts.1.w3.weight");
  const std::string missing_dir = Dir("mixtral_missing");
  ASSERT_TRUE(SaveTensors(missing_dir + "/model.safetensors", missing).ok());
  EXPECT_THAT(std::string(OpenHfWeights(missing_dir, c).status().message()),
              HasSubstr("tensor model.layers.0.block_sparse_moe.experts.1.w3.weight is missing"));
}

TEST(HfWeightsTest, EveryWrongDirectoryIsANamedError) {
  const ModelConfig c = Llama();
  auto error = [&](const std::string& name, std::map<std::string, at::Tensor> tensors) {
    const std::string dir = Dir(name);
    EXPECT_TRUE(SaveTensors(dir + "/model.safetensors", tensors).ok());
    auto w = OpenHfWeights(dir, c);
    return w.ok() ? std::string("ok") : std::string(w.status().message());
  };
  auto hf = HfTensors(c);
  auto missing = hf;
  missing.erase("model.layers.0.self_attn.k_proj.weight");
  EXPECT_THAT(error("missing", missing), HasSubstr("tensor model.layers.0.self_attn.k_proj.weight is missing"));
  auto extra = hf;
  extra["model.layers.0.self_attn.q_proj.bias"] = at::zeros({8});
  EXPECT_THAT(error("extra", extra),
              HasSubstr("model.layers.0.self_attn.q_proj.bias is not a parameter of a llama model of this config"));
  auto shape = hf;
  shape["model.norm.weight"] = at::ones({9});
  EXPECT_THAT(error("shape", shape), HasSubstr("model.norm.weight has shape [9], the model of config.json and the spec needs [8]"));
  auto ints = hf;
  ints["model.norm.weight"] = at::ones({8}, at::kLong);
  EXPECT_THAT(error("ints", ints), HasSubstr("model.norm.weight: dtype I64 is not a floating-point weight"));

  const std::string none = Dir("none");
  EXPECT_THAT(std::string(OpenHfWeights(none, c).status().message()),
              HasSubstr("has neither model.safetensors nor model.safetensors.index.json"));
  const std::string escape = Dir("escape");
  std::ofstream(escape + "/model.safetensors.index.json") << R"({"weight_map": {"model.norm.weight": "../x.safetensors"}})";
  EXPECT_THAT(std::string(OpenHfWeights(escape, c).status().message()),
              HasSubstr("weight_map.model.norm.weight: \"../x.safetensors\" is not a file name in"));
  const std::string wrong = Dir("wrong");
  ASSERT_TRUE(SaveTensors(wrong + "/a.safetensors", {{"x", at::ones({1})}}).ok());
  std::ofstream(wrong + "/model.safetensors.index.json") << R"({"weight_map": {"model.norm.weight": "a.safetensors"}})";
  EXPECT_THAT(std::string(OpenHfWeights(wrong, c).status().message()), HasSubstr("does not hold this tensor"));
  std::ofstream(wrong + "/model.safetensors.index.json") << R"([1, 2])";
  EXPECT_THAT(std::string(OpenHfWeights(wrong, c).status().message()), HasSubstr("not a JSON object with a weight_map"));
}

}  // namespace
}  // namespace tessera::parallel
