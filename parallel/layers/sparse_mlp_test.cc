// SparseMlp against the definitions in sparse_mlp.h, computed here token by token with plain ATen
// (no sorting, no dispatch): dropless routing with and without renormalised weights and a shared
// expert; the capacity factor's dropping in token order; the router statistics and transformers'
// balancing loss; and the balancing loss's gradient carried into backward, against autograd through
// the loss written out.
#include "parallel/layers/sparse_mlp.h"

#include <ATen/ATen.h>

#include <cmath>
#include <memory>

#include "gtest/gtest.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/layers/fp8_linear.h"
#include "parallel/layers/sparse_mlp_paths.h"

namespace tessera::parallel {
namespace {

constexpr int64_t kTokens = 12, kHidden = 8, kFfn = 6, kExperts = 4;

struct Weights {
  SparseMlpWeights w;
  explicit Weights(bool shared, double router_std = 1.0) {
    at::manual_seed(7);
    w.router = (at::randn({kExperts, kHidden}) * router_std).requires_grad_(true);
    for (int e = 0; e < kExperts; ++e) {
      w.gate.push_back(at::randn({kFfn, kHidden}).requires_grad_(true));
      w.up.push_back(at::randn({kFfn, kHidden}).requires_grad_(true));
      w.down.push_back(at::randn({kHidden, kFfn}).requires_grad_(true));
    }
    if (shared) {
      w.shared_gate_proj = at::randn({kFfn, kHidden});
      w.shared_up = at::randn({kFfn, kHidden});
      w.shared_down = at::randn({kHidden, kFfn});
      w.shared_gate = at::randn({1, kHidden});
    }
  }
};

at::Tensor Expert(const SparseMlpWeights& w, int e, const at::Tensor& x) {
  return at::linear(at::silu(at::linear(x, w.gate[e])) * at::linear(x, w.up[e]), w.down[e]);
}

// The definition, token by token: top-k of softmax(x·Rᵀ) (+ the router bias, which only chooses),
// the chosen probabilities optionally renormalised; assignment (t, j) dropped when its expert already
// took `capacity` assignments of earlier tokens (or earlier slots).
at::Tensor Reference(const SparseMlpWeights& w, const at::Tensor& x, int k, bool norm, int64_t capacity) {
  at::Tensor probs = at::softmax(at::linear(x, w.router), -1);
  auto [top_w, top_e] = at::topk(probs, k, -1);
  if (w.router_bias.defined()) {
    top_e = std::get<1>(at::topk(probs + w.router_bias, k, -1));
    top_w = probs.gather(-1, top_e);
  }
  if (norm) top_w = top_w / top_w.sum(-1, true);
  std::vector<int64_t> taken(kExperts, 0);
  std::vector<at::Tensor> rows;
  for (int64_t t = 0; t < x.size(0); ++t) {
    at::Tensor y = at::zeros({kHidden});
    for (int j = 0; j < k; ++j) {
      const int e = static_cast<int>(top_e[t][j].item<int64_t>());
      if (capacity >= 0 && taken[e]++ >= capacity) continue;
      y = y + top_w[t][j] * Expert(w, e, x[t]);
    }
    if (w.shared_gate.defined()) {
      y = y + at::sigmoid(at::linear(x[t], w.shared_gate)) *
                  at::linear(at::silu(at::linear(x[t], w.shared_gate_proj)) * at::linear(x[t], w.shared_up),
                             w.shared_down);
    }
    rows.push_back(y);
  }
  return at::stack(rows);
}

std::shared_ptr<Communicator> Self() { return std::make_shared<SelfCommunicator>(0, "tp[0]"); }

TEST(SparseMlpTest, DroplessRoutingIsTheDefinition) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({2, kTokens / 2, kHidden});
  auto tp = Self();
  for (const bool shared : {false, true}) {
    for (const bool norm : {true, false}) {
      Weights w(shared);
      at::NoGradGuard no_grad;
      at::Tensor got = SparseMlp(x, w.w, {2, norm, 0}, tp.get(), nullptr, nullptr, false, 0);
      at::Tensor want = Reference(w.w, x.reshape({kTokens, kHidden}), 2, norm, -1).view(x.sizes());
      EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-5)) << "shared " << shared << " norm " << norm << "\n"
                                                       << (got - want).abs().max().item<double>();
    }
  }
}

TEST(SparseMlpTest, RouterBiasOnlyChoosesTheExperts) {
  at::manual_seed(4);
  const at::Tensor x = at::randn({1, kTokens, kHidden});
  auto tp = Self();
  Weights w(/*shared=*/false);
  w.w.router_bias = at::tensor({0.3f, -0.2f, 0.0f, 0.25f});
  at::NoGradGuard no_grad;
  auto stats = c10::make_intrusive<RouterStats>(kExperts);
  at::Tensor got = SparseMlp(x, w.w, {2, true, 0}, tp.get(), nullptr, stats.get(), true, 0);
  at::Tensor want = Reference(w.w, x.reshape({kTokens, kHidden}), 2, true, -1).view(x.sizes());
  EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-5)) << (got - want).abs().max().item<double>();
  // The routed load is the biased choice; the balancing loss's counts the plain top-k (transformers').
  at::Tensor probs = at::softmax(at::linear(x.reshape({kTokens, kHidden}), w.w.router), -1);
  at::Tensor plain = at::bincount(std::get<1>(at::topk(probs, 2, -1)).reshape({-1}), {}, kExperts).to(at::kDouble);
  at::Tensor biased =
      at::bincount(std::get<1>(at::topk(probs + w.w.router_bias, 2, -1)).reshape({-1}), {}, kExperts).to(at::kDouble);
  EXPECT_TRUE(stats->counts.equal(plain));
  EXPECT_TRUE(stats->layer_counts.at(0).equal(biased));
  EXPECT_FALSE(plain.equal(biased)) << "the bias changes the choice here (the test can fail)";
}

TEST(SparseMlpTest, RouterJitterScalesTheInputInTrainingOnly) {
  at::manual_seed(6);
  const at::Tensor x = at::randn({2, kTokens / 2, kHidden});
  auto tp = Self();
  Weights w(/*shared=*/false);
  at::NoGradGuard no_grad;
  const double jitter = 0.2;
  auto stats = c10::make_intrusive<RouterStats>(kExperts);
  stats->noise_seed = 123;
  const at::Tensor noise = JitterNoise(*stats, 3, jitter, x.sizes());
  EXPECT_TRUE(noise.ge(1 - jitter).all().item<bool>() && noise.lt(1 + jitter).all().item<bool>());
  EXPECT_NEAR(noise.mean().item<double>(), 1.0, 0.05);
  EXPECT_FALSE(noise.equal(JitterNoise(*stats, 4, jitter, x.sizes()))) << "each block its own noise";
  // Training (statistics): the definition on the jittered input; evaluation (none): no jitter.
  at::Tensor got = SparseMlp(x, w.w, {2, true, 0, jitter}, tp.get(), nullptr, stats.get(), true, 3);
  at::Tensor want = Reference(w.w, (x * noise).reshape({kTokens, kHidden}), 2, true, -1).view(x.sizes());
  EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-5));
  at::Tensor eval = SparseMlp(x, w.w, {2, true, 0, jitter}, tp.get(), nullptr, nullptr, false, 3);
  EXPECT_TRUE(at::allclose(eval, Reference(w.w, x.reshape({kTokens, kHidden}), 2, true, -1).view(x.sizes()), 1e-5, 1e-5));
  // Sequence parallelism: block 1 of 2 holds the second half of the whole sequence's noise.
  auto half = c10::make_intrusive<RouterStats>(kExperts);
  half->noise_seed = 123, half->sequence_block = 1, half->sequence_blocks = 2;
  const int64_t T = x.size(1);
  EXPECT_TRUE(JitterNoise(*half, 3, jitter, {2, T / 2, kHidden}).equal(noise.narrow(1, T / 2, T / 2)));
}

TEST(SparseMlpTest, CapacityDropsLaterTokensAssignments) {
  // A router that sends most tokens to the same experts, so that capacity binds.
  Weights w(/*shared=*/false, /*router_std=*/3.0);
  at::manual_seed(5);
  const at::Tensor x = at::randn({1, kTokens, kHidden}).abs();
  auto tp = Self();
  at::NoGradGuard no_grad;
  for (const double factor : {0.5, 1.0, 1.25}) {
    const int64_t capacity = static_cast<int64_t>(std::ceil(factor * kTokens * 2 / kExperts));
    at::Tensor got = SparseMlp(x, w.w, {2, true, factor}, tp.get(), nullptr, nullptr, false, 0);
    at::Tensor want = Reference(w.w, x.reshape({kTokens, kHidden}), 2, true, capacity).view(x.sizes());
    EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-5)) << "factor " << factor;
  }
  // The test can fail: at factor 0.5 something is dropped (the dropless output differs).
  at::Tensor dropless = SparseMlp(x, w.w, {2, true, 0}, tp.get(), nullptr, nullptr, false, 0);
  EXPECT_FALSE(at::allclose(dropless, SparseMlp(x, w.w, {2, true, 0.5}, tp.get(), nullptr, nullptr, false, 0)));
}

// transformers' load_balancing_loss_func over two blocks' router logits jointly, written out.
at::Tensor BalancingLoss(const std::vector<at::Tensor>& logits, int k) {
  at::Tensor all = at::cat(logits);
  at::Tensor probs = at::softmax(all, -1);
  at::Tensor selected = std::get<1>(at::topk(probs, k, -1));
  at::Tensor mask = at::one_hot(selected, kExperts).to(at::kFloat);  // [N, k, E]
  at::Tensor tokens_per_expert = mask.mean(0);                      // [k, E]
  return (tokens_per_expert * probs.mean(0).unsqueeze(0)).sum() * kExperts;
}

// transformers' load_balancing_loss_func with an attention mask: the counts and probabilities of the
// rows `counted` [N] (1/0, the same for every block) only, each over their sum.
at::Tensor MaskedBalancingLoss(const std::vector<at::Tensor>& logits, const at::Tensor& counted, int k) {
  at::Tensor all = at::cat(logits);
  at::Tensor mask = at::cat(std::vector<at::Tensor>(logits.size(), counted)).to(at::kFloat);  // [blocks·N]
  at::Tensor probs = at::softmax(all, -1);
  at::Tensor selected = std::get<1>(at::topk(probs, k, -1));
  at::Tensor hot = at::one_hot(selected, kExperts).to(at::kFloat);  // [rows, k, E]
  at::Tensor tokens_per_expert = (hot * mask.view({-1, 1, 1})).sum(0) / mask.sum();
  at::Tensor prob_per_expert = (probs * mask.unsqueeze(1)).sum(0) / mask.sum();
  return (tokens_per_expert * prob_per_expert.unsqueeze(0)).sum() * kExperts;
}

// Two sparse blocks in a row recording into one RouterStats (counting the rows `counted` marks, or all
// when undefined); the objective y.sum() + coef · aux. The statistics, aux and both routers' gradients
// against autograd through transformers' function written out (MaskedBalancingLoss). Returns aux.
double CheckCarriedGradient(const at::Tensor& x, const at::Tensor& counted) {
  Weights a(false), b(false);
  auto tp = Self();
  const double coef = 50;  // Large: the balancing loss's part of the router gradient is far above the tolerance.
  auto stats = c10::make_intrusive<RouterStats>(kExperts);
  if (counted.defined()) stats->counted = counted;
  at::Tensor y1 = SparseMlp(x, a.w, {2, true, 0}, tp.get(), nullptr, stats.get(), true, 0);
  at::Tensor y2 = SparseMlp(y1, b.w, {2, true, 0}, tp.get(), nullptr, stats.get(), true, 1);
  const at::Tensor flags = counted.defined() ? counted.reshape({kTokens}).to(at::kFloat) : at::ones({kTokens});
  const int64_t rows = static_cast<int64_t>(flags.sum().item<double>());
  EXPECT_EQ(stats->rows, 2 * rows);
  EXPECT_EQ(stats->counts.sum().item<double>(), 2.0 * rows * 2);
  EXPECT_EQ(stats->layer_counts.size(), 2u);
  EXPECT_EQ(stats->layer_counts.at(1).sum().item<double>(), 2.0 * rows);
  stats->grad_scale = coef;
  y2.sum().backward();
  const at::Tensor got_a = a.w.router.grad().clone(), got_b = b.w.router.grad().clone();

  Weights a2(false), b2(false);
  at::Tensor z1 = SparseMlp(x, a2.w, {2, true, 0}, tp.get(), nullptr, nullptr, false, 0);
  at::Tensor z2 = SparseMlp(z1, b2.w, {2, true, 0}, tp.get(), nullptr, nullptr, false, 0);
  const std::vector<at::Tensor> logits = {at::linear(x.reshape({kTokens, kHidden}), a2.w.router),
                                          at::linear(z1.reshape({kTokens, kHidden}), b2.w.router)};
  at::Tensor aux = MaskedBalancingLoss(logits, flags, 2);
  if (!counted.defined()) {
    EXPECT_NEAR(aux.item<double>(), BalancingLoss(logits, 2).item<double>(), 1e-6);
  }
  EXPECT_NEAR(stats->AuxLoss(), aux.item<double>(), 1e-6);
  (z2.sum() + coef * aux).backward();
  EXPECT_TRUE(at::allclose(got_a, a2.w.router.grad(), 1e-4, 1e-6)) << (got_a - a2.w.router.grad()).abs().max();
  EXPECT_TRUE(at::allclose(got_b, b2.w.router.grad(), 1e-4, 1e-6)) << (got_b - b2.w.router.grad()).abs().max();
  // The test can fail: without the carried gradient the router's gradient differs.
  Weights a3(false), b3(false);
  at::Tensor w1 = SparseMlp(x, a3.w, {2, true, 0}, tp.get(), nullptr, nullptr, false, 0);
  SparseMlp(w1, b3.w, {2, true, 0}, tp.get(), nullptr, nullptr, false, 1).sum().backward();
  EXPECT_FALSE(at::allclose(got_a, a3.w.router.grad(), 1e-4, 1e-6));
  return stats->AuxLoss();
}

TEST(SparseMlpTest, BalancingLossAndItsGradientAreTransformers) {
  at::manual_seed(9);
  CheckCarriedGradient(at::randn({2, kTokens / 2, kHidden}), at::Tensor());
}

TEST(SparseMlpTest, CountedRowsAloneMakeTheBalancingLossAndItsGradient) {
  at::manual_seed(9);
  const at::Tensor x = at::randn({2, kTokens / 2, kHidden});
  // The second sample's last four positions are padding (a shorter pair).
  at::Tensor counted = at::ones({2, kTokens / 2}, at::kDouble);
  counted[1].narrow(0, kTokens / 2 - 4, 4).zero_();
  const double masked = CheckCarriedGradient(x, counted);
  // The test can fail: every row counted gives another loss.
  EXPECT_GT(std::abs(masked - CheckCarriedGradient(x, at::Tensor())), 1e-4);
}

// ExpertGemm::kGrouped against kLoop (the definition above): dropless and with capacity, with a
// shared expert and an expert that gets no rows (a router bias of -100 keeps it out): the same
// outputs and gradients — the idle expert's gradient all zeros, defined.
TEST(SparseMlpTest, GroupedGemmsAreTheLoop) {
  constexpr int64_t kWide = 16, kInner = 8;  // Multiples of 8: the grouped GEMMs apply.
  auto make = [&] {
    at::manual_seed(11);
    SparseMlpWeights w;
    w.router = at::randn({kExperts, kWide}).requires_grad_(true);
    for (int e = 0; e < kExperts; ++e) {
      w.gate.push_back(at::randn({kInner, kWide}).requires_grad_(true));
      w.up.push_back(at::randn({kInner, kWide}).requires_grad_(true));
      w.down.push_back(at::randn({kWide, kInner}).requires_grad_(true));
    }
    w.shared_gate_proj = at::randn({kInner, kWide});
    w.shared_up = at::randn({kInner, kWide});
    w.shared_down = at::randn({kWide, kInner});
    w.shared_gate = at::randn({1, kWide});
    w.router_bias = at::tensor({0.0f, 0.0f, 0.0f, -100.0f});
    return w;
  };
  {  // The grouped GEMMs are what runs below (and where they do not).
    const SparseMlpWeights w = make();
    const at::Tensor rows = at::zeros({5, kWide});
    EXPECT_TRUE(GroupedApplies(ExpertGemm::kGrouped, rows, w));
    EXPECT_FALSE(GroupedApplies(ExpertGemm::kLoop, rows, w));
    EXPECT_FALSE(GroupedApplies(ExpertGemm::kGrouped, at::zeros({0, kWide}), w)) << "no rows";
    const Fp8Options fp8;
    Fp8Scope scope(&fp8);
    EXPECT_FALSE(GroupedApplies(ExpertGemm::kGrouped, rows, w)) << "under an FP8 scope";
  }
  at::manual_seed(12);
  const at::Tensor x0 = at::randn({2, 7, kWide});  // 14 tokens: odd row counts per expert.
  const at::Tensor probe = at::randn({2, 7, kWide});
  auto tp = Self();
  for (const double capacity : {0.0, 0.5}) {
    std::vector<SparseMlpWeights> w = {make(), make()};
    std::vector<at::Tensor> x, y;
    for (int i = 0; i < 2; ++i) {
      SparseMlpOptions o{2, true, capacity};
      o.gemm = i == 0 ? ExpertGemm::kLoop : ExpertGemm::kGrouped;
      x.push_back(x0.clone().requires_grad_(true));
      auto stats = c10::make_intrusive<RouterStats>(kExperts);
      y.push_back(SparseMlp(x[i], w[i], o, tp.get(), nullptr, stats.get(), true, 0));
      (y[i] * probe).sum().backward();
      EXPECT_EQ(stats->layer_counts.at(0)[3].item<double>(), 0) << "expert 3 idle";
    }
    const std::string tag = "capacity " + std::to_string(capacity);
    // fp32 GEMMs over the same rows in another grouping: rounding only.
    auto close = [&](const at::Tensor& a, const at::Tensor& b, const std::string& what) {
      ASSERT_TRUE(b.defined()) << tag << " " << what << ": no gradient";
      EXPECT_TRUE(at::allclose(a, b, 1e-5, 1e-5)) << tag << " " << what << " " << (a - b).abs().max().item<double>();
    };
    close(y[0], y[1], "output");
    close(x[0].grad(), x[1].grad(), "input gradient");
    close(w[0].router.grad(), w[1].router.grad(), "router gradient");
    for (int e = 0; e < kExperts; ++e) {
      close(w[0].gate[e].grad(), w[1].gate[e].grad(), "gate " + std::to_string(e));
      close(w[0].up[e].grad(), w[1].up[e].grad(), "up " + std::to_string(e));
      close(w[0].down[e].grad(), w[1].down[e].grad(), "down " + std::to_string(e));
    }
    EXPECT_TRUE(w[1].down[3].grad().eq(0).all().item<bool>()) << tag << ": the idle expert's gradient";
  }
}

}  // namespace
}  // namespace tessera::parallel
