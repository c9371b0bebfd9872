#include "layout/rank_generator.h"

#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::layout {
namespace {

using ::testing::ElementsAre;

absl::StatusOr<RankGenerator> Make(int dp, int pp, int tp, int sp, const char* order) {
  ParallelLayout l;
  l.dp = dp, l.pp = pp, l.tp = tp, l.sp = sp;
  auto o = ParseOrder(order);
  if (!o.ok()) return o.status();
  l.order = *o;
  return RankGenerator::Create(l);
}

TEST(RankGeneratorTest, FirstAxisVariesFastest) {
  auto mesh = Make(2, 2, 2, 1, "tp-sp-pp-dp");
  ASSERT_TRUE(mesh.ok());
  EXPECT_EQ(mesh->world_size(), 8);
  // rank = tp + 2·pp + 4·dp.
  EXPECT_THAT(mesh->GroupRanks(5, Axis::kTp), ElementsAre(4, 5));
  EXPECT_THAT(mesh->GroupRanks(5, Axis::kPp), ElementsAre(5, 7));
  EXPECT_THAT(mesh->GroupRanks(5, Axis::kDp), ElementsAre(1, 5));
  EXPECT_THAT(mesh->GroupRanks(5, Axis::kSp), ElementsAre(5));
  // Every rank of pp index 0 (any dp and tp).
  EXPECT_THAT(mesh->GroupRanks(5, std::vector<Axis>{Axis::kDp, Axis::kTp}), ElementsAre(0, 1, 4, 5));
  EXPECT_EQ(mesh->Coord(6, Axis::kPp), 1);
  EXPECT_EQ(mesh->Coord(6, Axis::kDp), 1);
  EXPECT_EQ(mesh->Coord(6, Axis::kTp), 0);
}

TEST(RankGeneratorTest, GroupsPartitionTheWorld) {
  auto mesh = Make(3, 1, 2, 2, "dp-tp-sp-pp");
  ASSERT_TRUE(mesh.ok());
  for (Axis axis : {Axis::kDp, Axis::kTp, Axis::kSp, Axis::kPp}) {
    std::vector<int> count(mesh->world_size(), 0);
    for (const auto& g : mesh->AllGroups(axis)) {
      EXPECT_EQ(static_cast<int>(g.size()), mesh->size(axis));
      for (int r : g) ++count[r];
    }
    for (int c : count) EXPECT_EQ(c, 1) << AxisName(axis);
  }
  EXPECT_THAT(mesh->GroupRanks(0, Axis::kDp), ElementsAre(0, 1, 2));
}

TEST(RankGeneratorTest, RejectsBadShapes) {
  EXPECT_FALSE(Make(0, 1, 1, 1, "tp-sp-pp-dp").ok());
  EXPECT_FALSE(Make(1, 1, 1, 1, "tp-dp-pp").ok());
  EXPECT_FALSE(Make(1, 1, 1, 1, "tp-tp-pp-dp").ok());
  EXPECT_FALSE(Make(1, 1, 1, 1, "tp-sp-pp-dp-dp").ok());
  EXPECT_FALSE(Make(1, 1, 1, 1, "").ok());
}

TEST(RankGeneratorTest, CoordinatesRoundTripForEveryOrder) {
  AxisOrder order = kDefaultOrder;
  std::sort(order.begin(), order.end());
  int orders = 0;
  do {
    ParallelLayout l;
    l.dp = 2, l.pp = 3, l.tp = 2, l.sp = 2;
    l.order = order;
    auto g = RankGenerator::Create(l);
    ASSERT_TRUE(g.ok());
    ++orders;
    for (int r = 0; r < g->world_size(); ++r) {
      std::array<int, kNumAxes> c{};
      for (Axis a : kAxes) c[static_cast<int>(a)] = g->Coord(r, a);
      EXPECT_EQ(g->RankAt(c), r) << OrderName(order);
    }
    // The fastest axis of the order is the one whose neighbours are adjacent ranks.
    EXPECT_THAT(g->GroupRanks(0, order[0]).size() > 1 ? g->GroupRanks(0, order[0])[1] : 1, 1) << OrderName(order);
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(orders, 24);
}

// Expert parallelism, for every order: an ep group is ep consecutive dp indices sharing every other
// coordinate, an expert's data group the dp indices of the same residue; the two meet only in the
// rank itself, and the ep groups partition the world.
TEST(RankGeneratorTest, ExpertGroupsComeFromDpForEveryOrder) {
  AxisOrder order = kDefaultOrder;
  std::sort(order.begin(), order.end());
  do {
    ParallelLayout l;
    l.dp = 6, l.pp = 1, l.tp = 2, l.sp = 2, l.ep = 3;
    l.order = order;
    auto g = RankGenerator::Create(l);
    ASSERT_TRUE(g.ok()) << g.status();
    std::vector<int> seen(g->world_size(), 0);
    for (const std::vector<int>& group : g->AllExpertParallelGroups()) {
      for (int r : group) ++seen[r];
    }
    EXPECT_THAT(seen, ::testing::Each(1)) << OrderName(order);
    for (int r = 0; r < g->world_size(); ++r) {
      const std::vector<int> ep = g->ExpertParallelGroup(r), edp = g->ExpertDataGroup(r);
      ASSERT_EQ(ep.size(), 3u);
      ASSERT_EQ(edp.size(), 2u);
      const int d = g->Coord(r, Axis::kDp);
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(g->Coord(ep[i], Axis::kDp), d / 3 * 3 + i) << OrderName(order) << " rank " << r;
        for (Axis a : {Axis::kPp, Axis::kTp, Axis::kSp}) EXPECT_EQ(g->Coord(ep[i], a), g->Coord(r, a));
      }
      for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(g->Coord(edp[i], Axis::kDp), d % 3 + 3 * i) << OrderName(order) << " rank " << r;
        for (Axis a : {Axis::kPp, Axis::kTp, Axis::kSp}) EXPECT_EQ(g->Coord(edp[i], a), g->Coord(r, a));
      }
      int both = 0;
      for (int x : ep) both += std::count(edp.begin(), edp.end(), x);
      EXPECT_EQ(both, 1);
    }
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST(RankGeneratorTest, ExpertParallelOneIsTheDpGroup) {
  auto g = Make(4, 1, 2, 1, "tp-sp-pp-dp");
  ASSERT_TRUE(g.ok());
  EXPECT_THAT(g->ExpertParallelGroup(3), ::testing::ElementsAre(3));
  EXPECT_EQ(g->ExpertDataGroup(3), g->GroupRanks(3, Axis::kDp));
  ParallelLayout l;
  l.dp = 4, l.ep = 3;
  EXPECT_FALSE(RankGenerator::Create(l).ok()) << "ep must divide dp";
}

TEST(RankGeneratorTest, OrderNamesRoundTrip) {
  auto o = ParseOrder("dp-tp-sp-pp");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(OrderName(*o), "dp-tp-sp-pp");
  EXPECT_EQ(ParseOrder("tp-dp-pp").status().message(),
            "'tp-dp-pp' must name dp, pp, sp and tp once each, e.g. tp-sp-pp-dp");
}

// The replicas of a rank's experts: every rank with the same pp and tp coordinates whose dp index is
// ≡ this one's mod ep, any sp index; checked by coordinates for every order.
TEST(RankGeneratorTest, ExpertReplicasSpanSpAndTheDpResidue) {
  AxisOrder order = kDefaultOrder;
  std::sort(order.begin(), order.end());
  do {
    ParallelLayout l;
    l.dp = 6, l.pp = 2, l.tp = 1, l.sp = 2, l.ep = 3;
    l.order = order;
    auto g = RankGenerator::Create(l);
    ASSERT_TRUE(g.ok()) << g.status();
    for (int r = 0; r < g->world_size(); ++r) {
      std::vector<int> want;
      for (int x = 0; x < g->world_size(); ++x) {
        if (g->Coord(x, Axis::kPp) == g->Coord(r, Axis::kPp) && g->Coord(x, Axis::kTp) == g->Coord(r, Axis::kTp) &&
            g->Coord(x, Axis::kDp) % 3 == g->Coord(r, Axis::kDp) % 3) {
          want.push_back(x);
        }
      }
      EXPECT_EQ(g->ExpertReplicaGroup(r), want) << OrderName(order) << " rank " << r;
      EXPECT_EQ(want.size(), 4u);
    }
  } while (std::next_permutation(order.begin(), order.end()));
  auto one = Make(2, 1, 2, 2, "tp-sp-pp-dp");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->ExpertReplicaGroup(3), one->GroupRanks(3, std::vector<Axis>{Axis::kDp, Axis::kSp}));
}

// A grid's axis groups: the tp index read with the last grid axis fastest; a group holds the ranks
// whose grid coordinates differ in that axis only, ranked by it.
TEST(RankGeneratorTest, TpGridAxisGroupsByGridCoordinates) {
  auto g = Make(2, 1, 12, 1, "dp-tp-sp-pp");
  ASSERT_TRUE(g.ok());
  const std::vector<int> grid = {3, 2, 2};
  auto coords = [&](int rank) {
    const int t = g->Coord(rank, Axis::kTp);
    return std::vector<int>{t / 4, (t / 2) % 2, t % 2};
  };
  for (int r = 0; r < g->world_size(); ++r) {
    for (int a = 0; a < 3; ++a) {
      auto members = g->TpGridAxisGroup(r, grid, a);
      ASSERT_TRUE(members.ok()) << members.status();
      ASSERT_EQ(static_cast<int>(members->size()), grid[a]);
      for (int k = 0; k < grid[a]; ++k) {
        const int m = (*members)[k];
        EXPECT_EQ(g->Coord(m, Axis::kDp), g->Coord(r, Axis::kDp));
        std::vector<int> want = coords(r);
        want[a] = k;
        EXPECT_EQ(coords(m), want) << "rank " << r << " axis " << a;
      }
    }
  }
  EXPECT_FALSE(g->TpGridAxisGroup(0, {2, 2}, 0).ok());
  EXPECT_FALSE(g->TpGridAxisGroup(0, grid, 3).ok());
}

}  // namespace
}  // namespace tessera::layout
