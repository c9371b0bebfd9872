// FreeDeviceIndex: totals and placement's order per device kind and pool follow every change of a
// worker's contribution (devices used and freed, lost and back, moved to another pool), and Difference
// finds an index that missed one.
#include "coordinator/free_device_index.h"

#include <set>
#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace tessera::coordinator {
namespace {

const PoolKey kCpu{v1::DEVICE_KIND_CPU, "default"};
const PoolKey kCpuA{v1::DEVICE_KIND_CPU, "a"};
const PoolKey kCuda{v1::DEVICE_KIND_CUDA, "default"};

FreeDeviceIndex::Worker Alive(const PoolKey& key, int devices, int free) { return {true, key, devices, free}; }

TEST(FreeDeviceIndexTest, TotalsAndOrderFollowEveryChange) {
  FreeDeviceIndex index;
  EXPECT_EQ(index.Free(kCpu), 0);
  EXPECT_TRUE(index.ByFree(kCpu).empty());
  index.Set("w2", Alive(kCpu, 4, 4));
  index.Set("w1", Alive(kCpu, 4, 4));
  index.Set("w3", Alive(kCpu, 8, 2));
  index.Set("g1", Alive(kCuda, 8, 8));
  // Most free first, then by id.
  using Order = std::set<std::pair<int, std::string>>;
  EXPECT_EQ(index.ByFree(kCpu), (Order{{-4, "w1"}, {-4, "w2"}, {-2, "w3"}}));
  EXPECT_EQ(index.Free(kCpu), 10);
  EXPECT_EQ(index.Devices(kCpu), 16);
  EXPECT_EQ(index.Free(kCuda), 8);
  // w1 uses all its devices: it leaves the order, the totals follow.
  index.Set("w1", Alive(kCpu, 4, 0));
  EXPECT_EQ(index.ByFree(kCpu), (Order{{-4, "w2"}, {-2, "w3"}}));
  EXPECT_EQ(index.Free(kCpu), 6);
  EXPECT_EQ(index.Devices(kCpu), 16);
  // w2 is lost: none of its devices count; back, they count again.
  index.Set("w2", {false, kCpu, 4, 4});
  EXPECT_EQ(index.Free(kCpu), 2);
  EXPECT_EQ(index.Devices(kCpu), 12);
  index.Set("w2", {false, kCpu, 4, 4});  // Lost twice: nothing changes.
  EXPECT_EQ(index.Devices(kCpu), 12);
  index.Set("w2", Alive(kCpu, 4, 3));
  EXPECT_EQ(index.ByFree(kCpu), (Order{{-3, "w2"}, {-2, "w3"}}));
  EXPECT_EQ(index.Free(kCpu), 5);
  // w3 moves to pool "a" (a new registration).
  index.Set("w3", Alive(kCpuA, 8, 8));
  EXPECT_EQ(index.ByFree(kCpu), (Order{{-3, "w2"}}));
  EXPECT_EQ(index.Free(kCpu), 3);
  EXPECT_EQ(index.Devices(kCpu), 8);
  EXPECT_EQ(index.Free(kCpuA), 8);
  EXPECT_EQ(index.Free(kCuda), 8);  // Other kinds untouched throughout.
}

TEST(FreeDeviceIndexTest, DifferenceFindsAMissedChange) {
  FreeDeviceIndex a, b;
  a.Set("w1", Alive(kCpu, 4, 4));
  b.Set("w1", Alive(kCpu, 4, 4));
  EXPECT_EQ(a.Difference(b), "");
  a.Set("w1", Alive(kCpu, 4, 1));  // A placement b missed.
  EXPECT_EQ(a.Difference(b), "kind 1 pool default: 1 free of 4 on 1 workers; the other: 4 of 4 on 1");
  b.Set("w1", Alive(kCpu, 4, 1));
  EXPECT_EQ(a.Difference(b), "");
  // A key emptied in one and never present in the other is equal.
  a.Set("g1", Alive(kCuda, 2, 2));
  a.Set("g1", {false, kCuda, 2, 2});
  EXPECT_EQ(a.Difference(b), "");
  EXPECT_EQ(b.Difference(a), "");
  // Same totals, other workers: the order differs.
  FreeDeviceIndex c, d;
  c.Set("w1", Alive(kCpu, 2, 2));
  d.Set("w2", Alive(kCpu, 2, 2));
  EXPECT_NE(c.Difference(d), "");
}

}  // namespace
}  // namespace tessera::coordinator
