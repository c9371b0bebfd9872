// The fencing token end to end (formats/checkpoint/attempt_fence.h): a real tessera-rank started as
// attempt 1 of a cluster job, as a worker starts it. When attempt 2 claims the output directory the
// running rank stops before its next step-log line or checkpoint commit, leaving nothing half
// written; a late start of attempt 1 is refused before it reads or writes anything.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/net/free_port.h"
#include "common/process/subprocess.h"
#include "formats/checkpoint/attempt_fence.h"
#include "formats/checkpoint/checkpoint_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cli.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

int Lines(const std::string& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Waits for `pid` up to `seconds`; its wait status, or -1 (then it is killed).
int WaitExit(pid_t pid, int seconds) {
  for (int i = 0; i < seconds * 20; ++i) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(-pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  return -1;
}

TEST(FencingTokenTest, ASupersededRankStopsWritingAndALateStartIsRefused) {
  const std::string dir = testing::FreshDir("fencing_token");
  const std::string data = testing::WriteTokenFile(dir, 20000);
  const std::string out = dir + "/out";
  const std::string spec = dir + "/spec.yaml";
  std::ofstream(spec) << "name: fenced\n"
                      << "model: {layers: 1, hidden: 32, heads: 2, vocab: 256, seq_len: 16}\n"
                      << "data: {path: " << data << "}\n"
                      << "train: {steps: 100000, micro_batch: 2, global_batch: 2, lr: 1e-3, schedule: constant}\n"
                      << "checkpoint: {every_steps: 5, keep: 2}\n"
                      << "output_dir: " << out << "\n";
  auto rank = [&](int attempt, const std::string& log) {
    process::SpawnOptions so;
    so.argv = {testing::Runfile("worker/rank/tessera-rank"), "--spec=" + spec, "--rank=0", "--world_size=1",
               absl::StrCat("--store_port=", net::PickFreePort()), "--fence_job=job-000001@1764000000000",
               absl::StrCat("--fence_attempt=", attempt)};
    so.log_path = log;
    return process::Spawn(so);
  };
  auto first = rank(1, dir + "/attempt1.log");
  ASSERT_TRUE(first.ok()) << first.status();
  // Training (a step every few ms here: checkpoints come and go with keep 2, so wait for any).
  ASSERT_TRUE(testing::WaitFor([&] {
    return Lines(out + "/steps.jsonl") >= 12 && !formats::checkpoint::ListCheckpoints(out + "/checkpoints").empty();
  }, 120)) << ReadAll(dir + "/attempt1.log");
  EXPECT_THAT(ReadAll(out + "/attempt.json"), HasSubstr("\"attempt\":1"));

  // Attempt 2 takes the directory over, as its rank 0 does at its start.
  ASSERT_TRUE(formats::checkpoint::AttemptFence(out, {"job-000001@1764000000000", 2}).Claim().ok());
  const int lines_at_claim = Lines(out + "/steps.jsonl");
  const int status = WaitExit(*first, 60);
  ASSERT_NE(status, -1) << "the superseded rank kept running";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << process::DescribeExit(status);
  EXPECT_THAT(ReadAll(dir + "/attempt1.log"),
              HasSubstr("attempt 1 of job job-000001@1764000000000 was superseded by attempt 2"));
  // At most the line it was writing when the marker changed; no checkpoint after it, none half
  // written (an uncommitted checkpoint's directory is removed).
  EXPECT_LE(Lines(out + "/steps.jsonl"), lines_at_claim + 1);
  const int64_t last_step = Lines(out + "/steps.jsonl");
  for (const auto& [step, path] : formats::checkpoint::ListCheckpoints(out + "/checkpoints")) {
    EXPECT_LE(step, last_step) << path;
  }
  for (const auto& e : fs::directory_iterator(out + "/checkpoints")) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }

  // Attempt 1 started late (its order delayed): refused before it touches anything.
  const int lines_before = Lines(out + "/steps.jsonl");
  auto late = rank(1, dir + "/late.log");
  ASSERT_TRUE(late.ok());
  const int late_status = WaitExit(*late, 60);
  EXPECT_TRUE(WIFEXITED(late_status) && WEXITSTATUS(late_status) == 1) << process::DescribeExit(late_status);
  EXPECT_THAT(ReadAll(dir + "/late.log"), HasSubstr("is older than attempt 2"));
  EXPECT_EQ(Lines(out + "/steps.jsonl"), lines_before) << "the step log is untouched";
  EXPECT_THAT(ReadAll(out + "/attempt.json"), HasSubstr("\"attempt\":2"));
}

}  // namespace
}  // namespace tessera
