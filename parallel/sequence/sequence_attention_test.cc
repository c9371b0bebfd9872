// Ring and all-to-all sequence-parallel attention across forked rank processes, against causal
// attention over the whole sequence computed by each rank (outputs and q/k/v gradients); the spans
// that positions draw (PositionSpanEnds, SpanCausalMask) against the rules they state.
#include "parallel/sequence/sequence_attention.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "parallel/comm/process_groups.h"
#include "parallel/testing/multi_process.h"
#include "parallel/testing/rank_groups.h"

namespace tessera::parallel {
namespace {

using testing::RunRanks;

// fp32: the blockwise online softmax reorders sums; 1e-5 absolute on values of order 1.
constexpr double kAtol = 1e-5, kRtol = 1e-4;

absl::Status Close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  if (at::allclose(got, want, kRtol, kAtol)) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": max |diff| ", (got - want).abs().max().item<double>()));
}

absl::Status Check(int rank, int port, int sp, SpMode mode) {
  auto groups = testing::RankGroups(rank, port, {.sp = sp});
  if (!groups.ok()) return groups.status();
  at::manual_seed(7);
  const int64_t B = 2, H = 4, T = 8 * sp, d = 8, Tl = T / sp;
  at::Tensor q = at::randn({B, H, T, d}), k = at::randn({B, H, T, d}), v = at::randn({B, H, T, d});
  at::Tensor dout = at::randn({B, H, T, d});
  // Reference: the whole sequence on this rank.
  at::Tensor qf = q.clone().requires_grad_(true), kf = k.clone().requires_grad_(true), vf = v.clone().requires_grad_(true);
  at::Tensor ref = at::scaled_dot_product_attention(qf, kf, vf, {}, 0.0, /*is_causal=*/true);
  torch::autograd::backward({ref}, {dout});
  // This rank's block.
  auto mine = [&](const at::Tensor& t) { return t.narrow(2, rank * Tl, Tl).contiguous(); };
  at::Tensor ql = mine(q).requires_grad_(true), kl = mine(k).requires_grad_(true), vl = mine(v).requires_grad_(true);
  at::Tensor out;
  try {
    out = SequenceParallelAttention(mode, ql, kl, vl, groups->sp.get());
    torch::autograd::backward({out}, {mine(dout)});
  } catch (const c10::Error& e) {
    return absl::InternalError(e.what_without_backtrace());
  }
  const std::string tag = absl::StrCat(mode == SpMode::kRing ? "ring" : "all_to_all", " sp", sp, " rank ", rank);
  if (auto s = Close(out, mine(ref.detach()), tag + " output"); !s.ok()) return s;
  if (auto s = Close(ql.grad(), mine(qf.grad()), tag + " dq"); !s.ok()) return s;
  if (auto s = Close(kl.grad(), mine(kf.grad()), tag + " dk"); !s.ok()) return s;
  return Close(vl.grad(), mine(vf.grad()), tag + " dv");
}

// The mask of rows at `positions`, [T, T], as booleans.
std::vector<std::vector<bool>> MaskOf(const std::vector<int64_t>& positions) {
  const int64_t T = static_cast<int64_t>(positions.size());
  const at::Tensor mask = SpanCausalMask(PositionSpanEnds(at::tensor(positions).view({1, T})), 0, T, 0, T);
  std::vector<std::vector<bool>> out(T, std::vector<bool>(T));
  for (int64_t q = 0; q < T; ++q) {
    for (int64_t k = 0; k < T; ++k) out[q][k] = mask[0][0][q][k].item<bool>();
  }
  return out;
}

TEST(SpanCausalMaskTest, PackedRunsSeeOnlyTheirOwnEarlierTokens) {
  // Runs restart at position 0 (formats/data/token_dataset.h "Packing"); a window may begin inside one.
  const std::vector<int64_t> positions = {5, 6, 0, 1, 2, 0, 0, 1};
  const std::vector<int> run = {0, 0, 1, 1, 1, 2, 3, 3};
  const auto mask = MaskOf(positions);
  for (size_t q = 0; q < positions.size(); ++q) {
    for (size_t k = 0; k < positions.size(); ++k) {
      EXPECT_EQ(mask[q][k], k <= q && run[k] == run[q]) << "query " << q << ", key " << k;
    }
  }
}

TEST(SpanCausalMaskTest, SharedPromptBranchesSeeThePromptAndNotEachOther) {
  // DPO's shared-prompt row: prompt p0 p1 (positions 0 1), chosen branch p2 c0 c1 (2 3 4), rejected
  // branch p2 r0 (2 3), then padding (0 0).
  const std::vector<int64_t> positions = {0, 1, 2, 3, 4, 2, 3, 0, 0};
  const std::vector<char> part = {'p', 'p', 'c', 'c', 'c', 'r', 'r', 'x', 'y'};
  const auto mask = MaskOf(positions);
  for (size_t q = 0; q < positions.size(); ++q) {
    for (size_t k = 0; k < positions.size(); ++k) {
      const bool want = k <= q && (part[k] == part[q] || (part[k] == 'p' && part[q] != 'x' && part[q] != 'y'));
      EXPECT_EQ(mask[q][k], want) << "query " << q << " (" << part[q] << "), key " << k << " (" << part[k] << ")";
    }
  }
}

TEST(SequenceAttentionTest, RingTwoRanks) {
  EXPECT_TRUE(RunRanks(2, [](int r, int p) { return Check(r, p, 2, SpMode::kRing); }).ok());
}

TEST(SequenceAttentionTest, RingFourRanks) {
  EXPECT_TRUE(RunRanks(4, [](int r, int p) { return Check(r, p, 4, SpMode::kRing); }).ok());
}

TEST(SequenceAttentionTest, AllToAllTwoRanks) {
  EXPECT_TRUE(RunRanks(2, [](int r, int p) { return Check(r, p, 2, SpMode::kAllToAll); }).ok());
}

TEST(SequenceAttentionTest, AllToAllFourRanks) {
  EXPECT_TRUE(RunRanks(4, [](int r, int p) { return Check(r, p, 4, SpMode::kAllToAll); }).ok());
}

}  // namespace
}  // namespace tessera::parallel
