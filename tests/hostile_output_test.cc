// A user's OUTPUT_DIR is theirs to fill with anything before they submit. With real daemons (a
// coordinator, one worker of two CPU devices, the CLI): a job whose OUTPUT_DIR/steps.jsonl is a FIFO
// fails with a reason naming the file, while a second job on the same worker trains to SUCCEEDED and
// the worker never misses a heartbeat (its last heartbeat, sampled all along, is never older than the
// coordinator's heartbeat timeout; before the fix the worker's loop thread waited on the FIFO forever,
// the worker was LOST and both jobs FAILED).
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/cli.h"
#include "tests/testing/local_cluster.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// The age of the worker's last heartbeat as the coordinator records it (-1: unknown).
int64_t HeartbeatAgeMs(testing::LocalCluster& cluster, const std::string& name) {
  const auto w = nlohmann::json::parse(cluster.Cli({"--output=json", "workers"}).output, nullptr, false);
  if (w.is_discarded() || !w.contains("workers")) return -1;
  for (const auto& x : w["workers"]) {
    if (x.value("name", "") != name || x.value("state", "") != "STATE_ALIVE") continue;
    const auto& field = x["last_heartbeat_unix_ms"];  // int64 travels as a JSON string.
    const int64_t last = field.is_string() ? std::stoll(field.get<std::string>()) : field.get<int64_t>();
    return absl::ToUnixMillis(absl::Now()) - last;
  }
  return -1;
}

TEST(HostileOutputTest, AFifoStepLogFailsItsJobWhileTheWorkerAndItsOtherJobCarryOn) {
  const std::string dir = testing::FreshDir("hostile_output");
  testing::LocalCluster cluster(dir);
  ASSERT_TRUE(cluster.StartCoordinator());
  ASSERT_TRUE(cluster.StartWorker("w", 2));
  ASSERT_TRUE(cluster.WaitAlive({"w"}));
  const std::string data = testing::WriteTokenFile(dir, 40000);
  const std::string spec = dir + "/spec.yaml";
  std::ofstream(spec) << "name: hostile\n"
                      << "model: {layers: 2, hidden: 64, heads: 4, vocab: 256, seq_len: 32}\n"
                      << "data: {path: " << data << "}\n"
                      << "train: {steps: 60, micro_batch: 2, global_batch: 2, lr: 2e-3, schedule: constant}\n";
  // The good job first, so that it is running on the worker when the other one is placed.
  const std::string good_out = dir + "/good", bad_out = dir + "/bad";
  auto good = cluster.Cli({"submit", spec, "--set", "output_dir=" + good_out});
  ASSERT_EQ(good.exit_code, 0) << good.output;
  ASSERT_TRUE(testing::WaitFor([&] { return cluster.Job("job-000001").value("state", "") == "JOB_STATE_RUNNING"; }, 30));
  fs::create_directories(bad_out);
  ASSERT_EQ(mkfifo((bad_out + "/steps.jsonl").c_str(), 0644), 0);
  auto bad = cluster.Cli({"submit", spec, "--set", "output_dir=" + bad_out});
  ASSERT_EQ(bad.exit_code, 0) << bad.output;

  int64_t oldest = 0;  // The oldest heartbeat age seen while both jobs were alive.
  int samples = 0;
  ASSERT_TRUE(testing::WaitFor([&] {
    const int64_t age = HeartbeatAgeMs(cluster, "w");
    oldest = std::max(oldest, age < 0 ? int64_t{1} << 40 : age);
    ++samples;
    return testing::LocalCluster::Ended(cluster.Job("job-000001")) &&
           testing::LocalCluster::Ended(cluster.Job("job-000002"));
  }, 180)) << cluster.Job("job-000001").dump() << cluster.Job("job-000002").dump();
  const auto bad_job = cluster.Job("job-000002");
  EXPECT_EQ(bad_job.value("state", ""), "JOB_STATE_FAILED");
  EXPECT_THAT(bad_job.value("reason", ""), HasSubstr(bad_out + "/steps.jsonl: is a FIFO, not a regular file"));
  EXPECT_EQ(cluster.Job("job-000001").value("state", ""), "JOB_STATE_SUCCEEDED");
  EXPECT_GT(samples, 3);
  // Heartbeats every second; the coordinator's clock and ours are one machine's. The age includes the
  // CLI's own round trip; 4.5 s (below the coordinator's 5 s heartbeat timeout: a worker that missed
  // its heartbeats for that long is LOST) leaves room for a loaded 2-core machine, while a stalled
  // loop thread leaves the worker LOST (age 2^40) for good.
  EXPECT_LT(oldest, 4500) << "the worker missed heartbeats";
  EXPECT_EQ(HeartbeatAgeMs(cluster, "w") >= 0, true) << "the worker is still ALIVE";
}

}  // namespace
}  // namespace tessera
