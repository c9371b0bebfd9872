// SparseMlp with expert parallelism when routing has collapsed (issue 54): every token on one expert,
// experts with no tokens anywhere, ep ranks that send or receive no rows at all. Each case runs in
// forked ranks (ep 2, and dp 2 × ep 2 × tp 2 with each expert split over tp) and is compared with
// the one-process SparseMlp over both ranks' tokens: outputs, the input's, router's and experts'
// gradients (an expert that got no tokens has a gradient, of zeros, on every rank — dp/ep gradient
// reduction and ZeRO expect one per parameter), LoRA adapters' gradients, and the routed counts.
// The router is steered: hidden features 0..E-1 of a token are its rank's preference for each
// expert, and the router reads them with weight 20 (the remaining features add little).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/layers/sparse_mlp.h"
#include "parallel/testing/multi_process.h"
#include "parallel/testing/rank_groups.h"

namespace tessera::parallel {
namespace {

using testing::RunRanks;

constexpr int64_t kBatch = 2, kSeq = 3, kHidden = 8, kFfn = 8, kExperts = 4, kRank = 2, kDp = 2;

// A routing pattern: k, and per dp rank the preference for each expert (the top-k are those with
// the highest preferences, ties never reached: the preferences differ by far more than the noise).
struct Pattern {
  std::string name;
  int k;
  std::vector<std::vector<float>> preference;  // [dp][E]
  std::vector<double> counts;                  // Tokens routed to each expert over both ranks.
};

std::vector<Pattern> Patterns() {
  constexpr double n = kBatch * kSeq;  // Tokens per rank.
  return {
      // ep rank 1 receives nothing; experts 1..3 get nothing anywhere.
      {"every token on expert 0", 1, {{1, 0, 0, 0}, {1, 0, 0, 0}}, {2 * n, 0, 0, 0}},
      // ep rank 0 receives nothing; experts 0 and 1 get nothing anywhere.
      {"experts 2 and 3 only", 2, {{0, 0, 1, 0.6f}, {0, 0, 0.6f, 1}}, {0, 0, 2 * n, 2 * n}},
      // Each rank's tokens stay on it: no rows cross in either direction.
      {"each rank keeps its tokens", 2, {{1, 0.6f, 0, 0}, {0, 0, 0.6f, 1}}, {n, n, n, n}},
      // Each rank's tokens all leave it: nothing stays; experts 1 and 2 get nothing.
      {"each rank's tokens cross", 1, {{0, 0, 0, 1}, {1, 0, 0, 0}}, {n, 0, 0, n}},
      // Both ranks receive rows; expert 2 gets none.
      {"one expert idle", 2, {{1, 0.6f, 0, 0}, {0.6f, 0, 0, 1}}, {2 * n, n, 0, n}},
  };
}

// Every expert's weights whole (seeded: the same in every process), with LoRA adapters when `lora`.
struct Full {
  at::Tensor router;
  std::vector<at::Tensor> gate, up, down;
  std::vector<ExpertLora> lora;

  explicit Full(bool with_lora) {
    at::manual_seed(17);
    router = at::randn({kExperts, kHidden}) * 0.1;
    router.narrow(1, 0, kExperts).copy_(at::eye(kExperts) * 20);
    for (int e = 0; e < kExperts; ++e) {
      gate.push_back(at::randn({kFfn, kHidden}) * 0.5);
      up.push_back(at::randn({kFfn, kHidden}) * 0.5);
      down.push_back(at::randn({kHidden, kFfn}) * 0.5);
      if (with_lora) {
        lora.push_back({at::randn({kRank, kHidden}) * 0.5, at::randn({kFfn, kRank}) * 0.5,
                        at::randn({kRank, kHidden}) * 0.5, at::randn({kFfn, kRank}) * 0.5,
                        at::randn({kRank, kFfn}) * 0.5, at::randn({kHidden, kRank}) * 0.5});
      }
    }
  }

  // Experts [first, first + count), tp part `t` of `tp` (gate/up rows, down columns), as leaves that
  // take gradients, in `dtype`.
  SparseMlpWeights Part(int64_t first, int64_t count, int t, int tp, at::ScalarType dtype) const {
    auto leaf = [dtype](const at::Tensor& v) { return v.to(dtype).contiguous().requires_grad_(true); };
    SparseMlpWeights w;
    w.router = leaf(router);
    for (int64_t e = first; e < first + count; ++e) {
      w.gate.push_back(leaf(gate[e].chunk(tp, 0)[t]));
      w.up.push_back(leaf(up[e].chunk(tp, 0)[t]));
      w.down.push_back(leaf(down[e].chunk(tp, 1)[t]));
      if (!lora.empty()) {  // tp 1 only.
        const ExpertLora& l = lora[e];
        w.lora.push_back({leaf(l.gate_a), leaf(l.gate_b), leaf(l.up_a), leaf(l.up_b), leaf(l.down_a), leaf(l.down_b)});
      }
    }
    w.lora_scale = lora.empty() ? 0 : 2.0;
    return w;
  }
};

// Both ranks' tokens [kDp·B, T, h]: features 0..E-1 their rank's preferences, the rest random.
at::Tensor Tokens(const Pattern& p) {
  at::manual_seed(23);
  at::Tensor x = at::randn({kDp * kBatch, kSeq, kHidden}) * 0.5;
  for (int d = 0; d < kDp; ++d) {
    x.narrow(0, d * kBatch, kBatch).narrow(2, 0, kExperts).copy_(at::tensor(p.preference[d]).expand({kBatch, kSeq, kExperts}));
  }
  return x;
}

absl::Status Close(const at::Tensor& got, const at::Tensor& want, double rtol, double atol, const std::string& what) {
  if (!got.defined()) return absl::InternalError(absl::StrCat(what, ": no gradient"));
  const at::Tensor g = got.to(at::kFloat), w = want.to(at::kFloat);
  if (g.sizes() != w.sizes() || !at::allclose(g, w, rtol, atol)) {
    return absl::InternalError(absl::StrCat(what, ": differs from one process by ",
                                            g.sizes() == w.sizes() ? (g - w).abs().max().item<double>() : -1.0));
  }
  return absl::OkStatus();
}

// Rank `rank` of dp 2 (= ep 2) × tp: every pattern, against the one-process run.
absl::Status Check(int rank, int port, int tp_size, bool lora, at::ScalarType dtype,
                   ExpertGemm gemm = ExpertGemm::kLoop) {
  at::set_num_threads(1);
  auto groups = testing::RankGroups(rank, port, {.dp = kDp, .tp = tp_size, .ep = kDp});
  if (!groups.ok()) return groups.status();
  Communicator* tp = groups->tp.get();
  Communicator* ep = groups->ep.get();
  const int d = groups->dp->rank(), t = tp->rank();
  if (ep->size() != kDp || ep->rank() != d) return absl::InternalError("the ep group is the dp group here");
  // bf16: the same GEMMs rounded to 8 bits, in another grouping of rows.
  const double rtol = dtype == at::kFloat ? 1e-4 : 2e-2, atol = dtype == at::kFloat ? 1e-5 : 2e-2;
  const Full full(lora);
  auto self = std::make_shared<SelfCommunicator>(0, "tp[self]");
  for (const Pattern& p : Patterns()) {
    const std::string tag = absl::StrCat(p.name, " (tp ", tp_size, lora ? ", LoRA" : "",
                                         gemm == ExpertGemm::kGrouped ? ", grouped" : "", ", ",
                                         c10::toString(dtype), ", rank ", rank, ")");
    const SparseMlpOptions ref_options{p.k, /*norm_topk_prob=*/true, 0};
    SparseMlpOptions options = ref_options;
    options.gemm = gemm;
    const at::Tensor tokens = Tokens(p).to(dtype);
    at::manual_seed(29);
    const at::Tensor probe = at::randn(tokens.sizes()).to(dtype);  // The objective: Σ y · probe.

    // One process: both ranks' tokens, every expert whole.
    SparseMlpWeights ref = full.Part(0, kExperts, 0, 1, dtype);
    at::Tensor ref_x = tokens.clone().requires_grad_(true);
    auto ref_stats = c10::make_intrusive<RouterStats>(kExperts);
    at::Tensor ref_y = SparseMlp(ref_x, ref, ref_options, self.get(), nullptr, ref_stats.get(), true, 0);
    (ref_y * probe).sum().backward();
    if (!ref_stats->counts.equal(at::tensor(p.counts, at::kDouble))) {
      return absl::InternalError(absl::StrCat(tag, ": the router was not steered to the pattern"));
    }

    // This rank: its tokens, its experts, its tp part.
    const int64_t local = kExperts / kDp, first = d * local;
    SparseMlpWeights w = full.Part(first, local, t, tp_size, dtype);
    at::Tensor x = tokens.narrow(0, d * kBatch, kBatch).clone().requires_grad_(true);
    auto stats = c10::make_intrusive<RouterStats>(kExperts);
    at::Tensor y;
    try {
      y = SparseMlp(x, w, options, tp, ep, stats.get(), true, 0);
      (y * probe.narrow(0, d * kBatch, kBatch)).sum().backward();
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat(tag, ": ", e.what_without_backtrace()));
    }
    auto check = [&](const at::Tensor& got, const at::Tensor& want, const std::string& what) {
      return Close(got, want, rtol, atol, absl::StrCat(tag, ": ", what));
    };
    if (absl::Status s = check(y, ref_y.narrow(0, d * kBatch, kBatch), "output"); !s.ok()) return s;
    if (absl::Status s = check(x.grad(), ref_x.grad().narrow(0, d * kBatch, kBatch), "input gradient"); !s.ok()) {
      return s;
    }
    // The router is replicated: its gradient summed over the ranks that hold different tokens.
    at::Tensor router_grad = w.router.grad().to(at::kFloat).contiguous();
    if (absl::Status s = ep->AllReduce(router_grad, ReduceOp::kSum); !s.ok()) return s;
    if (absl::Status s = check(router_grad, ref.router.grad(), "router gradient"); !s.ok()) return s;
    at::Tensor counts = stats->counts.clone();
    if (absl::Status s = ep->AllReduce(counts, ReduceOp::kSum); !s.ok()) return s;
    if (!counts.equal(ref_stats->counts)) return absl::InternalError(absl::StrCat(tag, ": routed counts differ"));
    for (int64_t e = 0; e < local; ++e) {
      const int64_t g = first + e;
      const std::string expert = absl::StrCat("expert ", g, " ");
      const std::vector<std::pair<at::Tensor, at::Tensor>> pairs = {
          {w.gate[e].grad(), ref.gate[g].grad().chunk(tp_size, 0)[t]},
          {w.up[e].grad(), ref.up[g].grad().chunk(tp_size, 0)[t]},
          {w.down[e].grad(), ref.down[g].grad().chunk(tp_size, 1)[t]}};
      for (size_t i = 0; i < pairs.size(); ++i) {
        if (absl::Status s = check(pairs[i].first, pairs[i].second, absl::StrCat(expert, "gradient ", i)); !s.ok()) {
          return s;
        }
        if (p.counts[g] == 0 && !pairs[i].first.eq(0).all().item<bool>()) {
          return absl::InternalError(absl::StrCat(tag, ": ", expert, "got no tokens but a non-zero gradient"));
        }
      }
      if (lora) {
        const ExpertLora &a = w.lora[e], &b = ref.lora[g];
        const std::vector<std::pair<at::Tensor, at::Tensor>> adapters = {
            {a.gate_a, b.gate_a}, {a.gate_b, b.gate_b}, {a.up_a, b.up_a},
            {a.up_b, b.up_b},     {a.down_a, b.down_a}, {a.down_b, b.down_b}};
        for (size_t i = 0; i < adapters.size(); ++i) {
          absl::Status s = check(adapters[i].first.grad(), adapters[i].second.grad(), absl::StrCat(expert, "adapter ", i));
          if (!s.ok()) return s;
        }
      }
    }
  }
  return groups->world->Barrier();
}

TEST(SparseMlpExpertParallelTest, CollapsedRoutingEp2) {
  EXPECT_TRUE(RunRanks(2, [](int r, int p) { return Check(r, p, 1, false, at::kFloat); }).ok());
}

TEST(SparseMlpExpertParallelTest, CollapsedRoutingEp2WithLora) {
  EXPECT_TRUE(RunRanks(2, [](int r, int p) { return Check(r, p, 1, true, at::kFloat); }).ok());
}

TEST(SparseMlpExpertParallelTest, CollapsedRoutingEp2Bf16) {
  EXPECT_TRUE(RunRanks(2, [](int r, int p) { return Check(r, p, 1, false, at::kBFloat16); }).ok());
}

// The experts of each rank as grouped GEMMs: ranks that receive no rows, experts with none.
TEST(SparseMlpExpertParallelTest, CollapsedRoutingEp2Grouped) {
  EXPECT_TRUE(RunRanks(2, [](int r, int p) { return Check(r, p, 1, false, at::kFloat, ExpertGemm::kGrouped); }).ok());
}

// dp 2 × ep 2 × tp 2 (the planner's first choice for examples/mixtral-tiny.yaml on 4 ranks): each
// expert's rows split over tp as well.
TEST(SparseMlpExpertParallelTest, CollapsedRoutingEp2Tp2) {
  EXPECT_TRUE(RunRanks(4, [](int r, int p) { return Check(r, p, 2, false, at::kFloat); }).ok());
}

}  // namespace
}  // namespace tessera::parallel
