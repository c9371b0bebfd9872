// Asynchronous checkpoints (checkpoint.async) through the real CLI and rank processes: every file of
// every checkpoint equals the synchronous checkpoint's of the same step, byte for byte, in the layouts
// whose files differ (per-rank optimizer shards voted through files with ZeRO-2 and host-offloaded
// state; gathered over tp; gathered over pipeline stages), with the same losses; the step lines say
// how long each checkpoint held its step and how long its write took. A rank SIGKILLed while its
// checkpoint is written in the background leaves the previous checkpoint to resume from, and the
// resumed job's losses are the undisturbed ones, bit for bit.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/process/subprocess.h"
#include "gtest/gtest.h"
#include "tests/testing/cli.h"
#include "tests/testing/process_table.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::ReadLosses;
using testing::ReadStepField;
using testing::RunTessera;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  if (!fs::exists(dir)) return names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// `field` of the steps.jsonl lines that have it, by step (ReadStepField reads 0 where it is absent).
std::map<int, double> PresentField(const std::string& steps_jsonl, const std::string& field) {
  std::map<int, double> found;
  std::ifstream in(steps_jsonl);
  const std::regex step_re("\"step\":([0-9]+)"), field_re("\"" + field + "\":([-+0-9.eE]+)");
  for (std::string line; std::getline(in, line);) {
    std::smatch step, value;
    if (std::regex_search(line, step, step_re) && std::regex_search(line, value, field_re)) {
      found[std::stoi(step[1])] = std::stod(value[1]);
    }
  }
  return found;
}

std::string WriteSpec(const std::string& dir, int hidden, int steps) {
  const std::string data = testing::WriteTokenFile(dir, 40000);
  const std::string spec = dir + "/spec.yaml";
  std::ofstream(spec) << "name: async\n"
                      << "model: {layers: 4, hidden: " << hidden << ", heads: 4, vocab: 256, seq_len: 32}\n"
                      << "data: {path: " << data << ", shuffle: true}\n"
                      << "train: {steps: " << steps << ", micro_batch: 2, global_batch: 4, lr: 1e-3}\n"
                      << "checkpoint: {every_steps: 2, keep: 10}\n";
  return spec;
}

struct Layout {
  std::string name;
  std::vector<std::string> sets;
  // 512 with short sequences: a write (~150 MB in all, fsynced) outlasts the next step's update, so the
  // files show whether the snapshot is a copy (the offloaded moments are updated in place).
  int hidden = 64;
};

class AsyncCheckpointTest : public ::testing::TestWithParam<Layout> {};

TEST_P(AsyncCheckpointTest, FilesEqualTheSynchronousCheckpointsByteForByte) {
  const std::string dir = testing::FreshDir("async_" + GetParam().name);
  const std::string spec = WriteSpec(dir, GetParam().hidden, 8);
  for (const char* mode : {"sync", "async"}) {
    std::vector<std::string> args = {"run", spec, "--quiet", "--set", absl::StrCat("output_dir=", dir, "/", mode),
                                     "--set", absl::StrCat("checkpoint.async=", mode == std::string("async") ? "true" : "false")};
    for (const std::string& s : GetParam().sets) args.insert(args.end(), {"--set", s});
    auto run = RunTessera(args);
    ASSERT_EQ(run.exit_code, 0) << mode << ": " << run.output;
  }
  const std::string sync = dir + "/sync/checkpoints", async = dir + "/async/checkpoints";
  ASSERT_EQ(Names(sync), (std::vector<std::string>{"step_00000002", "step_00000004", "step_00000006", "step_00000008"}));
  ASSERT_EQ(Names(async), Names(sync)) << "no temporary directory or vote file is left";
  for (const std::string& step : Names(sync)) {
    ASSERT_EQ(Names(async + "/" + step), Names(sync + "/" + step)) << step;
    for (const std::string& file : Names(sync + "/" + step)) {
      EXPECT_TRUE(ReadAll(async + "/" + step + "/" + file) == ReadAll(sync + "/" + step + "/" + file))
          << step << "/" << file << " differs";
    }
  }
  EXPECT_EQ(ReadLosses(dir + "/async/steps.jsonl"), ReadLosses(dir + "/sync/steps.jsonl"));
  // Every checkpoint step held (snapshot) and reported; every write but the last reported on a later line.
  const auto blocked = PresentField(dir + "/async/steps.jsonl", "checkpoint_blocked_s");
  EXPECT_EQ(blocked.size(), 4u);
  for (int step : {2, 4, 6, 8}) EXPECT_TRUE(blocked.count(step)) << "step " << step;
  const auto written = PresentField(dir + "/async/steps.jsonl", "checkpoint_write_step");
  std::vector<double> steps_written;
  for (const auto& [line, step] : written) {
    EXPECT_GT(line, step) << "a write is reported after its step";
    steps_written.push_back(step);
  }
  EXPECT_EQ(steps_written, (std::vector<double>{2, 4, 6}));
  EXPECT_TRUE(PresentField(dir + "/sync/steps.jsonl", "checkpoint_blocked_s").empty());
  // A synchronous write is reported the same way, on the line after its step (it held training for
  // all of it).
  std::vector<double> sync_written;
  for (const auto& [line, step] : PresentField(dir + "/sync/steps.jsonl", "checkpoint_write_step")) {
    EXPECT_EQ(line, step + 1) << "the synchronous write of step " << step;
    sync_written.push_back(step);
  }
  EXPECT_EQ(sync_written, (std::vector<double>{2, 4, 6}));
  for (const auto& [line, seconds] : PresentField(dir + "/sync/steps.jsonl", "checkpoint_write_s")) {
    EXPECT_GT(seconds, 0) << "line " << line;
  }
}

// A run that fails between an asynchronous checkpoint's snapshot and the start of its background write
// (here: the debugging dump of the same step cannot be written, OUTPUT_DIR/debug being a file) leaves
// no temporary checkpoint directory behind.
TEST(AsyncCheckpointAbortTest, AFailureBetweenTheSnapshotAndTheWriteLeavesNoTemporaryDirectory) {
  const std::string dir = testing::FreshDir("async_abort");
  const std::string spec = WriteSpec(dir, 64, 4);
  const std::string out = dir + "/out";
  fs::create_directories(out);
  std::ofstream(out + "/debug") << "a file where the dump's directory belongs";
  auto run = RunTessera({"run", spec, "--quiet", "--dump-at-step=2", "--set", "output_dir=" + out, "--set",
                         "checkpoint.async=true"});
  ASSERT_NE(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "debug")) << run.output;
  EXPECT_TRUE(Names(out + "/checkpoints").empty()) << "left: " << absl::StrJoin(Names(out + "/checkpoints"), ", ");
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, AsyncCheckpointTest,
    ::testing::Values(Layout{"zero2_offload_dp2",
                             {"parallel.dp=2", "parallel.zero_stage=2", "optimizer.offload=cpu", "model.seq_len=8",
                              "train.micro_batch=1", "train.global_batch=2"},
                             512},
                      Layout{"tp2", {"parallel.tp=2"}}, Layout{"pp2", {"parallel.pp=2", "train.micro_batch=1"}}),
    [](const ::testing::TestParamInfo<Layout>& info) { return info.param.name; });

// The pid of rank `rank` of the run whose job file is `job_json`, or -1.
pid_t RankPid(const std::string& job_json, int rank) {
  const auto pids = testing::ProcessesMatching(
      {"tessera-rank", "--spec=" + job_json, absl::StrCat("--rank=", rank, std::string(1, '\0'))});
  return pids.empty() ? -1 : pids.front();
}

TEST(AsyncCheckpointKillTest, ARankKilledDuringABackgroundWriteResumesFromThePreviousCheckpoint) {
  const std::string dir = testing::FreshDir("async_kill");
  // Large enough that a checkpoint's write (~75 MB, fsynced) outlasts a few steps.
  const std::string spec = WriteSpec(dir, 512, 10);
  const std::vector<std::string> layout = {"--set", "parallel.dp=2", "--set", "parallel.zero_stage=2",
                                           "--set", "checkpoint.async=true"};
  std::vector<std::string> args = {"run", spec, "--quiet", "--set", "output_dir=" + dir + "/undisturbed"};
  args.insert(args.end(), layout.begin(), layout.end());
  auto undisturbed = RunTessera(args);
  ASSERT_EQ(undisturbed.exit_code, 0) << undisturbed.output;

  const std::string out = dir + "/killed", checkpoints = out + "/checkpoints";
  process::SpawnOptions so;
  so.argv = {testing::Runfile("client/tessera"), "run", spec, "--quiet", "--set", "output_dir=" + out};
  so.argv.insert(so.argv.end(), layout.begin(), layout.end());
  so.log_path = dir + "/launcher.log";
  so.env = {{"TESSERA_RANK_BINARY", testing::Runfile("worker/rank/tessera-rank")}};
  auto launcher = process::Spawn(so);
  ASSERT_TRUE(launcher.ok());
  // Once step 4's checkpoint is committed, step 6's temporary directory is the write in the background.
  bool writing = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!writing && std::chrono::steady_clock::now() < deadline) {
    for (const std::string& name : Names(checkpoints)) {
      writing |= fs::exists(checkpoints + "/step_00000004") && absl::StartsWith(name, "step_00000006.tmp.");
    }
    if (!writing) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(writing) << "step 6's checkpoint was never seen being written";
  const pid_t rank0 = RankPid(out + "/job.json", 0);
  ASSERT_GT(rank0, 0);
  ASSERT_EQ(kill(rank0, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(*launcher, &status, 0), *launcher);
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the run failed with its rank";
  ASSERT_FALSE(fs::exists(checkpoints + "/step_00000006")) << "killed before its commit";
  ASSERT_TRUE(fs::exists(checkpoints + "/step_00000004"));

  // The same job again: it resumes from step 4, removes the half-written directory, and trains to the
  // undisturbed losses (the same arithmetic on the same restored state and data position).
  args = {"run", spec, "--quiet", "--set", "output_dir=" + out};
  args.insert(args.end(), layout.begin(), layout.end());
  auto resumed = RunTessera(args);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(ReadStepField(out + "/steps.jsonl", "resumed_from").at(10), 4);
  EXPECT_EQ(ReadLosses(out + "/steps.jsonl"), ReadLosses(dir + "/undisturbed/steps.jsonl"));
  for (const std::string& name : Names(checkpoints)) {
    EXPECT_FALSE(absl::StrContains(name, ".tmp.")) << name << " left behind";
  }
}

}  // namespace
}  // namespace tessera
