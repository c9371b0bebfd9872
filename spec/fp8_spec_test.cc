// train.precision fp8's section (proto Fp8Spec): checked only with precision fp8, zeros read as the
// defaults — a spec stored before the section existed (re-validated when a coordinator recovers its
// jobs) or a request that leaves it out stays valid — and bad values refused by field.
#include <string>
#include <vector>

#include "spec/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::spec {
namespace {

using ::testing::HasSubstr;

constexpr char kSpec[] = "name: t\ndata: {path: /x.bin}\nmodel: {heads: 4}\ntrain: {micro_batch: 1, global_batch: 2}\n";

std::string Errors(const v1::JobSpec& s) {
  std::string all;
  for (const SpecError& e : ValidateJobSpec(s)) all += e.field + ": " + e.message + "\n";
  return all;
}

TEST(Fp8SpecTest, AnEmptySectionIsTheDefaultsAndOnlyFp8ChecksIt) {
  auto parsed = ParseJobSpec(kSpec, {"output_dir=/out/t"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  v1::JobSpec s = *parsed;
  s.mutable_train()->clear_fp8();  // As stored by a version without it.
  for (v1::Precision p : {v1::PRECISION_FP32, v1::PRECISION_BF16, v1::PRECISION_FP16, v1::PRECISION_FP8}) {
    s.mutable_train()->set_precision(p);
    EXPECT_EQ(Errors(s), "") << v1::Precision_Name(p);
  }
  s.mutable_train()->set_precision(v1::PRECISION_BF16);
  s.mutable_train()->mutable_fp8()->set_amax_history(16);  // Ignored without fp8.
  EXPECT_EQ(Errors(s), "");
}

TEST(Fp8SpecTest, BadValuesAreRefusedByField) {
  auto s = ParseJobSpec(kSpec, {"output_dir=/out/t", "train.precision=fp8", "train.fp8.amax_history=16",
                                "train.fp8.min_dim=3", "train.fp8.filter=['', mlp]"});
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string errors = Errors(*s);
  EXPECT_THAT(errors, HasSubstr("train.fp8.amax_history: 16: only 1"));
  EXPECT_THAT(errors, HasSubstr("train.fp8.min_dim"));
  EXPECT_THAT(errors, HasSubstr("train.fp8.filter[0]: a pattern of 1 to 256 characters"));
  auto defaults = ParseJobSpec(kSpec, {"output_dir=/out/t", "train.precision=fp8"});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(Errors(*defaults), "");
  EXPECT_EQ(defaults->train().fp8().recipe(), v1::FP8_RECIPE_TENSORWISE);
  EXPECT_EQ(defaults->train().fp8().min_dim(), 256);
}

}  // namespace
}  // namespace tessera::spec
