#include "coordinator/placement.h"

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::coordinator {
namespace {

using layout::Axis;
using ::testing::HasSubstr;

layout::RankGenerator Ranks(int dp, int pp, int tp, int sp, layout::AxisOrder order = layout::kDefaultOrder) {
  layout::ParallelLayout l;
  l.dp = dp, l.pp = pp, l.tp = tp, l.sp = sp;
  l.order = order;
  return *layout::RankGenerator::Create(l);
}

// The old interface's cases: a world of `world` ranks with tp fastest.
absl::StatusOr<std::vector<Slot>> PlaceRanks(int world, int tp, const std::vector<FreeDevices>& free) {
  auto p = coordinator::PlaceRanks(Ranks(world / tp, 1, tp, 1), free);
  if (!p.ok()) return p.status();
  return p->slots;
}

TEST(PlacementTest, TensorParallelGroupsStayInsideOneWorker) {
  // Two workers with 3 free devices each; 4 ranks with tp=2: groups {0,1} and {2,3} must not split.
  auto slots = PlaceRanks(4, 2, {{"a", {0, 1, 2}}, {"b", {0, 1, 2}}});
  ASSERT_TRUE(slots.ok());
  ASSERT_EQ(slots->size(), 4u);
  EXPECT_EQ((*slots)[0].worker_id, (*slots)[1].worker_id);
  EXPECT_EQ((*slots)[2].worker_id, (*slots)[3].worker_id);
}

TEST(PlacementTest, FillsTheWorkerWithMostFreeDevicesFirst) {
  auto slots = PlaceRanks(2, 1, {{"small", {0}}, {"big", {1, 3}}});
  ASSERT_TRUE(slots.ok());
  EXPECT_EQ((*slots)[0].worker_id, "big");
  EXPECT_EQ((*slots)[0].local_rank, 1);
  EXPECT_EQ((*slots)[1].local_rank, 3);
}

TEST(PlacementTest, SplitsAGroupOnlyWhenNoWorkerHoldsIt) {
  auto slots = PlaceRanks(2, 2, {{"a", {0}}, {"b", {0}}});
  ASSERT_TRUE(slots.ok());
  EXPECT_NE((*slots)[0].worker_id, (*slots)[1].worker_id);
}

TEST(PlacementTest, TooFewDevicesIsAReason) {
  auto slots = PlaceRanks(8, 2, {{"a", {0, 1}}, {"b", {0, 1}}});
  ASSERT_FALSE(slots.ok());
  EXPECT_EQ(slots.status().message(), "needs 8 devices; 4 free on 2 workers");
}

// The case: dp=2 × tp=2 numbered dp fastest (dp-tp-sp-pp) on two workers of two devices.
// Ranks 0,1 are a dp pair; the tp groups are {0,2} and {1,3}, and each must sit on one worker.
TEST(PlacementTest, GroupsComeFromTheOrderNotFromConsecutiveRanks) {
  const layout::RankGenerator ranks = Ranks(2, 1, 2, 1, *layout::ParseOrder("dp-tp-sp-pp"));
  auto p = coordinator::PlaceRanks(ranks, {{"a", {0, 1}}, {"b", {0, 1}}});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->slots[0].worker_id, p->slots[2].worker_id);
  EXPECT_EQ(p->slots[1].worker_id, p->slots[3].worker_id);
  EXPECT_NE(p->slots[0].worker_id, p->slots[1].worker_id);
  EXPECT_THAT(p->explanation, HasSubstr("ranks numbered dp-tp-sp-pp"));
  EXPECT_THAT(p->explanation, HasSubstr("{0,2}→a {1,3}→b: each on one worker"));
}

// The worker of each rank, and the set of workers each group of `axis` touches.
std::vector<std::set<std::string>> WorkersOfGroups(const layout::RankGenerator& ranks, const Placement& p, Axis axis) {
  std::vector<std::set<std::string>> out;
  for (const auto& g : ranks.AllGroups(axis)) {
    std::set<std::string> w;
    for (int r : g) w.insert(p.slots[r].worker_id);
    out.push_back(w);
  }
  return out;
}

// Every order of the four axes: each device used once; every tp group on one worker; where a worker
// holds a whole tp × sp block it gets one; and with room for a whole pipeline (tp × pp) per worker,
// each pipeline on one worker.
TEST(PlacementTest, EveryOrderKeepsGroupsTogether) {
  layout::AxisOrder order = layout::kDefaultOrder;
  std::sort(order.begin(), order.end());
  int orders = 0;
  do {
    ++orders;
    const std::string name = layout::OrderName(order);
    {
      // dp2 pp2 tp2 sp2 on four workers of four devices: tp and sp groups each on one worker.
      const layout::RankGenerator ranks = Ranks(2, 2, 2, 2, order);
      std::vector<FreeDevices> free;
      for (const char* w : {"w0", "w1", "w2", "w3"}) free.push_back({w, {0, 1, 2, 3}});
      auto p = coordinator::PlaceRanks(ranks, free);
      ASSERT_TRUE(p.ok()) << name;
      std::set<std::pair<std::string, int>> devices;
      for (const Slot& s : p->slots) devices.insert({s.worker_id, s.local_rank});
      EXPECT_EQ(devices.size(), 16u) << name;
      for (const auto& w : WorkersOfGroups(ranks, *p, Axis::kTp)) EXPECT_EQ(w.size(), 1u) << name;
      for (const auto& w : WorkersOfGroups(ranks, *p, Axis::kSp)) EXPECT_EQ(w.size(), 1u) << name;
      EXPECT_THAT(p->explanation, HasSubstr("each on one worker")) << name;
    }
    {
      // dp2 pp2 tp2 on two workers of four devices: each pipeline (its two tp groups) on one worker.
      const layout::RankGenerator ranks = Ranks(2, 2, 2, 1, order);
      auto p = coordinator::PlaceRanks(ranks, {{"a", {0, 1, 2, 3}}, {"b", {0, 1, 2, 3}}});
      ASSERT_TRUE(p.ok()) << name;
      for (const auto& w : WorkersOfGroups(ranks, *p, Axis::kTp)) EXPECT_EQ(w.size(), 1u) << name;
      for (const auto& w : WorkersOfGroups(ranks, *p, Axis::kPp)) EXPECT_EQ(w.size(), 1u) << name;
      for (const auto& w : WorkersOfGroups(ranks, *p, Axis::kDp)) EXPECT_EQ(w.size(), 2u) << name;
    }
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(orders, 24);
}

// Expert parallelism: dp=4 × pp=2 with ep=2 on four workers of two devices. Ordered by dp, then pp,
// dp 0's two stages would fill one worker and dp 1's the next, splitting the ep group {dp 0, dp 1} of
// each stage; ordered by ep group first, each ep group's members come in turn and share a worker.
TEST(PlacementTest, ExpertParallelGroupsStayInsideOneWorker) {
  layout::ParallelLayout l;
  l.dp = 4, l.pp = 2, l.ep = 2;
  auto ranks = layout::RankGenerator::Create(l);
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  auto p = coordinator::PlaceRanks(*ranks, {{"a", {0, 1}}, {"b", {0, 1}}, {"c", {0, 1}}, {"d", {0, 1}}});
  ASSERT_TRUE(p.ok()) << p.status();
  for (const auto& group : ranks->AllExpertParallelGroups()) {
    std::set<std::string> workers;
    for (int r : group) workers.insert(p->slots[r].worker_id);
    EXPECT_EQ(workers.size(), 1u) << "ep group of rank " << group.front() << " spans workers";
  }
  EXPECT_THAT(p->explanation, HasSubstr("ep groups (tokens to their experts) each on one worker"));
}

TEST(PlacementTest, ExplainsAGroupThatHadToSpan) {
  auto p = coordinator::PlaceRanks(Ranks(1, 1, 4, 1), {{"a", {0, 1}}, {"b", {0, 1}}});
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->explanation, HasSubstr("1 of 1 span workers (no free worker held 4 devices)"));
}

// The coordinator hands PlaceRanks only the prefix of workers (by free devices, most first) that
// PlacementPrefix says suffices: on random clusters and layouts, that prefix places every rank on the
// same slot as the whole cluster, and a job that fits needs no worker beyond it.
TEST(PlacementTest, ThePrefixOfWorkersByFreeDevicesPlacesAsTheWholeCluster) {
  std::mt19937 rng(7);
  int compared = 0, shorter = 0;
  for (int round = 0; round < 3000; ++round) {
    const int workers = 1 + static_cast<int>(rng() % 12);
    std::vector<FreeDevices> free;
    for (int w = 0; w < workers; ++w) {
      FreeDevices f{"w" + std::to_string(100 + w), {}};
      const int devices = 1 + static_cast<int>(rng() % 8);
      for (int d = 0; d < devices; ++d) {
        if (rng() % 3 != 0) f.free_local_ranks.push_back(d);
      }
      if (!f.free_local_ranks.empty()) free.push_back(f);
    }
    const int tp = 1 << (rng() % 3), pp = 1 + static_cast<int>(rng() % 2), dp = 1 + static_cast<int>(rng() % 6);
    const layout::RankGenerator ranks = Ranks(dp, pp, tp, 1, rng() % 2 ? layout::kDefaultOrder : layout::AxisOrder{
        Axis::kDp, Axis::kTp, Axis::kSp, Axis::kPp});
    auto all = coordinator::PlaceRanks(ranks, free);
    // The coordinator's index order: most free first, ties in the order given (worker id).
    std::vector<FreeDevices> order = free;
    std::stable_sort(order.begin(), order.end(), [](const FreeDevices& a, const FreeDevices& b) {
      return a.free_local_ranks.size() > b.free_local_ranks.size();
    });
    PlacementPrefix prefix(ranks.world_size(), tp);
    std::vector<FreeDevices> taken;
    for (size_t i = 0; i < order.size(); ++i) {
      if (prefix.Enough(static_cast<int>(order[i].free_local_ranks.size()))) break;
      prefix.Add(static_cast<int>(order[i].free_local_ranks.size()));
      taken.push_back(order[i]);
    }
    if (!all.ok()) continue;  // Too few devices: the coordinator says so from its totals.
    ASSERT_TRUE(prefix.Enough(-1)) << "round " << round << ": every worker taken and still not enough";
    auto part = coordinator::PlaceRanks(ranks, taken);
    ASSERT_TRUE(part.ok()) << "round " << round << ": " << part.status();
    ASSERT_EQ(part->slots.size(), all->slots.size());
    for (size_t r = 0; r < all->slots.size(); ++r) {
      ASSERT_EQ(part->slots[r].worker_id, all->slots[r].worker_id) << "round " << round << " rank " << r;
      ASSERT_EQ(part->slots[r].local_rank, all->slots[r].local_rank) << "round " << round << " rank " << r;
    }
    ++compared;
    shorter += taken.size() < free.size();
  }
  EXPECT_GT(compared, 1000);
  EXPECT_GT(shorter, 300) << "the prefix is usually shorter than the cluster";
}

}  // namespace
}  // namespace tessera::coordinator
