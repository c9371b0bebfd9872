// 2D, 2.5D and 3D tensor parallelism through the real `tessera run` and tessera-rank processes, for
// each model family (GPT-2; Llama's grouped-query attention; Mixtral's sparse blocks, whose routers
// see the block's input gathered along the grid's hidden axis and whose balancing loss sums its
// statistics over the axes that split the samples), against the single-process run of the same spec,
// and checkpoints moving between grid layouts.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
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

template <typename Family>
class TensorGridTest : public testing::LayoutSuiteTest<TensorGridTest<Family>> {
 protected:
  static void SetUpTestSuite() {
    std::ostringstream yaml;
    yaml << "name: grid\n"
         << "model: " << Family::Model(2, 32, 4, 256, 16) << "\n"
         << "train: {steps: " << kSteps << ", micro_batch: 4, global_batch: 8, lr: 1e-3,\n"
         << "        warmup_steps: 2, schedule: cosine, min_lr: 1e-4, grad_clip: 1.0}\n"
         << "checkpoint: {every_steps: 3, keep: 3}\n";
    TensorGridTest::Start(absl::StrCat("grid_", Family::kName), yaml.str(), kSteps, Family::Tensors(2));
  }
};

TYPED_TEST_SUITE(TensorGridTest, testing::FamiliesWithExperts, testing::FamilyNames);

TYPED_TEST(TensorGridTest, TwoD) { this->Compare(this->Run("2d", {"parallel.tp=4", "parallel.tp_mode=2d"})); }

TYPED_TEST(TensorGridTest, TwoAndAHalfD) {
  this->Compare(this->Run("2.5d", {"parallel.tp=8", "parallel.tp_mode=2.5d", "parallel.tp_depth=2"}));
}

TYPED_TEST(TensorGridTest, ThreeD) { this->Compare(this->Run("3d", {"parallel.tp=8", "parallel.tp_mode=3d"})); }

TYPED_TEST(TensorGridTest, ThreeDWithActivationCheckpointing) {
  this->Compare(this->Run("3d_ckpt", {"parallel.tp=8", "parallel.tp_mode=3d", "train.activation_checkpointing=true"}));
}

// A 3D checkpoint resumes as 2.5D and as 1D tp=2; a 1D dp=2 checkpoint resumes as 3D.
TYPED_TEST(TensorGridTest, CheckpointsMoveBetweenGridLayouts) {
  const std::string cube = this->Run("ckpt_3d", {"parallel.tp=8", "parallel.tp_mode=3d"});
  this->ResumeAs(cube, "3d_to_2.5d", {"parallel.tp=8", "parallel.tp_mode=2.5d", "parallel.tp_depth=2"});
  this->ResumeAs(cube, "3d_to_tp2", {"parallel.tp=2"});
  const std::string dp = this->Run("ckpt_dp2", {"parallel.dp=2"});
  this->ResumeAs(dp, "dp2_to_3d", {"parallel.tp=8", "parallel.tp_mode=3d"});
}

// The sharded optimizer with grid layouts: ZeRO-2 over dp2 of a 2D grid (8 ranks; the gradient norm
// counts a tensor copied over some grid axes once; Mixtral: with ep2, each expert's state sharded
// over its own replicas), ZeRO-3 inside a 3D cube (dp 1: gathers and frees without sharding) with
// offloaded state.
TYPED_TEST(TensorGridTest, ZeroWithGrids) {
  std::vector<std::string> dp2 = {"parallel.tp=4", "parallel.tp_mode=2d", "parallel.dp=2", "parallel.zero_stage=2"};
  if (std::string(TypeParam::kName) == "mixtral") dp2.push_back("parallel.ep=2");
  this->Compare(this->Run("2d_dp2_zero2", dp2));
  this->Compare(this->Run("3d_zero3_offload", {"parallel.tp=8", "parallel.tp_mode=3d", "parallel.zero_stage=3",
                                               "optimizer.offload=cpu"}));
}

TYPED_TEST(TensorGridTest, ImpossibleGridsAreNamed) {
  const testing::LayoutSuite& suite = *this->suite_;
  auto r = RunTessera({"run", suite.spec(), "--quiet", "--set", "output_dir=" + suite.dir() + "/bad",
                       "--set", "parallel.tp=4",
                       "--set", "parallel.tp_mode=3d"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("parallel.tp: 4 with tp_mode 3d must be a cube q³ ≥ 8"), std::string::npos) << r.output;
  auto d = RunTessera({"run", suite.spec(), "--quiet", "--set", "output_dir=" + suite.dir() + "/bad",
                       "--set", "parallel.tp=8",
                       "--set", "parallel.tp_mode=2.5d", "--set", "parallel.tp_depth=3"});
  EXPECT_NE(d.exit_code, 0);
  EXPECT_NE(d.output.find("parallel.tp: 8 with tp_mode 2.5d must be tp_depth·q² = 3·q²"), std::string::npos)
      << d.output;
  EXPECT_FALSE(fs::exists(suite.dir() + "/bad/steps.jsonl"));
}

}  // namespace
}  // namespace tessera
