// Preference objectives' two row forms through the Decoder's head (pair_rows.h PairRows): a pair's
// shared-prompt row (WriteSharedPromptRow, with its positions: Decoder::set_positions) gives what its
// two separate rows give — the form the parity tests prove against TRL: DPO's completion
// log-probabilities (SequenceLogps), loss and gradients (DpoObjective), and a reward model's loss,
// metrics and gradients (RewardObjective, with margins) — for rotary (Llama) and learned (GPT-2)
// positions, with an empty prompt, a completion that fills the row limit with its prompt, and the
// batch's padding left out (Decoder::Loss). It can fail: a mask that lets the rejected branch see
// the chosen one, or positions that do not restart, change the rejected completion's numbers.
#include <ATen/ATen.h>

#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/models/decoder.h"
#include "parallel/objectives/dpo_objective.h"
#include "parallel/objectives/pair_rows.h"
#include "parallel/objectives/reward_objective.h"

namespace tessera::parallel {
namespace {

using formats::model::FamilyName;

constexpr int64_t kT = 16;

ModelConfig Config(ModelFamily family) {
  ModelConfig c;
  c.layers = 2;
  c.hidden = 64;
  c.heads = 4;
  c.vocab = 100;
  c.seq_len = kT;
  c.family = family;
  if (family == ModelFamily::kLlama) c.kv_heads = 2, c.ffn_hidden = 160, c.tie_embeddings = false;
  return c;
}

struct Pair {
  std::vector<int32_t> prompt, chosen, rejected;
};

// `limit`: the longest prompt + completion (seq_len + 1 for DPO, seq_len for a reward model).
std::vector<Pair> Draw(int limit) {
  std::mt19937 rng(5);
  auto tokens = [&](int n) {
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) out.push_back(std::uniform_int_distribution<int32_t>(0, 99)(rng));
    return out;
  };
  // Lengths (prompt, chosen, rejected): ordinary; no prompt; chosen filling the limit; one each.
  return {{tokens(3), tokens(4), tokens(2)}, {tokens(0), tokens(3), tokens(5)},
          {tokens(5), tokens(limit - 5), tokens(1)}, {tokens(1), tokens(1), tokens(1)}};
}

// Two rows a pair, as Trainer::ReadPairs writes them: [2n, T + 1].
at::Tensor SeparateRows(const std::vector<Pair>& pairs, PairTargets targets) {
  std::vector<int64_t> rows(pairs.size() * 2 * (kT + 1), -1);
  for (size_t i = 0; i < pairs.size(); ++i) {
    for (int side = 0; side < 2; ++side) {
      int64_t* row = rows.data() + (2 * i + side) * (kT + 1);
      const Pair& p = pairs[i];
      const std::vector<int32_t>& completion = side == 0 ? p.chosen : p.rejected;
      if (targets == PairTargets::kLastTokens) {
        WriteRewardRow(p.prompt, completion, row);
        continue;
      }
      std::vector<int64_t> ids(p.prompt.begin(), p.prompt.end());
      const size_t P = ids.size();
      for (int32_t t : completion) ids.push_back(t);
      for (size_t t = 0; t < ids.size(); ++t) row[t] = t == 0 || t >= P ? ids[t] : -ids[t] - 1;
    }
  }
  return at::tensor(rows, at::kLong).view({static_cast<int64_t>(pairs.size() * 2), kT + 1});
}

struct SharedRows {
  at::Tensor rows;       // [n, 2T + 2]
  at::Tensor positions;  // [n, 2T + 1]
  at::Tensor starts;     // [n] fp64: each rejected branch's first index.
};

SharedRows Shared(const std::vector<Pair>& pairs, PairTargets targets) {
  const int64_t n = static_cast<int64_t>(pairs.size());
  std::vector<int64_t> rows(n * 2 * (kT + 1), -1), positions(n * (2 * kT + 1), 0);
  std::vector<double> starts;
  for (int64_t i = 0; i < n; ++i) {
    const Pair& p = pairs[i];
    WriteSharedPromptRow(p.prompt, p.chosen, p.rejected, kT, targets, rows.data() + i * 2 * (kT + 1),
                         positions.data() + i * (2 * kT + 1));
    starts.push_back(static_cast<double>(p.prompt.size() + p.chosen.size()));
  }
  return {at::tensor(rows, at::kLong).view({n, 2 * kT + 2}), at::tensor(positions, at::kLong).view({n, 2 * kT + 1}),
          at::tensor(starts, at::kDouble)};
}

at::Tensor LossOf(Decoder& model, const at::Tensor& rows) {
  const int64_t width = rows.size(1) - 1;
  return model.Loss(rows.narrow(1, 0, width), rows.narrow(1, 1, width));
}

// Every parameter's gradient, concatenated (and then cleared).
at::Tensor Gradients(Decoder& model) {
  std::vector<at::Tensor> grads;
  for (Param& p : model.params()) {
    grads.push_back(p.value.grad().defined() ? p.value.grad().reshape({-1}).clone() : at::zeros({p.value.numel()}));
    p.value.mutable_grad() = at::Tensor();
  }
  return at::cat(grads);
}

TEST(DecoderDpoTest, SharedPromptRowsGiveTheTwoRowsLogProbabilitiesLossAndGradients) {
  for (ModelFamily family : {ModelFamily::kLlama, ModelFamily::kGpt2}) {
    SCOPED_TRACE(FamilyName(family));
    const ModelConfig c = Config(family);
    Decoder model(c, std::make_shared<SelfCommunicator>(0, "tp[0]"), /*seed=*/3, c10::Device(c10::kCPU));
    model.set_masked_targets(true);
    const std::vector<Pair> pairs = Draw(kT + 1);
    const int64_t n = static_cast<int64_t>(pairs.size());
    const at::Tensor separate = SeparateRows(pairs, PairTargets::kCompletions);
    const SharedRows shared = Shared(pairs, PairTargets::kCompletions);
    const at::Tensor index = at::arange(2 * n, at::kDouble);

    // The completions' log-probabilities.
    std::vector<double> want(2 * n, 1.0), got(2 * n, 1.0);
    {
      at::NoGradGuard no_grad;
      model.set_objective(std::make_shared<SequenceLogps>(&want, PairRows::kSeparate, false));
      model.set_sample_data(index);
      LossOf(model, separate);
      model.set_objective(std::make_shared<SequenceLogps>(&got, PairRows::kSharedPrompt, false));
      model.set_sample_data(at::cat({index.view({n, 2}), shared.starts.unsqueeze(1)}, 1));
      model.set_positions(shared.positions);
      LossOf(model, shared.rows);
      model.set_positions({});
    }
    for (int64_t i = 0; i < 2 * n; ++i) {
      EXPECT_LT(want[i], 0) << "completion " << i;
      // fp32 sums of up to 16 log-probabilities of order −5 in another summation order.
      EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i]))) << "completion " << i;
    }

    // DPO's loss and every gradient, against a reference 0.3 below the policy on chosen.
    at::Tensor ref = at::tensor(want, at::kDouble).view({n, 2}).clone();
    ref.select(1, 0).sub_(0.3);
    const DpoLossOptions options{0.1, DpoLossType::kSigmoid, 0.0};
    model.set_objective(std::make_shared<DpoObjective>(options, PairRows::kSeparate));
    model.set_sample_data(ref.reshape({-1}));
    at::Tensor loss_want = LossOf(model, separate);
    loss_want.backward();
    const at::Tensor grads_want = Gradients(model);
    model.set_objective(std::make_shared<DpoObjective>(options, PairRows::kSharedPrompt));
    model.set_sample_data(at::cat({ref, shared.starts.unsqueeze(1)}, 1));
    model.set_positions(shared.positions);
    at::Tensor loss_got = LossOf(model, shared.rows);
    loss_got.backward();
    model.set_positions({});
    const at::Tensor grads_got = Gradients(model);
    EXPECT_NEAR(loss_got.item<double>(), loss_want.item<double>(), 1e-6);
    EXPECT_GT(grads_want.abs().max().item<double>(), 1e-4);
    // fp32 gradients of order 1e-2: 1e-6 absolute.
    EXPECT_LT((grads_got - grads_want).abs().max().item<double>(), 1e-6);
  }
}

TEST(DecoderDpoTest, SharedPromptRowsGiveARewardModelTheTwoRowsLossMetricsAndGradients) {
  for (ModelFamily family : {ModelFamily::kLlama, ModelFamily::kGpt2}) {
    SCOPED_TRACE(FamilyName(family));
    ModelConfig c = Config(family);
    c.score_head = true;
    Decoder model(c, std::make_shared<SelfCommunicator>(0, "tp[0]"), /*seed=*/4, c10::Device(c10::kCPU));
    model.set_masked_targets(true);
    const std::vector<Pair> pairs = Draw(kT);
    const at::Tensor separate = SeparateRows(pairs, PairTargets::kLastTokens);
    const SharedRows shared = Shared(pairs, PairTargets::kLastTokens);
    const at::Tensor margins = at::tensor(std::vector<double>{0.5, -1.0, 0.0, 2.0}, at::kDouble);

    auto objective = std::make_shared<RewardObjective>(/*center_coefficient=*/0.01, PairRows::kSeparate);
    model.set_objective(objective);
    model.set_sample_data(margins.repeat_interleave(2));
    at::Tensor loss_want = LossOf(model, separate);
    loss_want.backward();
    const at::Tensor grads_want = Gradients(model);
    const std::vector<double> metrics_want = objective->TakeMetrics();

    objective = std::make_shared<RewardObjective>(0.01, PairRows::kSharedPrompt);
    model.set_objective(objective);
    model.set_sample_data(at::stack({margins, margins, shared.starts}, 1));
    model.set_positions(shared.positions);
    at::Tensor loss_got = LossOf(model, shared.rows);
    loss_got.backward();
    model.set_positions({});
    const at::Tensor grads_got = Gradients(model);
    const std::vector<double> metrics_got = objective->TakeMetrics();

    // Without margins: separate rows carry no sample data, shared-prompt rows margins of 0 — one loss
    // (a file without margins, e.g. the validation file beside a training file with them).
    {
      at::NoGradGuard no_grad;
      model.set_objective(std::make_shared<RewardObjective>(0.01, PairRows::kSeparate));
      model.set_sample_data({});
      const double none = LossOf(model, separate).item<double>();
      model.set_objective(std::make_shared<RewardObjective>(0.01, PairRows::kSharedPrompt));
      const at::Tensor zeros = at::zeros_like(margins);
      model.set_sample_data(at::stack({zeros, zeros, shared.starts}, 1));
      model.set_positions(shared.positions);
      const double zero = LossOf(model, shared.rows).item<double>();
      model.set_positions({});
      EXPECT_NEAR(zero, none, 1e-6);
      EXPECT_GT(std::abs(none - loss_want.item<double>()), 1e-3);  // The margins count.
    }
    EXPECT_NEAR(loss_got.item<double>(), loss_want.item<double>(), 1e-6);
    ASSERT_EQ(metrics_got.size(), metrics_want.size());
    for (size_t i = 0; i < metrics_want.size(); ++i) EXPECT_NEAR(metrics_got[i], metrics_want[i], 1e-5) << "metric " << i;
    EXPECT_GT(grads_want.abs().max().item<double>(), 1e-4);
    EXPECT_LT((grads_got - grads_want).abs().max().item<double>(), 1e-6);
  }
}

}  // namespace
}  // namespace tessera::parallel
