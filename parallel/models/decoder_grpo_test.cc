// GRPO through the Decoder's head: rows and sample data made by MakeGrpoRows from sampled completions,
// the head's log-probabilities at the sampling temperature (Decoder::set_logit_temperature) and
// GrpoObjective give GrpoLosses (grpo_loss.h, checked against TRL) of the log-probabilities the
// generation path computes (DecodeStep's logits / temperature) — with the sampler's π_old given or the
// policy's own, and with the positions after the batch's last completion token left out (Decoder::Loss).
#include <ATen/ATen.h>

#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/models/decoder.h"
#include "parallel/objectives/grpo_objective.h"
#include "parallel/objectives/grpo_rows.h"

namespace tessera::parallel {
namespace {

constexpr int64_t kT = 16;
constexpr double kTemperature = 0.7;

ModelConfig Llama() {
  ModelConfig c;
  c.layers = 2;
  c.hidden = 64;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn_hidden = 160;
  c.vocab = 100;
  c.seq_len = kT;
  c.family = ModelFamily::kLlama;
  c.tie_embeddings = false;
  return c;
}

// Each completion token's log-probability under `model` at the temperature, from DecodeStep's logits
// of prompt + completion.
std::vector<double> PolicyLogps(Decoder& model, const Rollout& r) {
  std::vector<int64_t> ids(r.prompt.begin(), r.prompt.end());
  ids.insert(ids.end(), r.completion.begin(), r.completion.end());
  KvCache cache;
  const at::Tensor logits = model.DecodeStep(at::tensor(ids, at::kLong).unsqueeze(0), &cache)[0];
  const at::Tensor logp = at::log_softmax(logits.to(at::kDouble) / kTemperature, -1);
  std::vector<double> out;
  const int64_t P = static_cast<int64_t>(r.prompt.size());
  for (size_t k = 0; k < r.completion.size(); ++k) {
    out.push_back(logp[P + static_cast<int64_t>(k) - 1][r.completion[k]].item<double>());
  }
  return out;
}

TEST(DecoderGrpoTest, TheHeadsLossIsGrpoLossesOfTheGenerationPathsLogProbabilities) {
  const ModelConfig c = Llama();
  Decoder model(c, std::make_shared<SelfCommunicator>(0, "tp[0]"), /*seed=*/3, c10::Device(c10::kCPU));
  std::mt19937 rng(7);
  auto draw = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::normal_distribution<double> noise(0.0, 0.3);
  std::vector<Rollout> rollouts(4);
  std::vector<std::vector<double>> policy;
  for (Rollout& r : rollouts) {
    for (int t = draw(2, 5); t > 0; --t) r.prompt.push_back(draw(0, c.vocab - 1));
    for (int t = draw(1, 7); t > 0; --t) r.completion.push_back(draw(0, c.vocab - 1));
    policy.push_back(PolicyLogps(model, r));
    for (double lp : policy.back()) {
      r.logprobs.push_back(lp + noise(rng));  // π_old apart from the policy: the clip acts.
      r.ref_logprobs.push_back(lp + noise(rng));
    }
    r.advantage = noise(rng) * 3;
  }
  auto rows = MakeGrpoRows(rollouts, kT);
  ASSERT_TRUE(rows.ok()) << rows.status();
  const at::Tensor tokens = at::tensor(rows->tokens, at::kLong).view({rows->rows, kT + 1});
  const at::Tensor data = at::tensor(rows->data, at::kDouble).view({rows->rows, 2 * kT + 1});
  // The definition on dense [rollouts, longest completion] tensors.
  const int64_t n = static_cast<int64_t>(rollouts.size());
  int64_t longest = 0;
  for (const Rollout& r : rollouts) longest = std::max<int64_t>(longest, static_cast<int64_t>(r.completion.size()));
  at::Tensor logps = at::zeros({n, longest}, at::kDouble), old = at::zeros({n, longest}, at::kDouble);
  at::Tensor ref = at::zeros({n, longest}, at::kDouble), mask = at::zeros({n, longest}, at::kDouble);
  at::Tensor adv = at::zeros({n}, at::kDouble);
  for (int64_t i = 0; i < n; ++i) {
    const Rollout& r = rollouts[static_cast<size_t>(i)];
    for (size_t k = 0; k < r.completion.size(); ++k) {
      logps[i][static_cast<int64_t>(k)] = policy[static_cast<size_t>(i)][k];
      old[i][static_cast<int64_t>(k)] = r.logprobs[k];
      ref[i][static_cast<int64_t>(k)] = r.ref_logprobs[k];
      mask[i][static_cast<int64_t>(k)] = 1;
    }
    adv[i] = r.advantage;
  }
  model.set_masked_targets(true);
  model.set_sample_data(data);
  for (GrpoOldLogps source : {GrpoOldLogps::kGiven, GrpoOldLogps::kPolicy}) {
    for (GrpoLossType type : {GrpoLossType::kGrpo, GrpoLossType::kBnpo, GrpoLossType::kDrGrpo}) {
      GrpoLossOptions o;
      o.type = type;
      o.beta = 0.04;
      o.epsilon_high = 0.28;
      o.max_completion_tokens = 8;
      const double want =
          GrpoLosses({logps, source == GrpoOldLogps::kGiven ? old : at::Tensor(), ref, adv, mask}, o).loss.item<double>();
      model.set_objective(std::make_shared<GrpoObjective>(o, source));
      model.set_logit_temperature(kTemperature);
      const double got = model.Loss(tokens.narrow(1, 0, kT), tokens.narrow(1, 1, kT)).item<double>();
      EXPECT_NEAR(got, want, 1e-5 * std::max(1.0, std::abs(want))) << static_cast<int>(type) << " "
                                                                    << static_cast<int>(source);
      // The test can fail: without the temperature the log-probabilities are others (with π_old the
      // policy's own, the ratio is 1 and only the small KL term would tell).
      if (source == GrpoOldLogps::kGiven) {
        model.set_logit_temperature(1.0);
        const double cold = model.Loss(tokens.narrow(1, 0, kT), tokens.narrow(1, 1, kT)).item<double>();
        EXPECT_GT(std::abs(cold - want), 1e-3) << static_cast<int>(type);
      }
    }
  }
}

TEST(DecoderGrpoTest, BadRolloutsAreRefusedByIndex) {
  Rollout good{{1, 2}, {3, 4}, {-1.0, -2.0}, {}, 0.5};
  Rollout empty = good;
  empty.completion.clear();
  empty.logprobs.clear();
  Rollout too_long = good;
  too_long.completion.assign(kT, 5);
  too_long.logprobs.assign(kT, -1.0);
  Rollout short_logps = good;
  short_logps.logprobs.pop_back();
  Rollout nan = good;
  nan.logprobs[1] = std::nan("");
  for (const auto& [bad, message] : std::vector<std::pair<Rollout, std::string>>{
           {empty, "rollout 1: the completion has no tokens"},
           {too_long, "rollout 1: 2 prompt and 16 completion tokens, more than seq_len + 1 = 17"},
           {short_logps, "rollout 1: 1 sampler log-probabilities for 2 completion tokens"},
           {nan, "rollout 1: completion token 1's log-probability is not finite"}}) {
    auto rows = MakeGrpoRows({good, bad}, kT);
    ASSERT_FALSE(rows.ok()) << message;
    EXPECT_EQ(std::string(rows.status().message()), message);
  }
}

TEST(DecoderGrpoTest, ASequenceBlocksDataIsItsPositions) {
  Rollout r{{1, 2, 3}, {4, 5, 6, 7}, {-1, -2, -3, -4}, {-5, -6, -7, -8}, 0.25};
  auto rows = MakeGrpoRows({r}, 8);
  ASSERT_TRUE(rows.ok());
  // Positions 2..5 predict the completion (ids at 3..6): block 0 of 2 holds positions 0..3, block 1 4..7.
  EXPECT_EQ(GrpoDataBlock(*rows, 0, 2), (std::vector<double>{0, 0, -1, -2, 0, 0, -5, -6, 0.25}));
  EXPECT_EQ(GrpoDataBlock(*rows, 1, 2), (std::vector<double>{-3, -4, 0, 0, -7, -8, 0, 0, 0.25}));
}

}  // namespace
}  // namespace tessera::parallel
