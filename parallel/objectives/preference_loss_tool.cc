// Test tool (tests/python/preference_loss_test.py): reads one JSON case on stdin —
//   {"kind": "dpo", "type": "sigmoid"|"ipo", "beta": b, "label_smoothing": ls,
//    "chosen": [...], "rejected": [...], "ref_chosen": [...], "ref_rejected": [...]}
//   {"kind": "reward", "chosen": [...], "rejected": [...], "margin": [...]?, "center_coefficient": c}
// — and prints {"loss": mean, "losses": [...], "chosen_rewards": [...], "rejected_rewards": [...],
// "grad_chosen": [...], "grad_rejected": [...]} (gradients of the mean loss), all in float64.
#include <iostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "nlohmann/json.hpp"
#include "parallel/objectives/preference_loss.h"

namespace {

using Json = nlohmann::json;

at::Tensor Vec(const Json& j, bool grad = false) {
  std::vector<double> v = j.get<std::vector<double>>();
  return at::tensor(v, at::kDouble).set_requires_grad(grad);
}

std::vector<double> List(const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kDouble).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

}  // namespace

int main() {
  using namespace tessera::parallel;
  const Json in = Json::parse(std::cin);
  at::Tensor chosen = Vec(in["chosen"], true), rejected = Vec(in["rejected"], true);
  PreferenceTerms terms;
  if (in["kind"] == "dpo") {
    DpoLossOptions o;
    o.beta = in["beta"].get<double>();
    o.label_smoothing = in.value("label_smoothing", 0.0);
    o.type = in["type"] == "ipo" ? DpoLossType::kIpo : DpoLossType::kSigmoid;
    terms = DpoLosses({chosen, rejected, Vec(in["ref_chosen"]), Vec(in["ref_rejected"])}, o);
  } else {
    terms = RewardLosses(chosen, rejected, in.contains("margin") ? Vec(in["margin"]) : at::Tensor(),
                         in.value("center_coefficient", 0.0));
  }
  const at::Tensor loss = terms.losses.mean();
  loss.backward();
  Json out;
  out["loss"] = loss.item<double>();
  out["losses"] = List(terms.losses);
  out["chosen_rewards"] = List(terms.chosen_rewards);
  out["rejected_rewards"] = List(terms.rejected_rewards);
  out["grad_chosen"] = List(chosen.grad());
  out["grad_rejected"] = List(rejected.grad());
  std::cout << out.dump() << "\n";
  return 0;
}
