#include "parallel/mesh/process_mesh.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::parallel {
namespace {

using ::testing::ElementsAre;

TEST(ProcessMeshTest, FirstAxisVariesFastest) {
  auto mesh = ProcessMesh::Create({.dp = 2, .pp = 2, .tp = 2, .sp = 1, .order = "tp-sp-pp-dp"});
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

TEST(ProcessMeshTest, GroupsPartitionTheWorld) {
  auto mesh = ProcessMesh::Create({.dp = 3, .pp = 1, .tp = 2, .sp = 2, .order = "dp-tp-sp-pp"});
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

TEST(ProcessMeshTest, RejectsBadShapes) {
  EXPECT_FALSE(ProcessMesh::Create({.dp = 0}).ok());
  EXPECT_FALSE(ProcessMesh::Create({.order = "tp-dp-pp"}).ok());
  EXPECT_FALSE(ProcessMesh::Create({.order = "tp-tp-pp-dp"}).ok());
}

}  // namespace
}  // namespace tessera::parallel
