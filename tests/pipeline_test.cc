// Pipeline parallelism through the real `tessera run` and tessera-rank processes, for each model family
// (GPT-2's tied embedding spans the first and last stage, Llama's head is its own, Mixtral's balancing
// loss is joint over the sparse blocks of every stage), against the
// single-process run of the same spec (8 blocks, 4 micro-batches per step): 1F1B and interleaved
// schedules at pp 2 and 4, an explicit unbalanced split with activation checkpointing, hybrids with
// dp and tp, and checkpoints moving between pipelined and unpipelined layouts.
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

// fp32 tolerances (testing::Tolerances) as the other equivalence tests (tests/parallel_equivalence_test.cc
// explains the weight tolerance). A pipeline sums the tied embedding's two gradient contributions in
// another order.
constexpr int kSteps = 6;

template <typename Family>
class PipelineTest : public testing::LayoutSuiteTest<PipelineTest<Family>> {
 protected:
  static void SetUpTestSuite() {
    std::ostringstream yaml;
    yaml << "name: pipe\n"
         << "model: " << Family::Model(8, 32, 4, 256, 16) << "\n"
         << "parallel: {dp_bucket_mb: 0.02}\n"
         << "train: {steps: " << kSteps << ", micro_batch: 2, global_batch: 8, lr: 1e-3,\n"
         << "        warmup_steps: 2, schedule: cosine, min_lr: 1e-4, grad_clip: 1.0}\n"
         << "checkpoint: {every_steps: 3, keep: 3}\n";
    PipelineTest::Start(absl::StrCat("pipeline_", Family::kName), yaml.str(), kSteps, Family::Tensors(8));
  }
};

TYPED_TEST_SUITE(PipelineTest, testing::FamiliesWithExperts, testing::FamilyNames);

TYPED_TEST(PipelineTest, OneFOneBTwoStages) { this->Compare(this->Run("pp2", {"parallel.pp=2"})); }

TYPED_TEST(PipelineTest, OneFOneBFourStages) { this->Compare(this->Run("pp4", {"parallel.pp=4"})); }

TYPED_TEST(PipelineTest, InterleavedTwoStagesTwoChunks) {
  this->Compare(this->Run("pp2i", {"parallel.pp=2", "parallel.pp_schedule=interleaved", "parallel.pp_chunks=2"}));
}

// Eight virtual stages of one block each: every block boundary crosses ranks.
TYPED_TEST(PipelineTest, InterleavedFourStagesTwoChunks) {
  this->Compare(this->Run("pp4i", {"parallel.pp=4", "parallel.pp_schedule=interleaved", "parallel.pp_chunks=2"}));
}

// A given split (5 + 3 blocks) and blocks recomputed in backward inside the stages.
TYPED_TEST(PipelineTest, UnbalancedSplitWithActivationCheckpointing) {
  this->Compare(this->Run("pp2_split_ckpt", {"parallel.pp=2", "parallel.pp_layers=[5, 3]", "train.activation_checkpointing=true"}));
}

TYPED_TEST(PipelineTest, DataTimesPipelineTimesTensor) {
  this->Compare(this->Run("dp2pp2tp2", {"parallel.dp=2", "parallel.pp=2", "parallel.tp=2"}));
}

TYPED_TEST(PipelineTest, InterleavedPipelineTimesTensor) {
  this->Compare(this->Run("pp4itp2",
              {"parallel.pp=4", "parallel.tp=2", "parallel.pp_schedule=interleaved", "parallel.pp_chunks=2"}));
}

TYPED_TEST(PipelineTest, PipelineTimesTensor2D) {
  this->Compare(this->Run("pp2tp2d", {"parallel.pp=2", "parallel.tp=4", "parallel.tp_mode=2d"}));
}

// A pipelined run's checkpoint (gathered from every stage into the documented full tensors) resumes
// as dp2×tp2; a dp2 ZeRO-1 checkpoint (optimizer state in per-rank shards) resumes as pp4.
TYPED_TEST(PipelineTest, CheckpointsMoveBetweenPipelinedAndOtherLayouts) {
  const std::string pp =
      this->Run("ckpt_pp2i", {"parallel.pp=2", "parallel.pp_schedule=interleaved", "parallel.pp_chunks=2"});
  this->ResumeAs(pp, "from_pp_to_dp2tp2", {"parallel.dp=2", "parallel.tp=2"});
  const std::string zero = this->Run("ckpt_zero1", {"parallel.dp=2", "parallel.zero_stage=1"});
  this->ResumeAs(zero, "from_zero1_to_pp4", {"parallel.pp=4"});
}

// The sharded optimizer inside pipeline stages: ZeRO-2 over dp2×pp2 (the tied embedding's gradient
// summed between first and last stage on the owned shards); ZeRO-3 with interleaved chunks and
// recomputed blocks (each micro-batch's forward and backward gathers a block again, the embeddings
// stay from the first forward to the last backward); AdamW state offloaded to the host.
TYPED_TEST(PipelineTest, ZeroStagesAndOffloadInsideStages) {
  this->Compare(this->Run("dp2pp2_zero2", {"parallel.dp=2", "parallel.pp=2", "parallel.zero_stage=2"}));
  this->Compare(this->Run("dp2pp2i_zero3_ckpt", {"parallel.dp=2", "parallel.pp=2", "parallel.pp_schedule=interleaved",
                                     "parallel.pp_chunks=2", "parallel.zero_stage=3",
                                     "train.activation_checkpointing=true"}));
  this->Compare(this->Run("pp2_offload", {"parallel.pp=2", "optimizer.offload=cpu"}));
}

// A pipelined ZeRO-3 checkpoint (optimizer state gathered into optimizer.safetensors) resumes as
// dp2 ZeRO-2; a dp2 ZeRO-2 checkpoint (per-rank shards) resumes as pp2 ZeRO-1.
TYPED_TEST(PipelineTest, ZeroCheckpointsMoveInAndOutOfPipelines) {
  const std::string pp = this->Run("ckpt_dp2pp2_zero3", {"parallel.dp=2", "parallel.pp=2", "parallel.zero_stage=3"});
  EXPECT_TRUE(fs::exists(pp + "/checkpoints/step_00000003/optimizer.safetensors"));
  this->ResumeAs(pp, "from_pp_zero3_to_dp2_zero2", {"parallel.dp=2", "parallel.zero_stage=2"});
  const std::string dp = this->Run("ckpt_dp2_zero2", {"parallel.dp=2", "parallel.zero_stage=2"});
  EXPECT_TRUE(fs::exists(dp + "/checkpoints/step_00000003/optimizer.dp1.tp0.safetensors"));
  this->ResumeAs(dp, "from_dp2_zero2_to_pp2_zero1", {"parallel.dp=2", "parallel.pp=2", "parallel.zero_stage=1"});
}

// bf16 and fp16 parameters and activations (fp32 master weights) through the stages: the losses follow
// the fp32 reference within 2e-3 relative (bf16 keeps 8 significant bits, ≈4e-3 per element; the
// mean over 8·16 tokens averages much of it out) and fall over the run.
TYPED_TEST(PipelineTest, LowPrecisionThroughTheStages) {
  const auto want = testing::ReadLosses(this->suite_->reference() + "/steps.jsonl");
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  for (const char* precision : {"bf16", "fp16"}) {
    const std::string out = this->Run(absl::StrCat("dp2pp2_", precision), {"parallel.dp=2", "parallel.pp=2",
                                                                     "parallel.zero_stage=2",
                                                                     absl::StrCat("train.precision=", precision)});
    const auto got = testing::ReadLosses(out + "/steps.jsonl");
    ASSERT_EQ(got.size(), want.size()) << precision;
    for (const auto& [step, loss] : want) {
      EXPECT_NEAR(got.at(step), loss, 2e-3 * std::abs(loss)) << precision << " step " << step;
    }
    EXPECT_LT(got.at(kSteps), got.at(1)) << precision;
  }
}

TYPED_TEST(PipelineTest, ImpossibleLayoutsAreNamed) {
  auto r = RunTessera({"run", this->suite_->spec(), "--quiet", "--set", "output_dir=" + this->suite_->dir() + "/bad",
                       "--set", "parallel.pp=3",
                       "--set", "parallel.pp_schedule=interleaved", "--set", "parallel.pp_chunks=4"});
  EXPECT_NE(r.exit_code, 0);
  // 4 micro-batches per step are not a multiple of 3; 12 virtual stages exceed 8 blocks.
  EXPECT_NE(r.output.find("parallel.pp_schedule: interleaved needs the micro-batches per step"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("parallel.pp: pp·pp_chunks = 12 virtual stages need model.layers ≥ 12"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(this->suite_->dir() + "/bad/steps.jsonl"));
}

}  // namespace
}  // namespace tessera
