// The scheduling policy file (scheduling_policy.h): a good file's teams, quotas, priorities and
// defaults; every problem of a bad one named with its line, all reported at once; the implicit policy.
#include "coordinator/scheduling_policy.h"

#include <string>

#include "gtest/gtest.h"

namespace tessera::coordinator {
namespace {

constexpr char kGood[] = R"(admins: [root]
fair_share: {half_life: 12h}
teams:
  - name: vision
    members: [alice, carol]
    max_priority: high
    quotas:
      - {device: cuda, pool: a100, guaranteed: 16, limit: 32}
      - {device: cpu, guaranteed: 4}
  - name: speech
    members: [bob]
)";

TEST(SchedulingPolicyTest, AGoodFileGivesTeamsQuotasAndDefaults) {
  auto policy = ParseSchedulingPolicy(kGood, "policy.yaml");
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_TRUE(policy->from_file);
  EXPECT_EQ(policy->admins, std::set<std::string>{"root"});
  EXPECT_DOUBLE_EQ(policy->half_life_s, 12 * 3600.0);
  ASSERT_EQ(policy->teams.size(), 2u);
  const Team& vision = policy->teams[0];
  EXPECT_EQ(vision.name, "vision");
  EXPECT_EQ(vision.line, 4);
  EXPECT_EQ(vision.max_priority, kPriorityHigh);
  ASSERT_EQ(vision.quotas.size(), 2u);
  EXPECT_EQ(vision.quotas[0].device, "cuda");
  EXPECT_EQ(vision.quotas[0].pool, "a100");
  EXPECT_EQ(vision.quotas[0].guaranteed, 16);
  EXPECT_EQ(vision.quotas[0].limit, 32);
  EXPECT_EQ(vision.quotas[1].pool, "");
  EXPECT_EQ(vision.quotas[1].limit, 4);  // No limit given: no borrowing.
  EXPECT_EQ(policy->teams[1].max_priority, kPriorityNormal);  // The default cap.
  EXPECT_EQ(policy->TeamOf("carol"), &policy->teams[0]);
  EXPECT_EQ(policy->TeamOf("bob"), &policy->teams[1]);
  EXPECT_EQ(policy->TeamOf("mallory"), nullptr);
  EXPECT_TRUE(policy->CheckPriority("alice", kPriorityHigh).ok());
  const absl::Status above = policy->CheckPriority("bob", kPriorityHigh);
  EXPECT_EQ(above.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(above.message(), "scheduling.priority high is above team 'speech''s max_priority normal");
  EXPECT_EQ(policy->CheckPriority("mallory", kPriorityLow).message(), "user 'mallory' is in no team of the scheduling policy");
}

TEST(SchedulingPolicyTest, WithoutAFileEveryUserIsInOneTeamWithEveryPriority) {
  const SchedulingPolicy open;
  EXPECT_FALSE(open.from_file);
  ASSERT_NE(open.TeamOf("anyone"), nullptr);
  EXPECT_EQ(open.TeamOf("anyone"), open.TeamOf(""));
  EXPECT_TRUE(open.TeamOf("anyone")->quotas.empty());
  EXPECT_TRUE(open.CheckPriority("anyone", kPriorityMax).ok());
}

TEST(SchedulingPolicyTest, PrioritiesAreNamesOrIntegersInRange) {
  EXPECT_EQ(*ParsePriority("low"), kPriorityLow);
  EXPECT_EQ(*ParsePriority("normal"), kPriorityNormal);
  EXPECT_EQ(*ParsePriority(""), kPriorityNormal);  // A spec without one.
  EXPECT_EQ(*ParsePriority("high"), kPriorityHigh);
  EXPECT_EQ(*ParsePriority("250"), 250);
  EXPECT_EQ(*ParsePriority("0"), 0);
  for (const char* bad : {"urgent", "-1", "1001", "12x", "99999999999999999999", " 5"}) {
    const auto p = ParsePriority(bad);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_NE(p.status().message().find("is not low, normal, high or an integer from 0 to 1000"), std::string::npos)
        << p.status().message();
  }
  EXPECT_EQ(PriorityName(kPriorityHigh), "high");
  EXPECT_EQ(PriorityName(250), "250");
}

TEST(SchedulingPolicyTest, EveryProblemIsNamedWithItsLine) {
  constexpr char kBad[] = R"(teams:
  - name: vision
    members: [alice, bob]
    max_priority: urgent
    quotas:
      - {device: cuda, guaranteed: -2}
      - {device: tpu, guaranteed: 1}
      - {device: cpu, guaranteed: 8, limit: 4}
    colour: blue
  - name: speech
    members: [bob]
  - name: vision
fair_share: {half_life: soon}
extra: 1
)";
  auto policy = ParseSchedulingPolicy(kBad, "p.yaml");
  ASSERT_FALSE(policy.ok());
  EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string m(policy.status().message());
  for (const char* want : {
           "p.yaml:4: team 'vision''s max_priority 'urgent' is not low, normal, high or an integer from 0 to 1000",
           "p.yaml:6: guaranteed '-2' is not a device count (an integer from 0 to 1099511627776)",
           "p.yaml:7: device 'tpu' is not cpu or cuda",
           "p.yaml:8: a quota of team 'vision': limit 4 is below guaranteed 8",
           "p.yaml:9: unknown key 'colour' in a team (known: name, members, max_priority, quotas)",
           "p.yaml:11: user 'bob' is in team 'vision' (line 2) and in team 'speech': a user is in one team at most",
           "p.yaml:12: team 'vision' is defined twice (first at line 2)",
           "p.yaml:13: fair_share.half_life 'soon' is not a duration such as 90s, 30m, 12h or 7d",
           "p.yaml:14: unknown key 'extra' in the policy (known: teams, admins, fair_share)",
       }) {
    EXPECT_NE(m.find(want), std::string::npos) << "missing: " << want << "\nin:\n" << m;
  }
}

TEST(SchedulingPolicyTest, MalformedFilesAreRefused) {
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"teams: [", "x:1: not YAML: end of sequence flow not found"},
           {"- a\n- b\n", "x:1: a scheduling policy is a mapping"},
           {"admins: [root]\n", "x:1: teams must be a list of teams"},
           {"teams:\n  - members: [a]\n", "x:2: a team has no name"},
           {"teams:\n  - name: 'bad name'\n", "x:2: team 'bad name': "},
           {"teams:\n  - {name: t, members: [a, a]}\n", "x:2: user 'a' is listed twice in team 't'"},
           {"teams:\n  - {name: t, quotas: {device: cpu}}\n", "x:2: team 't''s quotas must be a list"},
           {"teams:\n  - {name: t, quotas: [{device: cpu}, {device: cpu}]}\n", "a second quota for device cpu (any pool)"},
       }) {
    auto policy = ParseSchedulingPolicy(text, "x");
    ASSERT_FALSE(policy.ok()) << text;
    EXPECT_NE(std::string(policy.status().message()).find(want), std::string::npos)
        << text << " gave " << policy.status().message();
  }
  EXPECT_EQ(LoadSchedulingPolicy("/nonexistent/policy.yaml").status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(LoadSchedulingPolicy("/").status().message()).find("is not a regular file"), std::string::npos);
}

}  // namespace
}  // namespace tessera::coordinator
