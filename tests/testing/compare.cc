#include "tests/testing/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/cli.h"

namespace tessera::testing {

void ExpectTensorsClose(const std::map<std::string, std::vector<float>>& want,
                        const std::map<std::string, std::vector<float>>& got, const std::string& prefix,
                        double atol, double rtol, int expected_count) {
  int compared = 0;
  for (const auto& [name, w] : want) {
    if (name.rfind(prefix, 0) != 0) continue;
    ++compared;
    auto it = got.find(name);
    if (it == got.end()) {
      ADD_FAILURE() << name << " is missing";
      continue;
    }
    const auto& g = it->second;
    if (g.size() != w.size()) {
      ADD_FAILURE() << name << " has " << g.size() << " elements, expected " << w.size();
      continue;
    }
    double worst = 0;
    size_t worst_i = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      const double excess = std::abs(g[i] - w[i]) - (atol + rtol * std::abs(w[i]));
      if (excess > worst || std::isnan(g[i])) worst = std::isnan(g[i]) ? 1e30 : excess, worst_i = i;
    }
    EXPECT_LE(worst, 0) << name << "[" << worst_i << "]: " << g[worst_i] << " vs " << w[worst_i];
  }
  EXPECT_EQ(compared, expected_count) << "tensors under " << prefix;
}

void ExpectRunsClose(const std::string& reference_dir, const std::string& run_dir, int steps, int tensors,
                     const Tolerances& tol) {
  ExpectStepLogsClose(reference_dir, run_dir, steps, tol);
  auto ref_dump = ReadF32(reference_dir + "/debug/step_1.safetensors");
  auto dump = ReadF32(run_dir + "/debug/step_1.safetensors");
  ExpectTensorsClose(ref_dump, dump, "grad.", tol.grad_atol, tol.grad_rtol, tensors);
  ExpectTensorsClose(ref_dump, dump, "param.", tol.weight_atol, tol.weight_rtol, tensors);
}

void ExpectStepLogsClose(const std::string& reference_dir, const std::string& run_dir, int steps,
                         const Tolerances& tol) {
  auto want = ReadLosses(reference_dir + "/steps.jsonl");
  auto got = ReadLosses(run_dir + "/steps.jsonl");
  ASSERT_EQ(want.size(), static_cast<size_t>(steps));
  ASSERT_EQ(got.size(), static_cast<size_t>(steps));
  for (const auto& [step, loss] : want) {
    EXPECT_NEAR(got[step], loss, tol.loss_atol + tol.loss_rtol * std::abs(loss)) << "loss of step " << step;
  }
  EXPECT_LT(want[steps], want[1]) << "the reference run learns";
  // Validation: the forward-only pass of every layout against the single-process evaluation.
  auto want_val = ReadValLosses(reference_dir + "/steps.jsonl");
  auto got_val = ReadValLosses(run_dir + "/steps.jsonl");
  EXPECT_EQ(got_val.size(), want_val.size()) << "the same steps evaluated";
  for (const auto& [step, loss] : want_val) {
    ASSERT_TRUE(got_val.count(step)) << "no val_loss at step " << step;
    EXPECT_NEAR(got_val[step], loss, tol.loss_atol + tol.loss_rtol * std::abs(loss)) << "val_loss of step " << step;
  }
  // A Mixture of Experts: the cross-entropy and the balancing loss apart (their sum is `loss`).
  for (const char* field : {"lm_loss", "aux_loss"}) {
    auto want_part = ReadStepField(reference_dir + "/steps.jsonl", field);
    auto got_part = ReadStepField(run_dir + "/steps.jsonl", field);
    EXPECT_EQ(got_part.size(), want_part.size()) << field;
    for (const auto& [step, value] : want_part) {
      EXPECT_NEAR(got_part[step], value, tol.loss_atol + tol.loss_rtol * std::abs(value)) << field << " of step " << step;
    }
  }
  // The global gradient norm before clipping (clipping would hide a wrongly scaled gradient).
  auto want_norm = ReadStepField(reference_dir + "/steps.jsonl", "grad_norm");
  auto got_norm = ReadStepField(run_dir + "/steps.jsonl", "grad_norm");
  for (const auto& [step, norm] : want_norm) {
    EXPECT_NEAR(got_norm[step], norm, tol.grad_atol + tol.grad_rtol * norm) << "grad_norm of step " << step;
  }
}

std::string RunLayout(const std::string& dir, const std::string& spec, const std::string& name,
                      const std::vector<std::string>& sets, bool dump) {
  const std::string out = dir + "/" + name;
  std::vector<std::string> args = {"run", spec, "--quiet", "--set", "output_dir=" + out};
  if (dump) args.push_back("--dump-at-step"), args.push_back("1");
  for (const auto& s : sets) args.push_back("--set"), args.push_back(s);
  auto r = RunTessera(args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return out;
}

void ExpectResumeMatches(const std::string& dir, const std::string& spec, const std::string& from,
                         const std::string& name, const std::vector<std::string>& sets,
                         const std::string& reference, int step, int steps, const Tolerances& tol) {
  namespace fs = std::filesystem;
  char checkpoint[32];
  std::snprintf(checkpoint, sizeof(checkpoint), "step_%08d", step);
  const std::string out = dir + "/" + name;
  fs::create_directories(out + "/checkpoints");
  fs::copy(from + "/checkpoints/" + checkpoint, out + "/checkpoints/" + checkpoint);
  RunLayout(dir, spec, name, sets, /*dump=*/false);
  const auto want = ReadLosses(reference + "/steps.jsonl");
  const auto got = ReadLosses(out + "/steps.jsonl");
  ASSERT_EQ(got.size(), static_cast<size_t>(steps - step)) << "steps " << step + 1 << ".." << steps;
  for (int s = step + 1; s <= steps; ++s) {
    ASSERT_TRUE(got.count(s)) << s;
    EXPECT_NEAR(got.at(s), want.at(s), tol.loss_atol + tol.loss_rtol * std::abs(want.at(s))) << "step " << s;
  }
}

LayoutSuite::LayoutSuite(const std::string& name, const std::string& yaml, int steps, int tensors)
    : dir_(FreshDir(name)), spec_(dir_ + "/spec.yaml"), steps_(steps), tensors_(tensors) {
  const std::string data = WriteTokenFile(dir_, 40000);
  std::ofstream(spec_) << yaml << "data: {path: " << data << ", valid_fraction: 0.05}\n";
  reference_ = Run("single", {});
}

std::string LayoutSuite::Run(const std::string& name, const std::vector<std::string>& sets) const {
  auto [it, inserted] = runs_.try_emplace(sets);
  if (inserted) it->second = RunLayout(dir_, spec_, name, WithEvaluation(sets));
  return it->second;
}

std::vector<std::string> LayoutSuite::WithEvaluation(const std::vector<std::string>& sets) const {
  std::vector<std::string> out = {absl::StrCat("train.eval_every=", std::max(1, steps_ / 2)), "train.eval_batches=2"};
  out.insert(out.end(), sets.begin(), sets.end());
  return out;
}

std::string Gpt2Family::Model(int layers, int hidden, int heads, int vocab, int seq_len) {
  return absl::StrCat("{layers: ", layers, ", hidden: ", hidden, ", heads: ", heads, ", vocab: ", vocab,
                      ", seq_len: ", seq_len, "}");
}

std::string LlamaFamily::Model(int layers, int hidden, int heads, int vocab, int seq_len) {
  return absl::StrCat("{family: llama, layers: ", layers, ", hidden: ", hidden, ", heads: ", heads,
                      ", kv_heads: ", heads / 2, ", vocab: ", vocab, ", seq_len: ", seq_len, "}");
}

std::string MixtralFamily::Model(int layers, int hidden, int heads, int vocab, int seq_len) {
  return absl::StrCat("{family: mixtral, layers: ", layers, ", hidden: ", hidden, ", heads: ", heads,
                      ", kv_heads: ", heads / 2, ", vocab: ", vocab, ", seq_len: ", seq_len,
                      ", experts: 4, experts_per_token: 2, moe_ffn_hidden: ", hidden, ", aux_loss_coef: 0.02}");
}

}  // namespace tessera::testing
