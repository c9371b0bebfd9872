// dp, tp (1D and grids), ZeRO and activation-checkpointing runs of one spec per model family (gpt,
// llama, and a Mixtral Mixture of Experts in the layouts it runs so far), through the real `tessera run` and tessera-rank processes, against the single-process run
// of the same spec: per-step losses for 6 steps, the validation losses after steps 3 and 6, and the
// full gradients and weights after step 1 (gathered over tp by the --dump-at-step debug aid).
#include <cmath>
#include <filesystem>
#include <map>
#include <vector>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/cli.h"
#include "tests/testing/compare.h"

namespace tessera {
namespace {

using testing::ReadF32;
using testing::ReadLosses;
using testing::RunTessera;

// Tolerances (fp32), as Colossal-AI uses: losses atol 1e-5 / rtol 1e-3, gradients atol 1e-6 /
// rtol 1e-4. Weights after one AdamW step: the first update is lr·m̂/(√v̂+ε) ≈ lr·sign(g), so a
// gradient within its tolerance can still move a weight by up to ~lr·(gradient error)/ε where |g|≈ε;
// with lr 1e-3 we allow atol 1e-5 / rtol 1e-4 on weights.
constexpr double kLossAtol = 1e-5, kLossRtol = 1e-3;
constexpr double kGradAtol = 1e-6, kGradRtol = 1e-4;
constexpr double kWeightAtol = 1e-5, kWeightRtol = 1e-4;
// Steps of every run: warm-up (2), then cosine decay; validation and the ep checkpoint at the middle.
constexpr int kSteps = 6;

// The spec's model line for each family (the same sizes; Llama with grouped-query attention; Mixtral
// with 4 experts of width 32, top-2, and a visible balancing-loss coefficient).
std::string ModelLine(const std::string& family) {
  if (family == "llama") return "{family: llama, layers: 2, hidden: 64, heads: 4, kv_heads: 2, vocab: 256, seq_len: 32}";
  if (family == "mixtral") {
    return "{family: mixtral, layers: 2, hidden: 64, heads: 4, kv_heads: 2, vocab: 256, seq_len: 32, experts: 4, "
           "experts_per_token: 2, moe_ffn_hidden: 32, aux_loss_coef: 0.02}";
  }
  return "{layers: 2, hidden: 64, heads: 4, vocab: 256, seq_len: 32}";
}
// Tensors of that model: GPT-2 wte, wpe, 12 per block, ln_f (2); Llama embed_tokens, 9 per block,
// norm, lm_head; Mixtral 6 attention and norm tensors, the router and 4×3 expert tensors per block.
int Tensors(const std::string& family) {
  if (family == "mixtral") return 1 + 2 * (6 + 1 + 4 * 3) + 2;
  return family == "llama" ? 1 + 2 * 9 + 2 : 2 + 2 * 12 + 2;
}

// Runs of one spec per family, each compared with the single-process run of that family's spec.
class Equivalence {
 protected:
  static std::string Spec(const std::string& family) {
    static std::map<std::string, std::string> specs;
    if (!dir_) dir_ = new std::string(testing::FreshDir("equivalence"));
    auto it = specs.find(family);
    if (it != specs.end()) return it->second;
    const std::string data = testing::WriteTokenFile(*dir_, 40000);
    const std::string spec = *dir_ + "/" + family + ".yaml";
    std::ofstream(spec) << "name: equiv\n"
                        << "model: " << ModelLine(family) << "\n"
                        << "data: {path: " << data << ", valid_fraction: 0.05}\n"
                        << "parallel: {dp_bucket_mb: 0.05}\n"  // Several buckets.
                        << "train: {steps: " << kSteps << ", micro_batch: 2, global_batch: 8, lr: 1e-3, warmup_steps: 2,\n"
                        << "        schedule: cosine, min_lr: 1e-4, grad_clip: 1.0, weight_decay: 0.1,\n"
                        << "        eval_every: " << kSteps / 2 << ", eval_batches: 2}\n";  // Validation after 3 and 6.
    specs[family] = spec;
    return spec;
  }

  // Runs the family's spec with dp×tp ranks; returns the output directory.
  static std::string Run(const std::string& family, const std::string& name, int dp, int tp,
                         std::vector<std::string> extra = {}) {
    const std::string spec = Spec(family);
    const std::string out = *dir_ + "/" + family + "_" + name;
    std::vector<std::string> args = {"run", spec, "--quiet", "--dump-at-step", "1", "--set", "output_dir=" + out,
                                     "--set", absl::StrCat("parallel.dp=", dp), "--set",
                                     absl::StrCat("parallel.tp=", tp)};
    for (const auto& e : extra) args.push_back("--set"), args.push_back(e);
    auto r = RunTessera(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return out;
  }

  // The single-process run of the family's spec (run once per family).
  static const std::string& Reference(const std::string& family) {
    static std::map<std::string, std::string> refs;
    if (!refs.count(family)) refs[family] = Run(family, "single", 1, 1);
    return refs[family];
  }

  static void CompareWithReference(const std::string& family, const std::string& out) {
    testing::ExpectRunsClose(Reference(family), out, kSteps, Tensors(family),
                             {kLossAtol, kLossRtol, kGradAtol, kGradRtol, kWeightAtol, kWeightRtol});
  }

  static std::string* dir_;
};

std::string* Equivalence::dir_;

// Layouts every family runs: the same test per family.
class ParallelEquivalenceTest : public Equivalence, public ::testing::TestWithParam<std::string> {
 protected:
  std::string Run(const std::string& name, int dp, int tp, std::vector<std::string> extra = {}) {
    return Equivalence::Run(GetParam(), name, dp, tp, std::move(extra));
  }
  void CompareWithReference(const std::string& out) { Equivalence::CompareWithReference(GetParam(), out); }
  const std::string& Reference() { return Equivalence::Reference(GetParam()); }
};

INSTANTIATE_TEST_SUITE_P(Families, ParallelEquivalenceTest, ::testing::Values("gpt", "llama", "mixtral"),
                         [](const auto& info) { return info.param; });

// Grid layouts: every family (tests/tensor_grid_test.cc has GPT-2's 2.5D and 3D in depth).
using GridEquivalenceTest = ParallelEquivalenceTest;

TEST_P(ParallelEquivalenceTest, DataParallel2) { CompareWithReference(Run("dp2", 2, 1)); }

TEST_P(ParallelEquivalenceTest, TensorParallel2) { CompareWithReference(Run("tp2", 1, 2)); }

// tp = heads: for Llama (kv_heads 2) each key/value head is shared by two tp ranks.
TEST_P(ParallelEquivalenceTest, TensorParallel4) { CompareWithReference(Run("tp4", 1, 4)); }

// A vocabulary tp does not divide (every real tokenizer's): 250 rows over 4 ranks are 63 each, the
// last rank's 2 padding rows zero and out of the softmax. Equal to the unpadded single-process run,
// gradients and weights of the full (unpadded) tensors included.
TEST_P(ParallelEquivalenceTest, PaddedVocabularyTensorParallel4) {
  const std::string family = GetParam();
  const std::string ref = Equivalence::Run(family, "single_v250", 1, 1, {"model.vocab=250"});
  const std::string out = Equivalence::Run(family, "tp4_v250", 1, 4, {"model.vocab=250"});
  testing::ExpectRunsClose(ref, out, kSteps, Tensors(family),
                           {kLossAtol, kLossRtol, kGradAtol, kGradRtol, kWeightAtol, kWeightRtol});
  auto dump = testing::ReadF32(out + "/debug/step_1.safetensors");
  const std::string embedding = family == "gpt" ? "param.wte.weight" : "param.embed_tokens.weight";
  EXPECT_EQ(dump.at(embedding).size(), 250u * 64) << "no padding outside the model";
}

TEST_P(ParallelEquivalenceTest, DataParallel2TimesTensorParallel2) { CompareWithReference(Run("dp2tp2", 2, 2)); }

// ZeRO over dp composed with tp=2: clipping is active here, so stages 2–3 (norm summed from shards)
// are held to the tolerances, not to bit equality (tests/zero_test.cc compares stages bit for bit).
TEST_P(ParallelEquivalenceTest, Zero1WithTensorParallel) {
  CompareWithReference(Run("dp2tp2_zero1", 2, 2, {"parallel.zero_stage=1"}));
}

TEST_P(ParallelEquivalenceTest, Zero2WithTensorParallel) {
  CompareWithReference(Run("dp2tp2_zero2", 2, 2, {"parallel.zero_stage=2"}));
}

TEST_P(ParallelEquivalenceTest, Zero3WithTensorParallel) {
  CompareWithReference(Run("dp2tp2_zero3", 2, 2, {"parallel.zero_stage=3"}));
}

// 2D (SUMMA) tensor parallelism on a 2×2 grid: samples split over grid rows, hidden over columns.
// Llama: each rank's 2 query heads and 1 key/value head, RMSNorm's statistics summed over the grid.
TEST_P(GridEquivalenceTest, TensorParallel2D) {
  CompareWithReference(Run("tp2d", 1, 4, {"parallel.tp_mode=2d"}));
}

TEST_P(GridEquivalenceTest, TensorParallel2DTimesDataParallel2) {
  CompareWithReference(Run("tp2d_dp2", 2, 4, {"parallel.tp_mode=2d"}));
}

TEST_P(GridEquivalenceTest, TensorParallel2DWithActivationCheckpointing) {
  CompareWithReference(Run("tp2d_ckpt", 1, 4, {"parallel.tp_mode=2d", "train.activation_checkpointing=true"}));
}

INSTANTIATE_TEST_SUITE_P(Families, GridEquivalenceTest, ::testing::Values("gpt", "llama"),
                         [](const auto& info) { return info.param; });

// Expert parallelism (the Mixtral spec): experts split over ep ranks taken from dp, alone, with tp
// (each expert also split) and with activation checkpointing (recomputed blocks exchange their tokens
// again); a checkpoint of the ep=2 run resumes as one process and as tp=2 with the reference's losses.
class ExpertParallelTest : public Equivalence, public ::testing::Test {};

TEST_F(ExpertParallelTest, ExpertsSplitOverDataParallelRanksEqualOneProcess) {
  CompareWithReference("mixtral", Equivalence::Run("mixtral", "ep2", 2, 1, {"parallel.ep=2", absl::StrCat("checkpoint.every_steps=", kSteps / 2)}));
  CompareWithReference("mixtral", Equivalence::Run("mixtral", "ep2tp2", 2, 2, {"parallel.ep=2"}));
  CompareWithReference("mixtral", Equivalence::Run("mixtral", "ep2_ckpt", 2, 1, {"parallel.ep=2", "train.activation_checkpointing=true"}));
  // ZeRO: the experts sharded over their own replicas (dp 4, ep 2: two replicas of each expert).
  for (const char* stage : {"1", "2", "3"}) {
    SCOPED_TRACE(stage);
    CompareWithReference("mixtral", Equivalence::Run("mixtral", absl::StrCat("dp4ep2_zero", stage), 4, 1,
                                                     {"parallel.ep=2", absl::StrCat("parallel.zero_stage=", stage)}));
  }
  CompareWithReference("mixtral", Equivalence::Run("mixtral", "dp2ep2tp2_zero3", 2, 2,
                                                   {"parallel.ep=2", "parallel.zero_stage=3"}));
  const testing::Tolerances tol{kLossAtol, kLossRtol, kGradAtol, kGradRtol, kWeightAtol, kWeightRtol};
  for (const auto& [name, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"ep2_as_single", {}}, {"ep2_as_tp2", {"parallel.tp=2"}},
           {"ep2_as_ep2tp2", {"parallel.dp=2", "parallel.ep=2", "parallel.tp=2"}},
           {"ep2_as_dp4ep2_zero3", {"parallel.dp=4", "parallel.ep=2", "parallel.zero_stage=3"}}}) {
    SCOPED_TRACE(name);
    testing::ExpectResumeMatches(*dir_, Spec("mixtral"), *dir_ + "/mixtral_ep2", "mixtral_" + name, sets,
                                 Reference("mixtral"), /*step=*/kSteps / 2, kSteps, tol);
  }
}

// Llama's 2.5D (two layers of the 2×2 grid) and 3D (2×2×2: hidden split 4 ways between blocks; GPT-2's
// are in tests/tensor_grid_test.cc). Both need 4 samples per micro-batch: the same global batch in 2
// micro-batches of 4, equal to the reference's 4 of 2 within the tolerances.
class LlamaGridTest : public Equivalence, public ::testing::Test {};

TEST_F(LlamaGridTest, TensorParallel2p5DAnd3D) {
  for (const auto& [name, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"tp2p5d", {"parallel.tp_mode=2.5d", "parallel.tp_depth=2", "train.micro_batch=4"}},
           {"tp3d", {"parallel.tp_mode=3d", "train.micro_batch=4"}}}) {
    SCOPED_TRACE(name);
    Equivalence::CompareWithReference("llama", Equivalence::Run("llama", name, 1, 8, sets));
  }
}

// Recomputing each block in backward runs the same kernels on the same inputs: the losses and
// gradients are identical, bit for bit, to storing the activations.
TEST_P(ParallelEquivalenceTest, ActivationCheckpointingIsExact) {
  const std::string out = Run("ckpt", 1, 1, {"train.activation_checkpointing=true"});
  EXPECT_EQ(ReadLosses(out + "/steps.jsonl"), ReadLosses(Reference() + "/steps.jsonl"));
  EXPECT_EQ(testing::ReadValLosses(out + "/steps.jsonl"), testing::ReadValLosses(Reference() + "/steps.jsonl"));
  auto want = ReadF32(Reference() + "/debug/step_1.safetensors");
  auto got = ReadF32(out + "/debug/step_1.safetensors");
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) EXPECT_EQ(got.at(name), w) << name;
}

TEST_P(ParallelEquivalenceTest, ActivationCheckpointingWithDataAndTensorParallel) {
  CompareWithReference(Run("dp2tp2_ckpt", 2, 2, {"train.activation_checkpointing=true"}));
}

}  // namespace
}  // namespace tessera
