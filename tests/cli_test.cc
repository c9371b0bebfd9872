// The `tessera` CLI on bad input: every problem is a one-line error naming the field, exit code 2,
// never a crash; a failing rank ends the job with exit code 1 and its error; warnings reach the
// console; no LibTorch linked.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cli.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunTessera;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshDir("cli");
    data_ = testing::WriteTokenFile(dir_, 5000);
    spec_ = dir_ + "/spec.yaml";
    std::ofstream(spec_) << "name: cli\n"
                         << "model: {layers: 1, hidden: 32, heads: 4, vocab: 256, seq_len: 16}\n"
                         << "data: {path: " << data_ << "}\n"
                         << "parallel: {dp: 2}\n"
                         << "train: {steps: 2, micro_batch: 2, global_batch: 4}\n"
                         << "output_dir: " << dir_ << "/out\n";
  }

  // Runs `tessera run` with overrides; expects exit code 2 and returns the output.
  std::string BadRun(const std::vector<std::string>& sets) {
    std::vector<std::string> args = {"run", spec_};
    for (const auto& s : sets) args.push_back("--set"), args.push_back(s);
    auto r = RunTessera(args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, Not(HasSubstr("terminate called")));
    EXPECT_THAT(r.output, Not(HasSubstr("Segmentation")));
    return r.output;
  }

  std::string dir_, data_, spec_;
};

TEST_F(CliTest, InvalidSpecsNameTheFieldAndExit2) {
  EXPECT_THAT(BadRun({"parallel.tp=3", "parallel.dp=1"}), HasSubstr("error: parallel.tp: 3 does not divide model.heads 4"));
  EXPECT_THAT(BadRun({"train.global_batch=6"}),
              HasSubstr("error: train.global_batch: 6 is not a multiple of micro_batch×dp = 4"));
  EXPECT_THAT(BadRun({"trian.steps=3"}), HasSubstr("error: trian: unknown field (did you mean train?)"));
  EXPECT_THAT(BadRun({"train.steps=many"}), HasSubstr("error: train.steps: 'many' is not an integer"));
  EXPECT_THAT(BadRun({"parallel.tp_mode=3d"}), HasSubstr("error: parallel.tp: 1 with tp_mode 3d must be a cube"));
  EXPECT_THAT(BadRun({"train.steps"}), HasSubstr("expected dotted.field=value"));
  EXPECT_THAT(BadRun({"data.path=" + dir_ + "/missing.bin"}), HasSubstr("error: data.path: "));
  EXPECT_THAT(BadRun({"model.init_from=" + dir_ + "/missing.safetensors"}),
              HasSubstr("error: model.init_from: "));
  // A token file of odd size (wrong dtype) is caught before any rank starts.
  std::ofstream(dir_ + "/odd.bin") << "abc";
  EXPECT_THAT(BadRun({"data.path=" + dir_ + "/odd.bin"}), HasSubstr("not a multiple of the token size 2"));
}

TEST_F(CliTest, MalformedFilesAndArgumentsExit2) {
  std::ofstream(dir_ + "/broken.yaml") << "name: [unclosed\n";
  auto r = RunTessera({"run", dir_ + "/broken.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("not valid YAML: line "));
  r = RunTessera({"run", dir_ + "/nonexistent.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("cannot read the spec file"));
  r = RunTessera({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  r = RunTessera({"data", "prepare", dir_ + "/no-such.txt", dir_ + "/x.bin"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("cannot read"));
}

TEST_F(CliTest, FailingRankEndsTheJobWithItsError) {
  // Weights of the wrong width: each rank fails to load them; the launcher reports and exits 1.
  std::ofstream(dir_ + "/other.yaml") << "name: other\n"
                                      << "model: {layers: 1, hidden: 16, heads: 4, vocab: 256, seq_len: 16}\n"
                                      << "data: {path: " << data_ << "}\n"
                                      << "train: {steps: 1, micro_batch: 2, global_batch: 2}\n"
                                      << "output_dir: " << dir_ << "/other\n";
  auto small = RunTessera({"run", dir_ + "/other.yaml", "--quiet"});
  ASSERT_EQ(small.exit_code, 0) << small.output;
  auto r = RunTessera({"run", spec_, "--quiet", "--set",
                       "model.init_from=" + dir_ + "/other/checkpoints/step_00000001/model.safetensors"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("has shape [256,16], expected [256,32]"));
  EXPECT_THAT(r.output, HasSubstr("error: the job failed; see"));
}

// A warning of the trainer reaches the console (before: only the rank's log): a tensorboard link
// planted in OUTPUT_DIR is refused, said on the console, and the run trains on.
TEST_F(CliTest, WarningsReachTheConsole) {
  fs::create_directories(dir_ + "/out");
  fs::create_directories(dir_ + "/elsewhere");
  fs::create_directory_symlink(dir_ + "/elsewhere", dir_ + "/out/tensorboard");
  auto r = RunTessera({"run", spec_, "--quiet", "--set", "parallel.dp=1", "--set", "train.global_batch=2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("warning: no TensorBoard events: "));
  EXPECT_THAT(r.output, HasSubstr("tensorboard: is a symbolic link"));
  EXPECT_TRUE(fs::is_empty(dir_ + "/elsewhere")) << "nothing written through the link";
  EXPECT_EQ(testing::ReadLosses(dir_ + "/out/steps.jsonl").size(), 2u) << "the warning line is not a step";
}

TEST_F(CliTest, DataPrepareWritesByteTokens) {
  std::ofstream(dir_ + "/hello.txt") << "hi!";
  auto r = RunTessera({"data", "prepare", dir_ + "/hello.txt", dir_ + "/hello.bin"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir_ + "/hello.bin", std::ios::binary);
  uint16_t t[3];
  in.read(reinterpret_cast<char*>(t), sizeof(t));
  EXPECT_EQ(t[0], 'h');
  EXPECT_EQ(t[1], 'i');
  EXPECT_EQ(t[2], '!');
}

// `tessera plan SPEC --devices N`: the ranking without a coordinator, its first line chosen, and the
// flags that select it; impossible device counts and bad flags are errors.
TEST_F(CliTest, PlanRanksLayoutsLocally) {
  auto r = RunTessera({"plan", spec_, "--devices", "4", "--memory-gb", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("layouts of 4 devices"));
  EXPECT_THAT(r.output, HasSubstr("chosen: fastest predicted step that fits"));
  EXPECT_THAT(r.output, HasSubstr("to use it: --set parallel.dp="));
  EXPECT_THAT(r.output, HasSubstr("tp4(2d)"));  // heads 4, hidden 32 and micro_batch 2 admit a 2×2 grid.
  auto json = RunTessera({"--output", "json", "plan", spec_, "--devices", "4", "--top", "2"});
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_THAT(json.output, HasSubstr("\"verdict\": \"chosen"));
  // global_batch 4 = micro_batch 2 × dp, so dp ≤ 2; 3 devices need tp 3 or sp 3, which nothing divides.
  auto none = RunTessera({"plan", spec_, "--devices", "3"});
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_THAT(none.output, HasSubstr("no layout of 3 devices can run this model"));
  auto zero = RunTessera({"plan", spec_, "--devices", "0"});
  EXPECT_EQ(zero.exit_code, 2) << zero.output;
  EXPECT_THAT(zero.output, HasSubstr("--devices: 0 must be at least 1"));
}

// parallel: auto: `tessera run --devices N` runs the planner's choice for N ranks (every layout of
// 2 devices of this spec trains; the chosen one is written to job.json).
TEST_F(CliTest, ParallelAutoRunsThePlannersChoice) {
  auto r = RunTessera({"run", spec_, "--devices", "2", "--set", "parallel=auto", "--set", "parallel.dp=1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("parallel: auto chose "));
  std::ifstream job(dir_ + "/out/job.json");
  std::string text((std::istreambuf_iterator<char>(job)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("\"auto_layout\": false"));
  auto steps = testing::ReadLosses(dir_ + "/out/steps.jsonl");
  EXPECT_EQ(steps.size(), 2u);
  // The spec asks for dp 2; with auto that is a conflict named by field.
  EXPECT_THAT(BadRun({"parallel=auto"}), HasSubstr("error: parallel.dp: 2 conflicts with parallel: auto"));
}

TEST(CliLinkTest, TheCliDoesNotLinkLibTorch) {
  const std::string cmd = "ldd '" + testing::Runfile("client/tessera") + "'";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  EXPECT_THAT(out, HasSubstr("libc.so"));  // ldd worked.
  EXPECT_THAT(out, Not(HasSubstr("torch")));
  EXPECT_THAT(out, Not(HasSubstr("libc10")));
}

}  // namespace
}  // namespace tessera
