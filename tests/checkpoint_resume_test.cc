// Checkpoints through the real CLI and rank processes: an interrupted run resumes to exactly the
// losses of an uninterrupted one; a tp=2 run resumes from a dp=1 checkpoint; a mismatched model is a
// clear error, damaged checkpoints are found by their index's checksums and skipped.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/process/subprocess.h"
#include "formats/checkpoint/checkpoint_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cli.h"
#include "tests/testing/process_table.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::ReadLosses;
using testing::RunTessera;

// Cross-layout resume: fp32 tolerances of the parallel equivalence tests (loss atol 1e-5 / rtol 1e-3).
constexpr double kLossAtol = 1e-5, kLossRtol = 1e-3;

std::string WriteSpec(const std::string& dir, const std::string& schedule) {
  const std::string data = testing::WriteTokenFile(dir, 40000);
  const std::string spec = dir + "/spec.yaml";
  std::ofstream(spec) << "name: resume\n"
                      << "model: {layers: 2, hidden: 64, heads: 4, vocab: 256, seq_len: 32}\n"
                      << "data: {path: " << data << ", shuffle: true}\n"
                      << "train: {steps: 8, micro_batch: 4, global_batch: 8, lr: 1e-3, schedule: " << schedule
                      << "}\n"
                      << "checkpoint: {every_steps: 2, keep: 5}\n";
  return spec;
}

// Ranks of a run are the tessera-rank processes whose command line names its spec file.
int CountRankProcesses(const std::string& spec_file) {
  return static_cast<int>(testing::ProcessesMatching({"tessera-rank", spec_file}).size());
}

TEST(CheckpointResumeTest, InterruptedRunResumesToIdenticalLosses) {
  const std::string dir = testing::FreshDir("interrupt");
  // Constant LR: the schedule does not depend on train.steps, so a long run stopped early and a
  // short run see the same learning rates.
  const std::string spec = WriteSpec(dir, "constant");
  auto full = RunTessera({"run", spec, "--quiet", "--set", "output_dir=" + dir + "/full"});
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const auto want = ReadLosses(dir + "/full/steps.jsonl");
  ASSERT_EQ(want.size(), 8u);

  // A long run (tp=2, two ranks) interrupted with SIGINT once its first checkpoint exists.
  const std::string out = dir + "/stopped";
  process::SpawnOptions so;
  so.argv = {testing::Runfile("client/tessera"), "run", spec, "--quiet", "--set", "output_dir=" + out,
             "--set", "train.steps=100000", "--set", "parallel.tp=2"};
  so.log_path = dir + "/launcher.log";
  so.env = {{"TESSERA_RANK_BINARY", testing::Runfile("worker/rank/tessera-rank")}};
  auto pid = process::Spawn(so);
  ASSERT_TRUE(pid.ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(out + "/checkpoints/step_00000002") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(fs::exists(out + "/checkpoints/step_00000002"));
  kill(*pid, SIGINT);
  int status = 0;
  ASSERT_EQ(waitpid(*pid, &status, 0), *pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << process::DescribeExit(status);
  EXPECT_EQ(CountRankProcesses(out + "/job.json"), 0) << "no rank outlives the launcher";

  // Resume the same job (same tp=2 layout) and run it to step 8: identical losses, bit for bit, as
  // the same arithmetic runs on the same restored state and data position.
  auto resumed = RunTessera({"run", spec, "--quiet", "--set", "output_dir=" + out, "--set", "parallel.tp=2"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  auto tp2_full = RunTessera({"run", spec, "--quiet", "--set", "output_dir=" + dir + "/full_tp2", "--set",
                              "parallel.tp=2"});
  ASSERT_EQ(tp2_full.exit_code, 0) << tp2_full.output;
  const auto got = ReadLosses(out + "/steps.jsonl");
  const auto want_tp2 = ReadLosses(dir + "/full_tp2/steps.jsonl");
  ASSERT_EQ(got.size(), 8u) << "steps.jsonl is cut back to the checkpoint, then continued";
  for (const auto& [step, loss] : want_tp2) EXPECT_EQ(got.at(step), loss) << "step " << step;
  // The lines of the resumed run name the checkpoint it started from; those kept from the first run, 0.
  const auto from = testing::ReadStepField(out + "/steps.jsonl", "resumed_from");
  const double resumed_at = from.at(8);
  EXPECT_GE(resumed_at, 2);
  for (const auto& [step, f] : from) EXPECT_EQ(f, step > resumed_at ? resumed_at : 0) << "step " << step;
  // And the tp=2 run agrees with the single-process one.
  for (const auto& [step, loss] : want) {
    EXPECT_NEAR(got.at(step), loss, kLossAtol + kLossRtol * std::abs(loss)) << "step " << step;
  }
}

TEST(CheckpointResumeTest, OtherLayoutsResumeFromSingleProcessCheckpoint) {
  const std::string dir = testing::FreshDir("cross_layout");
  const std::string spec = WriteSpec(dir, "cosine");
  auto single = RunTessera({"run", spec, "--quiet", "--set", "output_dir=" + dir + "/single"});
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const auto want = ReadLosses(dir + "/single/steps.jsonl");
  // A new job directory holding only the dp=1 checkpoint of step 4.
  fs::create_directories(dir + "/tp2/checkpoints");
  fs::copy(dir + "/single/checkpoints/step_00000004", dir + "/tp2/checkpoints/step_00000004");
  auto tp2 = RunTessera({"run", spec, "--quiet", "--set", "output_dir=" + dir + "/tp2", "--set", "parallel.tp=2"});
  ASSERT_EQ(tp2.exit_code, 0) << tp2.output;
  const auto got = ReadLosses(dir + "/tp2/steps.jsonl");
  ASSERT_EQ(got.size(), 4u);
  for (int step = 5; step <= 8; ++step) {
    ASSERT_TRUE(got.count(step)) << step;
    EXPECT_NEAR(got.at(step), want.at(step), kLossAtol + kLossRtol * std::abs(want.at(step))) << "step " << step;
  }
  // And dp=2 with the optimizer state sharded (ZeRO-1) from the same full checkpoint.
  fs::create_directories(dir + "/zero1/checkpoints");
  fs::copy(dir + "/single/checkpoints/step_00000004", dir + "/zero1/checkpoints/step_00000004");
  auto zero = RunTessera({"run", spec, "--quiet", "--set", "output_dir=" + dir + "/zero1", "--set", "parallel.dp=2",
                          "--set", "parallel.zero_stage=1"});
  ASSERT_EQ(zero.exit_code, 0) << zero.output;
  const auto got_zero = ReadLosses(dir + "/zero1/steps.jsonl");
  ASSERT_EQ(got_zero.size(), 4u);
  for (int step = 5; step <= 8; ++step) {
    EXPECT_NEAR(got_zero.at(step), want.at(step), kLossAtol + kLossRtol * std::abs(want.at(step))) << "step " << step;
  }
  // The ZeRO-1 run's checkpoint of step 6 (optimizer state in per-rank 1D shards) resumes on a 2D grid.
  fs::create_directories(dir + "/tp2d/checkpoints");
  fs::copy(dir + "/zero1/checkpoints/step_00000006", dir + "/tp2d/checkpoints/step_00000006");
  auto grid = RunTessera({"run", spec, "--quiet", "--set", "output_dir=" + dir + "/tp2d", "--set", "parallel.tp=4",
                          "--set", "parallel.tp_mode=2d"});
  ASSERT_EQ(grid.exit_code, 0) << grid.output;
  const auto got_grid = ReadLosses(dir + "/tp2d/steps.jsonl");
  ASSERT_EQ(got_grid.size(), 2u);
  for (int step = 7; step <= 8; ++step) {
    EXPECT_NEAR(got_grid.at(step), want.at(step), kLossAtol + kLossRtol * std::abs(want.at(step))) << "step " << step;
  }
  // And the 2D run's own final checkpoint holds the full tensors of the single-process run's, within
  // 1e-4 + 1e-3·|w|: two AdamW steps from rounding-level differences move a weight by up to ~2·lr.
  auto a = testing::ReadF32(dir + "/single/checkpoints/step_00000008/model.safetensors");
  auto b = testing::ReadF32(dir + "/tp2d/checkpoints/step_00000008/model.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, w] : a) {
    ASSERT_EQ(b[name].size(), w.size()) << name;
    for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(b[name][i], w[i], 1e-4 + 1e-3 * std::abs(w[i])) << name << "[" << i << "]";
  }
}

TEST(CheckpointResumeTest, MismatchedModelIsAClearErrorAndDamagedCheckpointsAreSkipped) {
  const std::string dir = testing::FreshDir("bad_ckpt");
  const std::string spec = WriteSpec(dir, "constant");
  auto full = RunTessera({"run", spec, "--quiet", "--set", "output_dir=" + dir + "/full"});
  ASSERT_EQ(full.exit_code, 0) << full.output;
  auto first = RunTessera({"run", spec, "--quiet", "--set", "output_dir=" + dir + "/a", "--set", "train.steps=4"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto wider = RunTessera({"run", spec, "--quiet", "--set", "output_dir=" + dir + "/a", "--set", "model.hidden=128"});
  EXPECT_EQ(wider.exit_code, 1);
  EXPECT_THAT(wider.output, HasSubstr("was written for model.hidden 64, the spec says 128"));

  // The newest checkpoint (step 4) truncated: its index's recorded size gives it away, it is set
  // aside, and the run resumes from step 2 to the undisturbed run's losses, bit for bit.
  fs::resize_file(dir + "/a/checkpoints/step_00000004/model.safetensors", 100);
  auto resumed = RunTessera({"run", spec, "--quiet", "--set", "output_dir=" + dir + "/a"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto rank_log = [&] {
    std::ifstream in(dir + "/a/logs/rank_0.log");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  EXPECT_THAT(rank_log(), HasSubstr("step_00000004 is damaged: model.safetensors has 100 bytes, the index recorded"));
  // The user sees it on the console too (--quiet hides progress, not warnings), from the warning
  // line in steps.jsonl (before: only in the rank's log).
  EXPECT_THAT(resumed.output, HasSubstr("warning: checkpoint " + dir + "/a/checkpoints/step_00000004 is damaged: "
                                        "model.safetensors has 100 bytes"));
  {
    std::ifstream in(dir + "/a/steps.jsonl");
    EXPECT_THAT(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()),
                HasSubstr("\"warning\":"));
  }
  EXPECT_THAT(resumed.output, ::testing::Not(HasSubstr("terminate called")));
  const auto want = ReadLosses(dir + "/full/steps.jsonl");
  const auto got = ReadLosses(dir + "/a/steps.jsonl");
  ASSERT_EQ(got.size(), 8u);
  for (const auto& [step, loss] : want) EXPECT_EQ(got.at(step), loss) << "step " << step;
  EXPECT_FALSE(fs::exists(dir + "/a/checkpoints/step_00000004.damaged")) << "deleted by the next commit";

  // Every checkpoint damaged (one byte changed: same size, other checksum): the run says so and
  // starts over from the initialisation, again to the same losses.
  for (const auto& [step, path] : formats::checkpoint::ListCheckpoints(dir + "/a/checkpoints")) {
    std::fstream f(path + "/optimizer.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  auto over = RunTessera({"run", spec, "--quiet", "--set", "output_dir=" + dir + "/a"});
  ASSERT_EQ(over.exit_code, 0) << over.output;
  EXPECT_THAT(rank_log(), HasSubstr("step_00000002 is damaged: optimizer.safetensors has CRC-32C"));
  EXPECT_THAT(rank_log(), HasSubstr("no undamaged checkpoint left"));
  EXPECT_THAT(over.output, HasSubstr("warning: no undamaged checkpoint left in " + dir + "/a/checkpoints; starting over"));
  const auto again = ReadLosses(dir + "/a/steps.jsonl");
  ASSERT_EQ(again.size(), 8u);
  for (const auto& [step, loss] : want) EXPECT_EQ(again.at(step), loss) << "step " << step;
  // Each step line says where its run started and how many logged steps it dropped to get there
  // (the work recomputed: all 8 steps of the previous run, which finished).
  for (const auto& [step, from] : testing::ReadStepField(dir + "/a/steps.jsonl", "resumed_from")) {
    EXPECT_EQ(from, 0) << "step " << step;
  }
  for (const auto& [step, n] : testing::ReadStepField(dir + "/a/steps.jsonl", "discarded_steps")) {
    EXPECT_EQ(n, 8) << "step " << step;
  }
}

}  // namespace
}  // namespace tessera
