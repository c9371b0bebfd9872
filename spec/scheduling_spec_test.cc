// A spec's scheduling section (proto SchedulingSpec): the priority by name or number, normal when left
// out (a spec stored before the section existed stays valid), anything else refused by field.
#include <string>

#include "gtest/gtest.h"
#include "spec/job_spec.h"
#include "spec/priority.h"

namespace tessera::spec {
namespace {

constexpr char kSpec[] = "name: t\ndata: {path: /x.bin}\nmodel: {heads: 4}\ntrain: {micro_batch: 1, global_batch: 2}\n";

std::string Errors(const v1::JobSpec& s) {
  std::string all;
  for (const SpecError& e : ValidateJobSpec(s)) all += e.field + ": " + e.message + "\n";
  return all;
}

TEST(SchedulingSpecTest, PrioritiesByNameOrNumberAndNormalWithout) {
  auto plain = ParseJobSpec(kSpec, {"output_dir=/out/t"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(Errors(*plain), "");
  EXPECT_EQ(*ParsePriority(plain->scheduling().priority()), kPriorityNormal);
  for (const auto& [text, want] : std::vector<std::pair<std::string, int>>{
           {"low", kPriorityLow}, {"high", kPriorityHigh}, {"0", 0}, {"1000", 1000}, {"250", 250}}) {
    auto s = ParseJobSpec(std::string(kSpec) + "scheduling: {priority: " + text + "}\n", {"output_dir=/out/t"});
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(Errors(*s), "") << text;
    EXPECT_EQ(*ParsePriority(s->scheduling().priority()), want) << text;
  }
}

TEST(SchedulingSpecTest, BadPrioritiesAndKeysAreRefusedByField) {
  for (const char* bad : {"urgent", "-5", "1001", "2.5"}) {
    auto s = ParseJobSpec(std::string(kSpec) + "scheduling: {priority: '" + bad + "'}\n", {"output_dir=/out/t"});
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(Errors(*s), std::string("scheduling.priority: '") + bad +
                              "' is not low, normal, high or an integer from 0 to 1000\n");
  }
  auto unknown = ParseJobSpec(std::string(kSpec) + "scheduling: {priorty: high}\n", {"output_dir=/out/t"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(std::string(unknown.status().message()).find("scheduling.priorty: unknown field"), std::string::npos)
      << unknown.status().message();
}

}  // namespace
}  // namespace tessera::spec
