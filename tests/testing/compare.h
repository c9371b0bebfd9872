// Test helpers comparing a parallel run with its single-process reference: every tensor of a
// safetensors dump elementwise within atol + rtol·|reference|, per-step losses and gradient norms.
#ifndef TESSERA_TESTS_TESTING_COMPARE_H_
#define TESSERA_TESTS_TESTING_COMPARE_H_

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::testing {

// Every tensor of `want` whose name starts with `prefix` exists in `got` with the same size and
// elements within the tolerance (the worst element is reported); and there are `expected_count`.
void ExpectTensorsClose(const std::map<std::string, std::vector<float>>& want,
                        const std::map<std::string, std::vector<float>>& got, const std::string& prefix,
                        double atol, double rtol, int expected_count);

struct Tolerances {
  double loss_atol = 1e-5, loss_rtol = 1e-3;
  double grad_atol = 1e-6, grad_rtol = 1e-4;
  double weight_atol = 1e-5, weight_rtol = 1e-4;
};

// Output directories of two runs of one spec (run with --dump-at-step 1): the losses and gradient
// norms of every step, the validation losses of the steps that evaluated (the same steps; within the
// loss tolerances), and the gradients and weights after step 1 (`tensors` of each kind).
void ExpectRunsClose(const std::string& reference_dir, const std::string& run_dir, int steps, int tensors,
                     const Tolerances& tol = {});

// The step-log part of ExpectRunsClose: losses, validation losses and gradient norms of every step.
void ExpectStepLogsClose(const std::string& reference_dir, const std::string& run_dir, int steps,
                         const Tolerances& tol = {});

// `tessera run SPEC --quiet [--dump-at-step 1] --set output_dir=DIR/NAME --set S...`, expecting
// success; returns the output directory.
std::string RunLayout(const std::string& dir, const std::string& spec, const std::string& name,
                      const std::vector<std::string>& sets, bool dump = true);

// Copies `from`'s checkpoint of `step` into a new job DIR/NAME, resumes it with `sets`, and expects
// the losses of steps step+1..steps within loss_atol + loss_rtol·|loss| of `reference`'s.
void ExpectResumeMatches(const std::string& dir, const std::string& spec, const std::string& from,
                         const std::string& name, const std::vector<std::string>& sets,
                         const std::string& reference, int step, int steps, const Tolerances& tol = {});

// One spec shared by the tests of a suite: a fresh directory with a token file, the spec (`yaml`
// plus its data section) and the single-process reference run (with --dump-at-step 1).
class LayoutSuite {
 public:
  // Every run of the suite evaluates too: data.valid_fraction 0.05, twice (mid-way and after the
  // last step) over 2 global batches, so that ExpectRunsClose compares the validation losses.
  LayoutSuite(const std::string& name, const std::string& yaml, int steps, int tensors);

  // Runs the spec with `sets` (ExpectRunsClose-ready); returns the output directory. A run is
  // deterministic, so the same `sets` (in the same order) run once per suite: a second call returns
  // the first run's directory (its name then is not `name`). Callers only read what a run left.
  std::string Run(const std::string& name, const std::vector<std::string>& sets) const;
  // ExpectRunsClose against the reference.
  void Compare(const std::string& out) const { ExpectRunsClose(reference_, out, steps_, tensors_); }
  // ExpectResumeMatches from `from`'s checkpoint of `step`.
  void ResumeAs(const std::string& from, const std::string& name, const std::vector<std::string>& sets,
                int step) const {
    ExpectResumeMatches(dir_, spec_, from, name, WithEvaluation(sets), reference_, step, steps_);
  }
  const std::string& dir() const { return dir_; }
  const std::string& reference() const { return reference_; }  // Output directory of the reference run.
  const std::string& spec() const { return spec_; }
  int steps() const { return steps_; }

 private:
  // train.eval_every = steps / 2 and eval_batches 2 before `sets`.
  std::vector<std::string> WithEvaluation(const std::vector<std::string>& sets) const;

  std::string dir_, spec_, reference_;
  int steps_, tensors_;
  mutable std::map<std::vector<std::string>, std::string> runs_;  // sets -> output directory.
};

// A test fixture with one LayoutSuite shared by every test of the suite. A suite derives from
// LayoutSuiteTest<itself> (each gets its own suite_) and calls Start in its SetUpTestSuite.
template <typename Suite>
class LayoutSuiteTest : public ::testing::Test {
 protected:
  // Once per Suite (a fixture derived from the suite for a few tests of its own shares it).
  static void Start(const std::string& name, const std::string& yaml, int steps, int tensors) {
    if (suite_ == nullptr) suite_ = new LayoutSuite(name, yaml, steps, tensors);
  }
  static std::string Run(const std::string& name, const std::vector<std::string>& sets) {
    return suite_->Run(name, sets);
  }
  static void Compare(const std::string& out) { suite_->Compare(out); }
  // Resumes from `from`'s checkpoint of the middle step (the suites checkpoint every steps / 2).
  static void ResumeAs(const std::string& from, const std::string& name, const std::vector<std::string>& sets) {
    suite_->ResumeAs(from, name, sets, suite_->steps() / 2);
  }

  static LayoutSuite* suite_;  // Lives for the whole test binary.
};

template <typename Suite>
LayoutSuite* LayoutSuiteTest<Suite>::suite_ = nullptr;

// Model families, for layout suites parametrised by family (TYPED_TEST_SUITE(Suite, Families,
// FamilyNames)): the spec's model line for given sizes, and how many tensors that model has.
struct Gpt2Family {
  static constexpr const char* kName = "gpt";
  static std::string Model(int layers, int hidden, int heads, int vocab, int seq_len);
  static int Tensors(int layers) { return 2 + 12 * layers + 2; }  // wte, wpe, blocks, ln_f.
};
// Grouped-query attention with kv_heads = heads / 2, an untied head (docs/models.md).
struct LlamaFamily {
  static constexpr const char* kName = "llama";
  static std::string Model(int layers, int hidden, int heads, int vocab, int seq_len);
  static int Tensors(int layers) { return 1 + 9 * layers + 2; }  // embed_tokens, blocks, norm, lm_head.
};
// A Mixture of Experts: Mixtral's sparse blocks of 4 experts (top-2, width = hidden) with a visible
// balancing-loss coefficient, on LlamaFamily's attention.
struct MixtralFamily {
  static constexpr const char* kName = "mixtral";
  static std::string Model(int layers, int hidden, int heads, int vocab, int seq_len);
  static int Tensors(int layers) { return 1 + (6 + 1 + 4 * 3) * layers + 2; }  // + router, 4 experts' w1, w2, w3.
};
using Families = ::testing::Types<Gpt2Family, LlamaFamily>;
// The suites whose layouts a Mixture of Experts runs too (pipelines, sequence parallelism).
using FamiliesWithExperts = ::testing::Types<Gpt2Family, LlamaFamily, MixtralFamily>;
struct FamilyNames {
  template <typename Family>
  static std::string GetName(int) { return Family::kName; }
};

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_TESTING_COMPARE_H_
