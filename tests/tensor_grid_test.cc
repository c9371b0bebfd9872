// 2D, 2.5D and 3D tensor parallelism through the real `tessera run` and tessera-rank processes,
// against the single-process run of the same spec, and checkpoints moving between grid layouts.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/cli.h"
#include "tests/testing/compare.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::RunTessera;

// fp32 tolerances (testing::Tolerances) of the other equivalence tests: the grid layouts sum partial products and
// statistics in other orders.
constexpr int kSteps = 6;
constexpr int kTensors = 2 + 2 * 12 + 2;

class TensorGridTest : public testing::LayoutSuiteTest<TensorGridTest> {
 protected:
  static void SetUpTestSuite() {
    std::ostringstream yaml;
    yaml << "name: grid\n"
         << "model: {layers: 2, hidden: 32, heads: 4, vocab: 256, seq_len: 16}\n"
         << "train: {steps: " << kSteps << ", micro_batch: 4, global_batch: 8, lr: 1e-3,\n"
         << "        warmup_steps: 2, schedule: cosine, min_lr: 1e-4, grad_clip: 1.0}\n"
         << "checkpoint: {every_steps: 3, keep: 3}\n";
    Start("grid", yaml.str(), kSteps, kTensors);
  }
};

TEST_F(TensorGridTest, TwoD) { Compare(Run("2d", {"parallel.tp=4", "parallel.tp_mode=2d"})); }

TEST_F(TensorGridTest, TwoAndAHalfD) {
  Compare(Run("2.5d", {"parallel.tp=8", "parallel.tp_mode=2.5d", "parallel.tp_depth=2"}));
}

TEST_F(TensorGridTest, ThreeD) { Compare(Run("3d", {"parallel.tp=8", "parallel.tp_mode=3d"})); }

TEST_F(TensorGridTest, ThreeDWithActivationCheckpointing) {
  Compare(Run("3d_ckpt", {"parallel.tp=8", "parallel.tp_mode=3d", "train.activation_checkpointing=true"}));
}

// A 3D checkpoint resumes as 2.5D and as 1D tp=2; a 1D dp=2 checkpoint resumes as 3D.
TEST_F(TensorGridTest, CheckpointsMoveBetweenGridLayouts) {
  const std::string cube = Run("ckpt_3d", {"parallel.tp=8", "parallel.tp_mode=3d"});
  ResumeAs(cube, "3d_to_2.5d", {"parallel.tp=8", "parallel.tp_mode=2.5d", "parallel.tp_depth=2"});
  ResumeAs(cube, "3d_to_tp2", {"parallel.tp=2"});
  const std::string dp = Run("ckpt_dp2", {"parallel.dp=2"});
  ResumeAs(dp, "dp2_to_3d", {"parallel.tp=8", "parallel.tp_mode=3d"});
}

// The sharded optimizer with grid layouts: ZeRO-2 over dp2 of a 2D grid (8 ranks; the gradient norm
// counts a tensor copied over some grid axes once), ZeRO-3 inside a 3D cube (dp 1: gathers and frees
// without sharding) with offloaded state.
TEST_F(TensorGridTest, ZeroWithGrids) {
  Compare(Run("2d_dp2_zero2", {"parallel.tp=4", "parallel.tp_mode=2d", "parallel.dp=2", "parallel.zero_stage=2"}));
  Compare(Run("3d_zero3_offload", {"parallel.tp=8", "parallel.tp_mode=3d", "parallel.zero_stage=3",
                                   "optimizer.offload=cpu"}));
}

TEST_F(TensorGridTest, ImpossibleGridsAreNamed) {
  auto r = RunTessera({"run", suite_->spec(), "--quiet", "--set", "output_dir=" + suite_->dir() + "/bad",
                       "--set", "parallel.tp=4",
                       "--set", "parallel.tp_mode=3d"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("parallel.tp: 4 with tp_mode 3d must be a cube q³ ≥ 8"), std::string::npos) << r.output;
  auto d = RunTessera({"run", suite_->spec(), "--quiet", "--set", "output_dir=" + suite_->dir() + "/bad",
                       "--set", "parallel.tp=8",
                       "--set", "parallel.tp_mode=2.5d", "--set", "parallel.tp_depth=3"});
  EXPECT_NE(d.exit_code, 0);
  EXPECT_NE(d.output.find("parallel.tp: 8 with tp_mode 2.5d must be tp_depth·q² = 3·q²"), std::string::npos)
      << d.output;
  EXPECT_FALSE(fs::exists(suite_->dir() + "/bad/steps.jsonl"));
}

}  // namespace
}  // namespace tessera
