// The family specs as the decoder builds them: each family's parameter names and count, the
// planner's parameter formulas (ModelConfig) against the tensors really made, and the pipeline parts
// of a tied and an untied head. SFT's shortcuts in Loss give the whole computation's loss and gradients.
#include "parallel/models/decoder.h"

#include <cmath>
#include <memory>

#include <ATen/ATen.h>

#include "gtest/gtest.h"
#include "parallel/comm/self_communicator.h"

namespace tessera::parallel {

using formats::model::FamilyName;
using formats::model::ModelPart;

namespace {

ModelConfig Config(ModelFamily family) {
  ModelConfig c;
  c.layers = 3;
  c.hidden = 64;
  c.heads = 4;
  c.vocab = 100;
  c.seq_len = 16;
  c.family = family;
  if (family == ModelFamily::kLlama) c.kv_heads = 2, c.ffn_hidden = 160, c.tie_embeddings = false;
  return c;
}

std::shared_ptr<Communicator> Self() { return std::make_shared<SelfCommunicator>(0, "tp[0]"); }

TEST(DecoderTest, ParameterFormulasCountTheTensorsMade) {
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    const ModelConfig c = Config(family);
    Decoder model(c, Self(), /*seed=*/1, c10::Device(c10::kCPU));
    EXPECT_EQ(static_cast<double>(model.num_parameters()), c.Parameters()) << FamilyName(family);
  }
}

TEST(DecoderTest, MixtureOfExpertsParametersAreCountedAndNamedAsTransformers) {
  ModelConfig qwen = Config(ModelFamily::kLlama);
  qwen.experts = 4, qwen.experts_per_token = 2, qwen.moe_ffn_hidden = 48, qwen.shared_expert_ffn_hidden = 32;
  qwen.dense_layers = {1}, qwen.qk_norm = true;
  ModelConfig mixtral = Config(ModelFamily::kMixtral);
  mixtral.kv_heads = 2, mixtral.ffn_hidden = 96, mixtral.tie_embeddings = false;
  mixtral.experts = 4, mixtral.experts_per_token = 2;
  for (const ModelConfig& c : {qwen, mixtral}) {
    Decoder model(c, Self(), 1, c10::Device(c10::kCPU));
    EXPECT_EQ(static_cast<double>(model.num_parameters()), c.Parameters()) << FamilyName(c.family);
    // Active: two of four experts per token in each sparse block.
    const double experts = 4.0 * 3 * c.hidden * c.MoeFfnHidden() * c.MoeLayers();
    EXPECT_DOUBLE_EQ(c.Parameters() - c.Parameters(/*active=*/true), experts / 2) << FamilyName(c.family);
  }
  Decoder q(qwen, Self(), 1, c10::Device(c10::kCPU));
  for (const char* name : {"layers.0.mlp.gate.weight", "layers.0.mlp.experts.3.gate_proj.weight",
                           "layers.2.mlp.experts.0.down_proj.weight", "layers.0.mlp.shared_expert.up_proj.weight",
                           "layers.2.mlp.shared_expert_gate.weight", "layers.1.mlp.gate_proj.weight",
                           "layers.1.self_attn.q_norm.weight", "layers.1.self_attn.k_norm.weight"}) {
    EXPECT_TRUE(q.holds(name)) << name;
  }
  EXPECT_FALSE(q.holds("layers.1.mlp.gate.weight")) << "block 1 is dense";
  Decoder m(mixtral, Self(), 1, c10::Device(c10::kCPU));
  for (const char* name : {"layers.0.block_sparse_moe.gate.weight", "layers.2.block_sparse_moe.experts.3.w1.weight",
                           "layers.1.block_sparse_moe.experts.0.w2.weight", "layers.1.block_sparse_moe.experts.2.w3.weight"}) {
    EXPECT_TRUE(m.holds(name)) << name;
  }
}

TEST(DecoderTest, LlamaNamesAreTransformersNamesAndItsHeadIsUntied) {
  const ModelConfig c = Config(ModelFamily::kLlama);
  Decoder model(c, Self(), 1, c10::Device(c10::kCPU));
  EXPECT_EQ(model.params().size(), static_cast<size_t>(1 + 9 * c.layers + 2));
  for (const char* name : {"embed_tokens.weight", "layers.2.input_layernorm.weight", "layers.0.self_attn.q_proj.weight",
                           "layers.1.self_attn.k_proj.weight", "layers.1.self_attn.v_proj.weight",
                           "layers.1.self_attn.o_proj.weight", "layers.0.post_attention_layernorm.weight",
                           "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight",
                           "layers.0.mlp.down_proj.weight", "norm.weight", "lm_head.weight"}) {
    EXPECT_TRUE(model.holds(name)) << name;
  }
  EXPECT_EQ(model.tied_embedding(), "");
  // Key/value projections have kv_heads·head_dim rows.
  for (const Param& p : model.params()) {
    if (p.name == "layers.0.self_attn.k_proj.weight") {
      EXPECT_EQ(p.full_shape, (std::vector<int64_t>{32, 64}));
    }
  }
  // A pipeline's last stage holds the head, not the embedding; GPT-2's holds the tied embedding.
  ModelPart last;
  last.layers = {2};
  last.embedding = false;
  Decoder tail(c, last, Self(), 1, c10::Device(c10::kCPU));
  EXPECT_TRUE(tail.holds("lm_head.weight"));
  EXPECT_FALSE(tail.holds("embed_tokens.weight"));
  Decoder gpt_tail(Config(ModelFamily::kGpt2), last, Self(), 1, c10::Device(c10::kCPU));
  EXPECT_TRUE(gpt_tail.holds("wte.weight"));
  EXPECT_EQ(gpt_tail.tied_embedding(), "wte.weight");
  // Units: the non-block parameters, then one per held block.
  EXPECT_EQ(tail.Units().size(), 2u);
  EXPECT_EQ(tail.Units()[1].size(), 9u);
}

TEST(DecoderTest, TiedLlamaUsesItsEmbeddingAsTheHead) {
  ModelConfig c = Config(ModelFamily::kLlama);
  c.tie_embeddings = true;
  Decoder model(c, Self(), 1, c10::Device(c10::kCPU));
  EXPECT_FALSE(model.holds("lm_head.weight"));
  EXPECT_EQ(model.tied_embedding(), "embed_tokens.weight");
  at::Tensor tokens = at::arange(16, at::kLong).remainder(c.vocab).view({2, 8});
  at::Tensor loss = model.Loss(tokens, tokens);
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
}

TEST(DecoderTest, SftLossLeavesOutOnlyWhatReachesNoLoss) {
  // Masked targets (−k−1: token k, untrained): Loss runs the last block's MLP and the head on the
  // trained rows only and drops the positions after the batch's last trained target; the loss and
  // every gradient equal the whole computation's (Head(Blocks(Embed)) over every position).
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    const ModelConfig c = Config(family);
    Decoder model(c, Self(), /*seed=*/3, c10::Device(c10::kCPU));
    model.set_masked_targets(true);
    model.set_target_weight(2.5);
    at::Tensor tokens = at::randint(0, c.vocab, {2, 16}, at::TensorOptions().dtype(at::kLong));
    at::Tensor targets = at::randint(0, c.vocab, {2, 16}, at::TensorOptions().dtype(at::kLong));
    // Untrained: sample 0's first 5 and last 6 targets, sample 1's last 4 (so positions 12.. go).
    targets.index_put_({0, at::indexing::Slice(0, 5)}, -targets.index({0, at::indexing::Slice(0, 5)}) - 1);
    targets.index_put_({0, at::indexing::Slice(10, 16)}, -targets.index({0, at::indexing::Slice(10, 16)}) - 1);
    targets.index_put_({1, at::indexing::Slice(12, 16)}, -targets.index({1, at::indexing::Slice(12, 16)}) - 1);
    auto grads = [&](at::Tensor loss) {
      for (const Param& p : model.params()) p.value.mutable_grad() = at::Tensor();
      loss.backward();
      std::vector<at::Tensor> out;
      for (const Param& p : model.params()) out.push_back(p.value.grad().clone());
      return out;
    };
    at::Tensor short_loss = model.Loss(tokens, targets);
    const std::vector<at::Tensor> short_grads = grads(short_loss);
    EXPECT_FALSE(model.loss_rows().defined()) << "cleared after the pass";
    at::Tensor whole_loss = model.Head(model.Blocks(model.Embed(tokens), 0, c.layers), targets);
    const std::vector<at::Tensor> whole_grads = grads(whole_loss);
    // fp32 GEMMs over fewer rows round differently: 1e-5 relative.
    EXPECT_NEAR(short_loss.item<double>(), whole_loss.item<double>(), 1e-5 * whole_loss.item<double>())
        << FamilyName(family);
    ASSERT_EQ(short_grads.size(), whole_grads.size());
    for (size_t k = 0; k < whole_grads.size(); ++k) {
      EXPECT_TRUE(at::allclose(short_grads[k], whole_grads[k], 1e-4, 1e-6))
          << FamilyName(family) << " " << model.params()[k].name << " differs by "
          << (short_grads[k] - whole_grads[k]).abs().max().item<double>();
    }
  }
}

TEST(DecoderTest, LogitTemperatureDividesTheLogitsBeforeTheLoss) {
  // GRPO's log-probabilities at the sampling temperature: the head's cross-entropy equals that of the
  // logits (DecodeStep's, the generation path's) divided by the temperature.
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    const ModelConfig c = Config(family);
    Decoder model(c, Self(), /*seed=*/3, c10::Device(c10::kCPU));
    at::Tensor tokens = at::randint(0, c.vocab, {2, 16}, at::TensorOptions().dtype(at::kLong));
    at::Tensor targets = at::randint(0, c.vocab, {2, 16}, at::TensorOptions().dtype(at::kLong));
    KvCache cache;
    const at::Tensor logits = model.DecodeStep(tokens, &cache);  // [2, 16, vocab]
    const double temperature = 0.7;
    const double want = at::cross_entropy_loss((logits / temperature).reshape({32, c.vocab}), targets.reshape({32}))
                            .item<double>();
    model.set_logit_temperature(temperature);
    const double got = model.Head(model.Blocks(model.Embed(tokens), 0, c.layers), targets).item<double>();
    EXPECT_NEAR(got, want, 1e-5 * want) << FamilyName(family);
    model.set_logit_temperature(1.0);
    const double plain = model.Head(model.Blocks(model.Embed(tokens), 0, c.layers), targets).item<double>();
    EXPECT_GT(std::abs(plain - want), 1e-3) << "the test can fail";
  }
}

}  // namespace
}  // namespace tessera::parallel
