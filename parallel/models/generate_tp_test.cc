// The sampler on a 1D tensor-parallel group (DecodeStep's heads and KV cache split over tp, the logits
// gathered over the vocabulary): two forked ranks give the logits of one process within 1e-5 and draw
// the same tokens — greedy and sampled with a seed — for a Llama, a GPT-2 (learned positions, tied
// head) with a vocabulary tp does not divide (its padding rows dropped), and a Mixtral (experts split
// over tp). Both ranks draw alike (lockstep), as GRPO's generation in a tp group needs.
#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "parallel/comm/process_groups.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/models/decoder.h"
#include "parallel/models/generate.h"
#include "parallel/testing/multi_process.h"
#include "parallel/testing/rank_groups.h"

namespace tessera::parallel {
namespace {

using formats::model::FamilyName;

ModelConfig Config(ModelFamily family) {
  ModelConfig c;
  c.layers = 2;
  c.hidden = 64;
  c.heads = 4;
  c.vocab = 101;  // Not a multiple of tp = 2: one padding row on the last rank.
  c.seq_len = 32;
  c.family = family;
  if (family != ModelFamily::kGpt2) c.kv_heads = 2, c.ffn_hidden = 128, c.tie_embeddings = false;
  if (family == ModelFamily::kMixtral) c.experts = 4, c.experts_per_token = 2, c.moe_ffn_hidden = 64;
  return c;
}

const std::vector<int64_t> kPrompt = {5, 17, 42, 8, 99, 3};

// The logits of kPrompt and the tokens of greedy and sampled generation, by `model`.
struct Drawn {
  at::Tensor logits;
  std::vector<std::vector<int64_t>> tokens;
};

absl::StatusOr<Drawn> Draw(Decoder& model) {
  Drawn d;
  KvCache cache;
  d.logits = model.DecodeStep(at::tensor(kPrompt, at::kLong).unsqueeze(0), &cache)[0];
  for (double temperature : {0.0, 0.9}) {
    GenerateOptions o;
    o.max_new_tokens = 10;
    o.temperature = temperature;
    o.top_k = temperature > 0 ? 20 : 0;
    o.seed = 11;
    o.num_samples = 3;
    auto completions = Sample(model, kPrompt, o);
    if (!completions.ok()) return completions.status();
    for (const Completion& c : *completions) d.tokens.push_back(c.tokens);
  }
  return d;
}

absl::Status Rank(int rank, int port, ModelFamily family) {
  auto groups = testing::RankGroups(rank, port, {.tp = 2});
  if (!groups.ok()) return groups.status();
  const ModelConfig c = Config(family);
  Decoder split(c, groups->tp, /*seed=*/3, c10::Device(c10::kCPU));
  auto got = Draw(split);
  if (!got.ok()) return got.status();
  Decoder whole(c, std::make_shared<SelfCommunicator>(0, "tp[0]"), /*seed=*/3, c10::Device(c10::kCPU));
  auto want = Draw(whole);
  if (!want.ok()) return want.status();
  const std::string who = absl::StrCat(FamilyName(family), " rank ", rank, ": ");
  if (got->logits.sizes() != want->logits.sizes()) return absl::InternalError(who + "logits shaped otherwise");
  const double diff = (got->logits - want->logits).abs().max().item<double>();
  if (diff > 1e-5) return absl::InternalError(absl::StrCat(who, "logits differ by ", diff));
  if (got->tokens != want->tokens) return absl::InternalError(who + "other tokens than one process's");
  return absl::OkStatus();
}

TEST(GenerateTpTest, TwoRanksSampleAsOneProcess) {
  for (ModelFamily family : {ModelFamily::kLlama, ModelFamily::kGpt2, ModelFamily::kMixtral}) {
    const absl::Status s = testing::RunRanks(2, [family](int r, int p) { return Rank(r, p, family); });
    EXPECT_TRUE(s.ok()) << s;
  }
}

}  // namespace
}  // namespace tessera::parallel
