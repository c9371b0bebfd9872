// Sequence parallelism through the real `tessera run` and tessera-rank processes, for each model family
// (Llama's rotary positions offset by each rank's sequence block), against the single-process run of
// the same spec: ring and all-to-all attention at sp 2 and 4, with tensor,
// data and pipeline parallelism, with activation checkpointing, and a checkpoint written by a
// pp2×sp2×dp2 run resumed with sp 4.
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

// fp32 tolerances (testing::Tolerances) of the other equivalence tests. Ring attention sums the
// softmax blockwise (online), all-to-all runs the same attention kernel on regrouped heads; both
// within them.
constexpr int kSteps = 6;

template <typename Family>
class SequenceParallelTest : public testing::LayoutSuiteTest<SequenceParallelTest<Family>> {
 protected:
  static void SetUpTestSuite() {
    std::ostringstream yaml;
    yaml << "name: seq\n"
         << "model: " << Family::Model(4, 32, 4, 256, 32) << "\n"
         << "parallel: {dp_bucket_mb: 0.02}\n"
         << "train: {steps: " << kSteps << ", micro_batch: 2, global_batch: 8, lr: 1e-3,\n"
         << "        warmup_steps: 2, schedule: cosine, min_lr: 1e-4, grad_clip: 1.0}\n"
         << "checkpoint: {every_steps: 3, keep: 3}\n";
    SequenceParallelTest::Start(absl::StrCat("sequence_", Family::kName), yaml.str(), kSteps, Family::Tensors(4));
  }
};

TYPED_TEST_SUITE(SequenceParallelTest, testing::FamiliesWithExperts, testing::FamilyNames);

TYPED_TEST(SequenceParallelTest, RingTwo) { this->Compare(this->Run("sp2", {"parallel.sp=2"})); }

TYPED_TEST(SequenceParallelTest, RingFour) { this->Compare(this->Run("sp4", {"parallel.sp=4"})); }

TYPED_TEST(SequenceParallelTest, AllToAllTwo) { this->Compare(this->Run("sp2a", {"parallel.sp=2", "parallel.sp_mode=all_to_all"})); }

TYPED_TEST(SequenceParallelTest, AllToAllFour) { this->Compare(this->Run("sp4a", {"parallel.sp=4", "parallel.sp_mode=all_to_all"})); }

TYPED_TEST(SequenceParallelTest, RingWithTensorParallelAndActivationCheckpointing) {
  this->Compare(this->Run("sp2tp2_ckpt", {"parallel.sp=2", "parallel.tp=2", "train.activation_checkpointing=true"}));
}

TYPED_TEST(SequenceParallelTest, AllToAllWithTensorAndDataParallel) {
  this->Compare(this->Run("sp2atp2dp2", {"parallel.sp=2", "parallel.sp_mode=all_to_all", "parallel.tp=2", "parallel.dp=2"}));
}

// pp2×sp2×dp2 (8 ranks); its checkpoint of step 3 resumes as sp4 all-to-all to the same losses.
TYPED_TEST(SequenceParallelTest, PipelineTimesSequenceTimesDataAndResumeAsSp4) {
  const std::string hybrid = this->Run("pp2sp2dp2", {"parallel.pp=2", "parallel.sp=2", "parallel.dp=2"});
  this->Compare(hybrid);
  this->suite_->ResumeAs(hybrid, "resume_sp4a", {"parallel.sp=4", "parallel.sp_mode=all_to_all"}, 3);
}

// The sharded optimizer over the dp × sp replicas of each parameter (sequence blocks average like
// samples): ZeRO-2 with ring attention over sp2×dp2, ZeRO-3 with all-to-all over sp2.
TYPED_TEST(SequenceParallelTest, ZeroOverSequenceReplicas) {
  this->Compare(this->Run("sp2dp2_zero2", {"parallel.sp=2", "parallel.dp=2", "parallel.zero_stage=2"}));
  this->Compare(this->Run("sp2a_zero3", {"parallel.sp=2", "parallel.sp_mode=all_to_all", "parallel.zero_stage=3"}));
}

TYPED_TEST(SequenceParallelTest, ImpossibleSplitsAreNamed) {
  auto r = RunTessera({"run", this->suite_->spec(), "--quiet", "--set", "output_dir=" + this->suite_->dir() + "/bad",
                       "--set", "parallel.sp=3",
                       "--set", "parallel.sp_mode=all_to_all", "--set", "parallel.zero_stage=1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("parallel.sp: 3 does not divide model.seq_len 32"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("parallel.sp_mode: all_to_all splits each rank's model.heads/tp = 4 heads over sp 3"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("zero_stage"), std::string::npos) << "ZeRO composes with sp: " << r.output;
  EXPECT_FALSE(fs::exists(this->suite_->dir() + "/bad/steps.jsonl"));
}

}  // namespace
}  // namespace tessera
