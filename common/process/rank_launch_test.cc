#include "common/process/rank_launch.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::process {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Not;
using ::testing::Pair;

TEST(RankLaunchTest, RendersEveryFlagOfTheRank) {
  RankLaunch l;
  l.binary = "bin/tessera-rank";
  l.spec_path = "/out/job.json";
  l.rank = 3, l.world_size = 4, l.local_rank = 1, l.store_port = 29500, l.threads = 2, l.timeout_s = 30;
  l.store_host = "198.18.0.1", l.host = "198.18.0.2";
  EXPECT_THAT(l.Argv(), ElementsAre("bin/tessera-rank", "--spec=/out/job.json", "--rank=3", "--world_size=4",
                                    "--local_rank=1", "--store_host=198.18.0.1", "--store_port=29500",
                                    "--host=198.18.0.2", "--threads=2", "--timeout_s=30"));
  l.dump_at_step = 5;
  EXPECT_THAT(l.Argv(), Contains("--dump_at_step=5"));
  l.peak_flops_per_device = 2.5e12;
  EXPECT_THAT(l.Argv(), Contains("--peak_flops_per_device=2.5e+12"));
}

TEST(RankLaunchTest, EnvironmentBoundsThreadsAndNamesTheInterface) {
  RankLaunch l;
  l.threads = 3;
  EXPECT_THAT(l.Env(), ElementsAre(Pair("MKL_NUM_THREADS", "3"), Pair("OMP_NUM_THREADS", "3")));
  EXPECT_THAT(l.Env(), Not(Contains(Pair("NCCL_SOCKET_IFNAME", ::testing::_))));
  l.interface = "veth1";
  EXPECT_THAT(l.Env(), Contains(Pair("NCCL_SOCKET_IFNAME", "=veth1")));
  EXPECT_THAT(l.Env(), Contains(Pair("GLOO_SOCKET_IFNAME", "veth1")));
}

}  // namespace
}  // namespace tessera::process
