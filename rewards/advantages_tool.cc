// Test tool (tests/python/grpo_advantages_test.py): reads one JSON case on stdin —
//   {"per_function": [[r or null, ...], ...], "group_size": G, "scale": "group"|"batch"|"none",
//    "weights": [...]?}
// — and prints ComputeAdvantages' result as JSON (NaN as null), or {"error": "..."}.
#include <cmath>
#include <iostream>
#include <limits>
#include <vector>

#include "nlohmann/json.hpp"
#include "rewards/advantages.h"

namespace {

using Json = nlohmann::json;

Json Numbers(const std::vector<double>& v) {
  Json out = Json::array();
  for (double x : v) out.push_back(std::isnan(x) ? Json() : Json(x));
  return out;
}

}  // namespace

int main() {
  using namespace tessera::rewards;
  const Json in = Json::parse(std::cin);
  std::vector<std::vector<double>> per;
  for (const Json& f : in["per_function"]) {
    per.emplace_back();
    for (const Json& r : f) per.back().push_back(r.is_null() ? std::numeric_limits<double>::quiet_NaN() : r.get<double>());
  }
  AdvantageOptions o;
  o.group_size = in["group_size"].get<int>();
  const std::string scale = in.value("scale", "group");
  o.scale = scale == "batch" ? RewardScale::kBatch : scale == "none" ? RewardScale::kNone : RewardScale::kGroup;
  if (in.contains("weights")) o.weights = in["weights"].get<std::vector<double>>();
  auto a = ComputeAdvantages(per, o);
  if (!a.ok()) {
    std::cout << Json{{"error", std::string(a.status().message())}}.dump() << "\n";
    return 0;
  }
  Json out = {{"rewards", Numbers(a->rewards)},
              {"advantages", Numbers(a->advantages)},
              {"reward", a->reward},
              {"reward_std", a->reward_std},
              {"frac_reward_zero_std", a->frac_reward_zero_std},
              {"function_mean", Numbers(a->function_mean)},
              {"function_std", Numbers(a->function_std)}};
  std::cout << out.dump() << "\n";
  return 0;
}
