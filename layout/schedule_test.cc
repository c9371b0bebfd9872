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

// Per rank: every (micro-batch, chunk)'s F, B and W exactly once, B after F and W after B; every
// rank's B of a micro-batch after the next stage's (checked by the simulation completing).
void ExpectZeroBubbleComplete(const std::vector<std::vector<PipeAction>>& ranks, int m, int chunks = 1) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    std::set<std::pair<int, int>> f, b, w;
    for (const PipeAction& a : ranks[r]) {
      EXPECT_TRUE(a.chunk >= 0 && a.chunk < chunks) << "rank " << r << ": chunk " << a.chunk;
      const auto key = std::make_pair(a.micro_batch, a.chunk);
      if (a.op == PipeOp::kForward) {
        EXPECT_TRUE(f.insert(key).second) << "rank " << r << ": F twice";
      } else if (a.op == PipeOp::kBackward) {
        EXPECT_TRUE(f.count(key)) << "rank " << r << ": B before F";
        EXPECT_TRUE(b.insert(key).second) << "rank " << r << ": B twice";
      } else {
        EXPECT_TRUE(b.count(key)) << "rank " << r << ": W before B";
        EXPECT_TRUE(w.insert(key).second) << "rank " << r << ": W twice";
      }
    }
    EXPECT_EQ(f.size(), static_cast<size_t>(m * chunks));
    EXPECT_EQ(b.size(), static_cast<size_t>(m * chunks));
    EXPECT_EQ(w.size(), static_cast<size_t>(m * chunks));
    // The last micro-batch's W's close the rank's actions (the runner accumulates them together).
    ASSERT_GE(ranks[r].size(), static_cast<size_t>(chunks));
    for (int k = 1; k <= chunks; ++k) {
      const PipeAction& a = ranks[r][ranks[r].size() - k];
      EXPECT_TRUE(a.op == PipeOp::kWeight && a.micro_batch == m - 1) << "rank " << r << ": action " << -k;
    }
  }
}

TEST(ScheduleTest, ZeroBubbleH1RunsEveryActionOnceWithoutDeadlockWithinOneFOneBsMemoryAndHalvesItsBubble) {
  for (int pp : {2, 3, 4, 8}) {
    for (int m : {1, 2, 4, 8, 16}) {
      SCOPED_TRACE(testing::Message() << "pp " << pp << ", m " << m);
      const PipeCosts costs;  // F = B = W.
      auto zb = MakeZeroBubbleH1(pp, m, costs);
      ASSERT_TRUE(zb.ok()) << zb.status();
      ExpectZeroBubbleComplete(*zb, m);
      const SimulatedStep z = SimulateSchedule(*zb, 1, costs);
      ASSERT_TRUE(z.completes);
      const SimulatedStep one = SimulateSchedule(AllRanks(PipeSchedule::kOneFOneB, pp, 1, m), 1, costs);
      ASSERT_TRUE(one.completes);
      // The same work: 1F1B's backward is B + W.
      EXPECT_NEAR(one.makespan * (1 - one.bubble), z.makespan * (1 - z.bubble), 1e-9);
      // Activations (forwarded, not yet B'd) within 1F1B's on every rank; W's inputs of at most pp
      // micro-batches kept, whatever m.
      for (int r = 0; r < pp; ++r) EXPECT_LE(z.peak_weight_pending[r], pp) << "rank " << r;
      for (int r = 0; r < pp; ++r) EXPECT_LE(z.peak_in_flight[r], one.peak_in_flight[r]) << "rank " << r;
      // Never slower than 1F1B. With m ≥ 2·pp the step takes what the last stage cannot avoid — its
      // wait for the first forward, (pp−1)·F, then all its work — and so at most half of 1F1B's bubble
      // (fewer micro-batches leave bubbles no reordering fills: the last micro-batch's forward and
      // backward still cross every stage; e.g. pp 4, m 4: 18 against a bound of 15, 1F1B 21).
      EXPECT_LE(z.makespan, one.makespan);
      if (m >= 2 * pp) {
        EXPECT_DOUBLE_EQ(z.makespan, (pp - 1) * costs.forward + m * (costs.forward + costs.backward + costs.weight));
        EXPECT_LE(z.bubble, 0.5 * one.bubble) << "1F1B " << one.bubble << ", ZB-H1 " << z.bubble;
      }
    }
  }
}

TEST(ScheduleTest, ZeroBubbleH1FollowsItsCostModel) {
  // W cheap: little to fill the bubbles with; W dear: more than enough. Either way the schedule is
  // valid, keeps 1F1B's activation bound and is no slower than 1F1B on the same costs.
  for (const PipeCosts& costs : {PipeCosts{1, 1, 0.25}, PipeCosts{1, 2, 2}, PipeCosts{2, 1, 1}}) {
    SCOPED_TRACE(testing::Message() << "F " << costs.forward << " B " << costs.backward << " W " << costs.weight);
    auto zb = MakeZeroBubbleH1(4, 8, costs);
    ASSERT_TRUE(zb.ok()) << zb.status();
    ExpectZeroBubbleComplete(*zb, 8);
    const SimulatedStep z = SimulateSchedule(*zb, 1, costs);
    const SimulatedStep one = SimulateSchedule(AllRanks(PipeSchedule::kOneFOneB, 4, 1, 8), 1, costs);
    ASSERT_TRUE(z.completes);
    EXPECT_LE(z.makespan, one.makespan + 1e-9);
    for (int r = 0; r < 4; ++r) EXPECT_LE(z.peak_in_flight[r], one.peak_in_flight[r]);
  }
  EXPECT_FALSE(MakeZeroBubbleH1(0, 4, {}).ok());
  EXPECT_FALSE(MakeZeroBubbleH1(2, 4, PipeCosts{1, 1, 0}).ok());
}

// zb1p as a job runs it: every rank makes its row of the same ZB-H1 schedule (F = B = W).
TEST(ScheduleTest, MakeScheduleGivesEachRankItsRowOfZeroBubbleH1) {
  for (int pp : {2, 4}) {
    for (int m : {4, 8}) {
      auto zb = MakeZeroBubbleH1(pp, m, PipeCosts{});
      ASSERT_TRUE(zb.ok());
      const auto ranks = AllRanks(PipeSchedule::kZeroBubbleH1, pp, 1, m);
      ASSERT_EQ(ranks.size(), static_cast<size_t>(pp));
      for (int r = 0; r < pp; ++r) EXPECT_EQ(ranks[r], (*zb)[r]) << "pp " << pp << " m " << m << " rank " << r;
      ExpectZeroBubbleComplete(ranks, m);
    }
  }
  auto two = MakeSchedule(PipeSchedule::kZeroBubbleH1, 2, 2, 0, 4);
  EXPECT_NE(two.status().message().find("parallel.pp_chunks: 2 needs pp_schedule interleaved (zb1p runs one chunk per stage)"),
            std::string::npos)
      << two.status();
}

// ZB-V: each chunk is half a stage, so F = B = W = 1/2 per chunk against ZB-H1's and 1F1B's 1 per stage.
TEST(ScheduleTest, ZeroBubbleVRunsEveryActionOnceWithoutDeadlockWithinOneFOneBsFirstRankMemory) {
  const PipeCosts half{0.5, 0.5, 0.5}, whole;
  for (int pp : {2, 3, 4, 8}) {
    for (int m : {1, 2, 4, 8, 16}) {
      SCOPED_TRACE(testing::Message() << "pp " << pp << ", m " << m);
      auto zv = MakeZeroBubbleV(pp, m, half);
      ASSERT_TRUE(zv.ok()) << zv.status();
      ExpectZeroBubbleComplete(*zv, m, 2);
      const SimulatedStep v = SimulateSchedule(*zv, 2, half, StagePlacement::kV);
      ASSERT_TRUE(v.completes);
      auto zh = MakeZeroBubbleH1(pp, m, whole);
      ASSERT_TRUE(zh.ok());
      const SimulatedStep h = SimulateSchedule(*zh, 1, whole);
      const SimulatedStep one = SimulateSchedule(AllRanks(PipeSchedule::kOneFOneB, pp, 1, m), 1, whole);
      // The same work as 1F1B's.
      EXPECT_NEAR(one.makespan * (1 - one.bubble), v.makespan * (1 - v.bubble), 1e-9);
      // At most 2·pp chunk activations on every rank: pp stages' worth, 1F1B's first rank's. The W's
      // kept: fewer than 2·pp when a forward starts, and the B's that follow within the activations'
      // bound.
      for (int r = 0; r < pp; ++r) {
        EXPECT_LE(v.peak_in_flight[r], 2 * pp) << "rank " << r;
        EXPECT_LE(v.peak_weight_pending[r], 4 * pp) << "rank " << r;
      }
      // Never slower than 1F1B; with few micro-batches (m ≤ pp) never slower than ZB-H1, whose first
      // and last stages wait for a whole stage's forward per hop (e.g. pp 4, m 4: 15 against 18); with
      // many, within one chunk action of it (the greedy rule is not optimal: pp 8, m 16 gives 55.5,
      // ZB-H1 55) and at most half of 1F1B's bubble.
      EXPECT_LE(v.makespan, one.makespan);
      if (m <= pp) {
        EXPECT_LE(v.makespan, h.makespan);
      }
      EXPECT_LE(v.makespan, h.makespan + half.forward);
      if (m >= 2 * pp) {
        EXPECT_LE(v.bubble, 0.5 * one.bubble) << "1F1B " << one.bubble << ", ZB-V " << v.bubble;
      }
    }
  }
  EXPECT_FALSE(MakeZeroBubbleV(0, 4, {}).ok());
  EXPECT_FALSE(MakeZeroBubbleV(2, 4, PipeCosts{1, 0, 1}).ok());
}

TEST(ScheduleTest, ZeroBubbleVFollowsItsCostModel) {
  for (const PipeCosts& costs : {PipeCosts{1, 1, 0.25}, PipeCosts{1, 2, 2}, PipeCosts{2, 1, 1}, PipeCosts{0.3, 1, 3}}) {
    for (int pp : {2, 4}) {
      SCOPED_TRACE(testing::Message() << "pp " << pp << " F " << costs.forward << " B " << costs.backward << " W "
                                      << costs.weight);
      auto zv = MakeZeroBubbleV(pp, 8, costs);
      ASSERT_TRUE(zv.ok()) << zv.status();
      ExpectZeroBubbleComplete(*zv, 8, 2);
      const SimulatedStep v = SimulateSchedule(*zv, 2, costs, StagePlacement::kV);
      ASSERT_TRUE(v.completes);
      for (int r = 0; r < pp; ++r) EXPECT_LE(v.peak_in_flight[r], 2 * pp) << "rank " << r;
    }
  }
}

// zbv as a job runs it: every rank makes its row of the same ZB-V schedule (F = B = W).
TEST(ScheduleTest, MakeScheduleGivesEachRankItsRowOfZeroBubbleV) {
  for (int pp : {2, 4}) {
    auto zv = MakeZeroBubbleV(pp, 8, PipeCosts{});
    ASSERT_TRUE(zv.ok());
    const auto ranks = AllRanks(PipeSchedule::kZeroBubbleV, pp, 2, 8);
    for (int r = 0; r < pp; ++r) EXPECT_EQ(ranks[r], (*zv)[r]) << "pp " << pp << " rank " << r;
  }
  for (int chunks : {1, 3}) {
    auto bad = MakeSchedule(PipeSchedule::kZeroBubbleV, 2, chunks, 0, 4);
    EXPECT_NE(bad.status().message().find("parallel.pp_chunks: " + std::to_string(chunks) +
                                          " (pp_schedule zbv runs two chunks per stage)"),
              std::string::npos)
        << bad.status();
  }
}

TEST(StageLayoutTest, VPlacementPutsBothEndsOnTheFirstRank) {
  auto l = StageLayout::Create(8, 4, 2, {}, StagePlacement::kV);
  ASSERT_TRUE(l.ok()) << l.status();
  // Virtual stages 0..7 of one block each: rank r holds r and 7 − r.
  for (int r = 0; r < 4; ++r) {
    auto chunks = l->ChunksOf(r);
    ASSERT_EQ(chunks.size(), 2u);
    EXPECT_EQ(chunks[0].virtual_stage, r);
    EXPECT_EQ(chunks[1].virtual_stage, 7 - r);
    EXPECT_EQ(chunks[1].first_layer, 7 - r);
    EXPECT_EQ(l->RankOfStage(r), r);
    EXPECT_EQ(l->RankOfStage(7 - r), r);
    EXPECT_EQ(l->ChunkOfStage(7 - r), 1);
    EXPECT_EQ(VirtualStageOf(StagePlacement::kV, 4, r, 1), 7 - r);
  }
  EXPECT_TRUE(l->ChunksOf(0)[0].embedding);
  EXPECT_TRUE(l->ChunksOf(0)[1].head);
  EXPECT_EQ(l->RankOfLayer(4), 3);
  EXPECT_EQ(l->RankOfLayer(6), 1);
  auto one = StageLayout::Create(8, 4, 1, {}, StagePlacement::kV);
  EXPECT_NE(one.status().message().find("zbv runs two chunks per stage"), std::string::npos) << one.status();
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
  EXPECT_NE(few.status().message().find("virtual stages need model.layers ≥ 4"), std::string::npos) << few.status();
  auto sum = StageLayout::Create(6, 2, 1, {4, 3});
  EXPECT_NE(sum.status().message().find("parallel.pp_layers: sums to 7"), std::string::npos) << sum.status();
  auto zero = StageLayout::Create(6, 2, 1, {6, 0});
  EXPECT_NE(zero.status().message().find("parallel.pp_layers[1]"), std::string::npos) << zero.status();
  auto n = StageLayout::Create(6, 2, 1, {6});
  EXPECT_NE(n.status().message().find("one per virtual stage"), std::string::npos) << n.status();
}

}  // namespace
}  // namespace tessera::layout
