// SampleBatch: prompts of different lengths decoded as one left-padded batch (KvCache::offsets) draw
// what Sample draws for each prompt alone (the rows that finish early leaving each batch at other steps) — the same tokens, greedy and sampled with each prompt's seed,
// and log-probabilities within 1e-5 — for a Llama (rotary positions counted from each row's first
// token) and a GPT-2 (learned positions); a bad prompt is named by its index.
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/models/decoder.h"
#include "parallel/models/generate.h"

namespace tessera::parallel {
namespace {

ModelConfig Config(ModelFamily family) {
  ModelConfig c;
  c.layers = 2;
  c.hidden = 64;
  c.heads = 4;
  c.vocab = 101;
  c.seq_len = 32;
  c.family = family;
  if (family != ModelFamily::kGpt2) c.kv_heads = 2, c.ffn_hidden = 128, c.tie_embeddings = false;
  return c;
}

const std::vector<std::vector<int64_t>> kPrompts = {{5, 17, 42, 8, 99, 3}, {7}, {60, 61, 62}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
const std::vector<uint64_t> kSeeds = {11, 12, 13, 14};

class GenerateBatchTest : public ::testing::TestWithParam<ModelFamily> {};

TEST_P(GenerateBatchTest, APaddedBatchDrawsWhatEachPromptAloneDraws) {
  Decoder model(Config(GetParam()), std::make_shared<SelfCommunicator>(0, "tp[0]"), /*seed=*/3, c10::Device(c10::kCPU));
  // The stop token: prompt 0's most likely first token, so that completions end at different steps.
  GenerateOptions first;
  first.max_new_tokens = 1;
  auto greedy = Sample(model, kPrompts[0], first);
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  for (double temperature : {0.0, 0.9}) {
    GenerateOptions o;
    o.max_new_tokens = 12;
    o.temperature = temperature;
    o.top_k = temperature > 0 ? 20 : 0;
    o.num_samples = 3;
    o.stop_token = greedy->front().tokens.front();
    auto batch = SampleBatch(model, kPrompts, kSeeds, o);
    ASSERT_TRUE(batch.ok()) << batch.status();
    ASSERT_EQ(batch->size(), kPrompts.size());
    if (temperature > 0) {
      // Completions end at different steps, so finished rows are decoded along and then dropped
      // (the batch of 12 and each prompt's 3 compact at other times): some stop, some run to the end.
      int stopped = 0, truncated = 0;
      for (const auto& completions : *batch) {
        for (const Completion& c : completions) (c.truncated ? truncated : stopped) += 1;
      }
      EXPECT_GE(stopped, 2) << truncated << " truncated";
      EXPECT_GE(truncated, 2) << stopped << " stopped";
    }
    for (size_t p = 0; p < kPrompts.size(); ++p) {
      o.seed = kSeeds[p];
      auto alone = Sample(model, kPrompts[p], o);
      ASSERT_TRUE(alone.ok()) << alone.status();
      for (int i = 0; i < o.num_samples; ++i) {
        const Completion &got = (*batch)[p][i], &want = (*alone)[i];
        EXPECT_EQ(got.tokens, want.tokens) << "prompt " << p << " sample " << i << " temperature " << temperature;
        EXPECT_EQ(got.truncated, want.truncated);
        ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
        for (size_t k = 0; k < got.logprobs.size(); ++k) EXPECT_NEAR(got.logprobs[k], want.logprobs[k], 1e-5);
      }
    }
  }
}

TEST_P(GenerateBatchTest, ABadPromptIsNamed) {
  Decoder model(Config(GetParam()), std::make_shared<SelfCommunicator>(0, "tp[0]"), /*seed=*/3, c10::Device(c10::kCPU));
  GenerateOptions o;
  o.max_new_tokens = 4;
  auto empty = SampleBatch(model, {{1, 2}, {}}, {1, 2}, o);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(std::string(empty.status().message()), "prompt 1: the prompt is empty (at least one token)");
  auto outside = SampleBatch(model, {{1, 2}, {3, 500}}, {1, 2}, o);
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(std::string(outside.status().message()), "prompt 1: prompt token 1 is 500, outside the vocabulary [0, 101)");
  EXPECT_FALSE(SampleBatch(model, {{1, 2}}, {1, 2}, o).ok());  // One seed per prompt.
}

INSTANTIATE_TEST_SUITE_P(Families, GenerateBatchTest, ::testing::Values(ModelFamily::kLlama, ModelFamily::kGpt2));

}  // namespace
}  // namespace tessera::parallel
