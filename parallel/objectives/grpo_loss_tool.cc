// Test tool (tests/python/grpo_loss_test.py): reads one JSON case on stdin —
//   {"type": "grpo"|"bnpo"|"dr_grpo"|"dapo", "beta": b, "epsilon": e, "epsilon_high": eh,
//    "max_completion_tokens": n, "normalizer": z, "logps": [[...]], "old_logps": [[...]]?,
//    "ref_logps": [[...]]?, "advantages": [...], "mask": [[...]]}
// — and prints {"loss": l, "grad": [[...]] (d loss / d logps), "kl": k?, "low_clip": ..., "high_clip": ...,
// "clip_ratio": ...}, all in float64.
#include <iostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "nlohmann/json.hpp"
#include "parallel/objectives/grpo_loss.h"

namespace {

using Json = nlohmann::json;

at::Tensor Matrix(const Json& j) {
  std::vector<double> flat;
  for (const Json& row : j) {
    for (const Json& v : row) flat.push_back(v.get<double>());
  }
  const int64_t rows = static_cast<int64_t>(j.size());
  return at::tensor(flat, at::kDouble).view({rows, rows > 0 ? static_cast<int64_t>(flat.size()) / rows : 0});
}

}  // namespace

int main() {
  using namespace tessera::parallel;
  const Json in = Json::parse(std::cin);
  GrpoLossOptions o;
  const std::string type = in["type"].get<std::string>();
  o.type = type == "bnpo" ? GrpoLossType::kBnpo
           : type == "dr_grpo" ? GrpoLossType::kDrGrpo
           : type == "dapo" ? GrpoLossType::kDapo
                            : GrpoLossType::kGrpo;
  o.beta = in.value("beta", 0.0);
  o.epsilon = in.value("epsilon", 0.2);
  o.epsilon_high = in.value("epsilon_high", o.epsilon);
  o.max_completion_tokens = in.value("max_completion_tokens", int64_t{0});
  o.normalizer = in.value("normalizer", 0.0);
  GrpoInputs x;
  x.logps = Matrix(in["logps"]).set_requires_grad(true);
  if (in.contains("old_logps")) x.old_logps = Matrix(in["old_logps"]);
  if (in.contains("ref_logps")) x.ref_logps = Matrix(in["ref_logps"]);
  x.advantages = at::tensor(in["advantages"].get<std::vector<double>>(), at::kDouble);
  x.mask = Matrix(in["mask"]);
  const GrpoTerms t = GrpoLosses(x, o);
  t.loss.backward();
  const at::Tensor g = x.logps.grad().contiguous();
  Json grad = Json::array();
  for (int64_t i = 0; i < g.size(0); ++i) {
    const at::Tensor row = g[i].contiguous();
    grad.push_back(std::vector<double>(row.data_ptr<double>(), row.data_ptr<double>() + row.numel()));
  }
  Json out = {{"loss", t.loss.item<double>()},
              {"grad", grad},
              {"low_clip", t.low_clip.item<double>()},
              {"high_clip", t.high_clip.item<double>()},
              {"clip_ratio", t.clip_ratio.item<double>()}};
  if (t.kl.defined()) out["kl"] = t.kl.item<double>();
  std::cout << out.dump() << "\n";
  return 0;
}
