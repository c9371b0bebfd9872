// What the worker reads from others: start orders (CheckStartOrder) and rank 0's step log
// (ParseStepLine, ReadCompleteLines). Bad input is an error or skipped, never an exception.
#include <sstream>
#include <string>
#include <vector>

#include "spec/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/start_order.h"
#include "common/steplog/step_log.h"

namespace tessera::worker {
namespace {

using steplog::kMaxStepLineBytes;
using steplog::ParseStepLine;
using steplog::ReadCompleteLines;

TEST(StepLogTest, ReadsATrainerLine) {
  auto r = ParseStepLine(R"({"step": 7, "loss": 2.5, "lr": 0.001, "grad_norm": 1.25, "tokens": 4096,
      "tokens_per_s": 1000.5, "step_seconds": 0.5, "resumed_from": 4, "discarded_steps": 1, "bytes_all_reduced": 99})");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 7);
  EXPECT_EQ(r->loss, 2.5);
  EXPECT_EQ(r->lr, 0.001);
  EXPECT_EQ(r->grad_norm, 1.25);
  EXPECT_EQ(r->tokens, 4096);
  EXPECT_EQ(r->tokens_per_s, 1000.5);
  EXPECT_EQ(r->step_seconds, 0.5);
  EXPECT_EQ(r->resumed_from, 4);
  EXPECT_EQ(r->discarded_steps, 1);
  EXPECT_EQ(r->bytes_all_reduced, 99);
  EXPECT_FALSE(r->val_loss.has_value());
  auto v = ParseStepLine(R"({"step": 8, "val_loss": 2.25})");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->val_loss, 2.25);
  EXPECT_FALSE(v->aux_loss.has_value() || v->lm_loss.has_value() || v->expert_imbalance.has_value());
  // A Mixture of Experts' step line.
  auto moe = ParseStepLine(R"({"step": 9, "loss": 5.1, "lm_loss": 5.06, "aux_loss": 2.01, "expert_imbalance": 1.3})");
  ASSERT_TRUE(moe.has_value());
  EXPECT_EQ(moe->lm_loss, 5.06);
  EXPECT_EQ(moe->aux_loss, 2.01);
  EXPECT_EQ(moe->expert_imbalance, 1.3);
  EXPECT_FALSE(ParseStepLine(R"({"step": 9, "aux_loss": "x"})")->aux_loss.has_value());
  auto async = ParseStepLine(R"({"step": 4, "loss": 5, "checkpoint_blocked_s": 0.25, "checkpoint_write_s": 1.5})");
  ASSERT_TRUE(async.has_value());
  EXPECT_EQ(async->checkpoint_blocked_s, 0.25);
  EXPECT_EQ(async->checkpoint_write_s, 1.5);
  EXPECT_FALSE(v->checkpoint_blocked_s.has_value() || v->checkpoint_write_s.has_value());
}

// A warning line is not a step: its text is kept (cut to kMaxWarningBytes at a character boundary).
TEST(StepLogTest, AWarningLineIsReadAsAWarning) {
  auto w = ParseStepLine(steplog::FormatWarningLine(4, "step_00000004 is damaged; set aside"));
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->step, 4);
  EXPECT_EQ(w->warning, "step_00000004 is damaged; set aside");
  EXPECT_FALSE(ParseStepLine(R"({"step": 4, "loss": 2})")->warning.has_value());
  EXPECT_FALSE(ParseStepLine(R"({"step": 4, "warning": 7})")->warning.has_value()) << "not a string";
  // 2,000 two-byte characters: cut to at most 1 KiB without splitting one.
  std::string long_text;
  for (int i = 0; i < 2000; ++i) long_text += "\xc3\xa9";
  auto cut = ParseStepLine(steplog::FormatWarningLine(1, long_text));
  ASSERT_TRUE(cut.has_value());
  ASSERT_TRUE(cut->warning.has_value());
  EXPECT_LE(cut->warning->size(), steplog::kMaxWarningBytes);
  EXPECT_EQ(cut->warning->substr(cut->warning->size() - 3), "...");
  EXPECT_EQ(cut->warning->substr(0, 4), "\xc3\xa9\xc3\xa9");
  EXPECT_EQ((cut->warning->size() - 3) % 2, 0u) << "whole characters";
  // Bytes that are not UTF-8 (a path's) are replaced, never thrown on.
  auto bad = ParseStepLine(steplog::FormatWarningLine(1, "path \xff\xfe"));
  ASSERT_TRUE(bad.has_value());
  EXPECT_THAT(*bad->warning, ::testing::HasSubstr("path "));
  EXPECT_EQ(steplog::CutWarning("\x1b]0;title\x07 x"), "?]0;title? x") << "no escape sequences";
}

// Before ParseStepLine the worker read lines with nlohmann's value(), which throws on a member of
// another type or a line that is not an object: one such line in steps.jsonl ended tessera-worker.
TEST(StepLogTest, OddLinesNeverThrow) {
  for (const char* line : {"5", "[1,2]", "\"x\"", "null", "", "{", "{\"step\": 1,}"}) {
    EXPECT_FALSE(ParseStepLine(line).has_value()) << line;
  }
  auto r = ParseStepLine(R"({"step": "x", "loss": "y", "tokens": 1.5, "val_loss": "z", "lr": 18446744073709551615,
                            "bytes_all_reduced": 18446744073709551615})");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 0);
  EXPECT_EQ(r->loss, 0);
  EXPECT_EQ(r->tokens, 0);
  EXPECT_FALSE(r->val_loss.has_value());
  EXPECT_EQ(r->bytes_all_reduced, 0);  // Above INT64_MAX.
  EXPECT_GT(r->lr, 1e19);              // A number, read as one.
  EXPECT_FALSE(ParseStepLine(std::string(kMaxStepLineBytes + 1, ' ')).has_value());
}

TEST(StepLogTest, CompleteLinesOnly) {
  std::istringstream in("{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3");
  std::vector<std::string> lines;
  const int64_t consumed = ReadCompleteLines(in, [&](std::string_view l) { lines.emplace_back(l); });
  EXPECT_EQ(lines, (std::vector<std::string>{"{\"step\": 1}", "{\"step\": 2}"}));
  EXPECT_EQ(consumed, 24);  // Two lines of 11 bytes and their newlines; the unfinished third waits.
}

TEST(StepLogTest, LongLinesAreCut) {
  std::istringstream in(std::string(3 * kMaxStepLineBytes, 'a') + "\n{\"step\": 2}\n");
  std::vector<std::string> lines;
  const int64_t consumed = ReadCompleteLines(in, [&](std::string_view l) { lines.emplace_back(l); });
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].size(), kMaxStepLineBytes + 1);
  EXPECT_FALSE(ParseStepLine(lines[0]).has_value());
  EXPECT_EQ(lines[1], "{\"step\": 2}");
  EXPECT_EQ(consumed, static_cast<int64_t>(3 * kMaxStepLineBytes + 1 + 12));
}

class StartOrderTest : public ::testing::Test {
 protected:
  StartOrderTest() {
    auto spec = spec::ParseJobSpec("name: t\ndata: {path: /data/x.bin}\nmodel: {heads: 4}\n"
                                   "train: {micro_batch: 1, global_batch: 4}\noutput_dir: /out/alice/t\n",
                                   {"parallel.dp=2"});
    EXPECT_TRUE(spec.ok()) << spec.status();
    order_.set_action(v1::Assignment::ACTION_START);
    order_.set_job_id("job-000001");
    order_.set_owner("alice");
    order_.set_attempt(0);
    order_.set_rank(1);
    order_.set_local_rank(1);
    order_.set_world_size(2);
    order_.set_store_host("198.18.0.1");
    order_.set_store_port(29500);
    *order_.mutable_spec() = *spec;
  }
  absl::Status Check(const v1::Assignment& a) { return CheckStartOrder(a, /*device_count=*/2, spec::PathRoots()); }
  v1::Assignment order_;
};

TEST_F(StartOrderTest, AGoodOrderPasses) { EXPECT_TRUE(Check(order_).ok()) << Check(order_); }

TEST_F(StartOrderTest, EachBadFieldIsNamed) {
  struct Case {
    std::function<void(v1::Assignment*)> change;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {[](v1::Assignment* a) { a->set_job_id("../../etc"); }, "assignment.job_id: not a job id"},
      {[](v1::Assignment* a) { a->set_job_id(".."); }, "assignment.job_id"},
      {[](v1::Assignment* a) { a->set_job_id(""); }, "assignment.job_id"},
      {[](v1::Assignment* a) { a->set_job_id(std::string(65, 'j')); }, "assignment.job_id"},
      {[](v1::Assignment* a) { a->set_owner("a/b"); }, "assignment.owner: not a user name"},
      {[](v1::Assignment* a) { a->set_attempt(-1); }, "assignment.attempt: -1 is negative"},
      {[](v1::Assignment* a) { a->set_world_size(0); }, "assignment.world_size: 0 is not positive"},
      {[](v1::Assignment* a) { a->set_rank(2); }, "assignment.rank: 2 is not in [0, world_size 2)"},
      {[](v1::Assignment* a) { a->set_rank(-1); }, "assignment.rank: -1"},
      {[](v1::Assignment* a) { a->set_local_rank(2); }, "assignment.local_rank: 2 is not a device of this worker"},
      {[](v1::Assignment* a) { a->set_store_port(70000); }, "assignment.store_port: 70000 is not a port"},
      {[](v1::Assignment* a) { a->set_store_host("a b"); }, "assignment.store_host"},
      {[](v1::Assignment* a) { a->set_store_host(""); }, "assignment.store_host"},
      {[](v1::Assignment* a) { a->clear_spec(); }, "assignment.spec: is missing"},
      {[](v1::Assignment* a) { a->mutable_spec()->mutable_train()->set_micro_batch(0); }, "assignment.spec: train.micro_batch"},
      {[](v1::Assignment* a) { a->set_world_size(4); a->set_rank(3); }, "assignment.world_size: 4 is not the spec's 2"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    v1::Assignment a = order_;
    cases[i].change(&a);
    absl::Status s = Check(a);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << i << ": " << s;
    EXPECT_NE(std::string(s.message()).find(cases[i].expected), std::string::npos) << i << ": " << s;
  }
}

TEST_F(StartOrderTest, PathsOutsideTheRootsAreRefused) {
  auto roots = spec::ParsePathRoots("/data", "/out");
  ASSERT_TRUE(roots.ok()) << roots.status();
  // The paths are shape-checked; /data and /out need not exist for a refusal.
  v1::Assignment a = order_;
  a.mutable_spec()->set_output_dir("/out/bob/t");
  absl::Status s = CheckStartOrder(a, 2, *roots);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("output_dir"), std::string::npos) << s;
}

}  // namespace
}  // namespace tessera::worker
