#include "layout/schedule.h"

#include <set>
#include <tuple>

#include "gtest/gtest.h"
#include "layout/stage_layout.h"

namespace tessera::layout {
namespace {

std::vector<std::vector<PipeAction>> AllRanks(PipeSchedule kind, int pp, int chunks, int m) {
  std::vector<std::vector<PipeAction>> out;
  for (int r = 0; r < pp; ++r) {
    auto s = MakeSchedule(kind, pp, chunks, r, m);
    EXPECT_TRUE(s.ok()) << s.status();
    out.push_back(s.ok() ? *s : std::vector<PipeAction>{});
  }
  return out;
}

// Every (micro-batch, chunk) forwarded once and backwarded once, backward after forward.
void ExpectComplete(const std::vector<std::vector<PipeAction>>& ranks, int chunks, int m) {
  for (const auto& actions : ranks) {
    std::set<std::pair<int, int>> forwarded, backwarded;
    for (const PipeAction& a : actions) {
      const auto key = std::make_pair(a.micro_batch, a.chunk);
      if (a.op == PipeOp::kForward) {
        EXPECT_TRUE(forwarded.insert(key).second) << "forward twice";
      } else {
        EXPECT_TRUE(forwarded.count(key)) << "backward before forward";
        EXPECT_TRUE(backwarded.insert(key).second) << "backward twice";
      }
    }
    EXPECT_EQ(forwarded.size(), static_cast<size_t>(m * chunks));
    EXPECT_EQ(backwarded.size(), static_cast<size_t>(m * chunks));
  }
}

TEST(ScheduleTest, OneFOneBOrderOnFourStages) {
  auto s = MakeSchedule(PipeSchedule::kOneFOneB, 4, 1, 1, 4);
  ASSERT_TRUE(s.ok());
  // Rank 1 of 4: two warm-up forwards, then F2 B0 F3 B1, then B2 B3.
  std::vector<PipeAction> want = {{PipeOp::kForward, 0, 0},  {PipeOp::kForward, 1, 0},  {PipeOp::kForward, 2, 0},
                                  {PipeOp::kBackward, 0, 0}, {PipeOp::kForward, 3, 0},  {PipeOp::kBackward, 1, 0},
                                  {PipeOp::kBackward, 2, 0}, {PipeOp::kBackward, 3, 0}};
  EXPECT_EQ(*s, want);
}

// The bubble of 1F1B is (p−1)/(m+p−1) when a backward costs twice a forward, and rank r holds at most
// p−r micro-batches' activations.
TEST(ScheduleTest, OneFOneBCompletesWithTheKnownBubble) {
  for (int pp : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 3, 4, 8, 16}) {
      auto ranks = AllRanks(PipeSchedule::kOneFOneB, pp, 1, m);
      ExpectComplete(ranks, 1, m);
      SimulatedStep sim = SimulateSchedule(ranks, 1, 1.0, 2.0);
      ASSERT_TRUE(sim.completes) << "pp " << pp << " m " << m;
      EXPECT_NEAR(sim.makespan, 3.0 * (m + pp - 1), 1e-9) << "pp " << pp << " m " << m;
      EXPECT_NEAR(sim.bubble, (pp - 1.0) / (m + pp - 1.0), 1e-9);
      for (int r = 0; r < pp; ++r) EXPECT_EQ(sim.peak_in_flight[r], std::min(pp - r, m)) << r;
    }
  }
}

// Interleaving v chunks divides the bubble by v: (p−1)/(v·m+p−1) with per-chunk costs 1/v and 2/v.
TEST(ScheduleTest, InterleavedCompletesWithTheSmallerBubble) {
  for (int pp : {2, 4}) {
    for (int chunks : {2, 3}) {
      for (int groups : {2, 3, 4}) {
        const int m = pp * groups;
        auto ranks = AllRanks(PipeSchedule::kInterleaved, pp, chunks, m);
        ExpectComplete(ranks, chunks, m);
        SimulatedStep sim = SimulateSchedule(ranks, chunks, 1.0 / chunks, 2.0 / chunks);
        ASSERT_TRUE(sim.completes) << "pp " << pp << " chunks " << chunks << " m " << m;
        EXPECT_NEAR(sim.bubble, (pp - 1.0) / (chunks * m + pp - 1.0), 1e-9)
            << "pp " << pp << " chunks " << chunks << " m " << m;
      }
    }
  }
  // m == pp: all forwards first, then all backwards; still completes.
  auto ranks = AllRanks(PipeSchedule::kInterleaved, 4, 2, 4);
  ExpectComplete(ranks, 2, 4);
  EXPECT_TRUE(SimulateSchedule(ranks, 2, 0.5, 1.0).completes);
}

TEST(ScheduleTest, SimulationDetectsADeadlock) {
  // Rank 1 waits for a backward of micro-batch 1 before running its forward: rank 0 never sends it.
  std::vector<std::vector<PipeAction>> ranks = {
      {{PipeOp::kForward, 0, 0}, {PipeOp::kBackward, 0, 0}},
      {{PipeOp::kBackward, 0, 0}, {PipeOp::kForward, 0, 0}},
  };
  EXPECT_FALSE(SimulateSchedule(ranks, 1, 1, 2).completes);
}

TEST(ScheduleTest, RejectsImpossibleSchedules) {
  auto a = MakeSchedule(PipeSchedule::kInterleaved, 4, 2, 0, 6);
  EXPECT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("multiple of pp"), std::string::npos) << a.status();
  auto b = MakeSchedule(PipeSchedule::kInterleaved, 2, 1, 0, 4);
  EXPECT_NE(b.status().message().find("parallel.pp_chunks"), std::string::npos) << b.status();
  auto c = MakeSchedule(PipeSchedule::kOneFOneB, 2, 2, 0, 4);
  EXPECT_NE(c.status().message().find("interleaved"), std::string::npos) << c.status();
}

TEST(StageLayoutTest, BalancedWithExtraLayersFirst) {
  auto l = StageLayout::Create(10, 4, 1);
  ASSERT_TRUE(l.ok());
  std::vector<int> counts, firsts;
  for (int s = 0; s < 4; ++s) counts.push_back(l->virtual_stage(s).num_layers), firsts.push_back(l->virtual_stage(s).first_layer);
  EXPECT_EQ(counts, (std::vector<int>{3, 3, 2, 2}));
  EXPECT_EQ(firsts, (std::vector<int>{0, 3, 6, 8}));
  EXPECT_TRUE(l->virtual_stage(0).embedding);
  EXPECT_FALSE(l->virtual_stage(0).head);
  EXPECT_TRUE(l->virtual_stage(3).head);
  EXPECT_EQ(l->RankOfLayer(7), 2);
}

TEST(StageLayoutTest, InterleavedChunksAreNotAdjacent) {
  auto l = StageLayout::Create(8, 2, 2);
  ASSERT_TRUE(l.ok());
  auto r1 = l->ChunksOf(1);
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(r1[0].virtual_stage, 1);
  EXPECT_EQ(r1[0].first_layer, 2);
  EXPECT_EQ(r1[1].virtual_stage, 3);
  EXPECT_EQ(r1[1].first_layer, 6);
  EXPECT_TRUE(r1[1].head);
  EXPECT_TRUE(l->ChunksOf(0)[0].embedding);
}

TEST(StageLayoutTest, ExplicitListAndErrors) {
  auto l = StageLayout::Create(6, 2, 1, {4, 2});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->virtual_stage(1).first_layer, 4);
  auto few = StageLayout::Create(3, 2, 2);
  EXPECT_NE(few.status().message().find("at least 4 layers"), std::string::npos) << few.status();
  auto sum = StageLayout::Create(6, 2, 1, {4, 3});
  EXPECT_NE(sum.status().message().find("parallel.pp_layers: sums to 7"), std::string::npos) << sum.status();
  auto zero = StageLayout::Create(6, 2, 1, {6, 0});
  EXPECT_NE(zero.status().message().find("parallel.pp_layers[1]"), std::string::npos) << zero.status();
  auto n = StageLayout::Create(6, 2, 1, {6});
  EXPECT_NE(n.status().message().find("one per virtual stage"), std::string::npos) << n.status();
}

}  // namespace
}  // namespace tessera::layout
