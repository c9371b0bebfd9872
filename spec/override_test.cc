// `--set FIELD=VALUE` overrides of a job spec (ParseJobSpec): `null` puts a field back to its default.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/job_spec.h"

namespace tessera::spec {
namespace {

using ::testing::HasSubstr;

constexpr char kSpec[] = R"(name: t
model: {family: llama, heads: 4, init_from: /models/a.safetensors}
data: {path: /x}
train: {micro_batch: 1, global_batch: 2, lr: 0.01}
)";

TEST(OverrideTest, NullPutsAFieldBackToItsDefault) {
  const v1::JobSpec defaults = DefaultJobSpec();
  v1::JobSpec written;
  auto s = ParseJobSpec(kSpec, {"model.init_from=null", "train.lr=~"}, &written);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->model().init_from(), "") << "starts from the seed";
  EXPECT_EQ(s->train().lr(), defaults.train().lr());
  EXPECT_NE(defaults.train().lr(), 0.01);
  EXPECT_EQ(written.model().init_from(), "") << "the spec as written drops it too";
  EXPECT_EQ(s->model().heads(), 4) << "the rest of the section stays";
  // A section as a whole.
  auto section = ParseJobSpec(kSpec, {"model=null"});
  ASSERT_TRUE(section.ok()) << section.status();
  EXPECT_EQ(section->model().heads(), defaults.model().heads());
}

TEST(OverrideTest, ABadPathIsNamed) {
  auto typo = ParseJobSpec(kSpec, {"model.init_form=null"});
  EXPECT_THAT(std::string(typo.status().message()), HasSubstr("model.init_form"));
  auto below = ParseJobSpec(kSpec, {"name.x=null"});
  EXPECT_THAT(std::string(below.status().message()), HasSubstr("is not a section"));
  // An empty value is still a mistake, not a reset.
  auto empty = ParseJobSpec(kSpec, {"model.init_from="});
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("model.init_from: missing value"));
}

}  // namespace
}  // namespace tessera::spec
