// train.objective and its sections: DPO's, the reward model's and GRPO's (validate_objective.h).
#include "spec/validate_objective.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::spec::internal {

// train.objective and its section (dpo:, reward_model:); the layouts an objective runs in are
// CheckLayout's.
void CheckObjective(const v1::JobSpec& s, Checker& c) {
  const auto& d = s.data();
  c.InRange("data.max_prompt_tokens", d.max_prompt_tokens(), 0, limits::kMaxSeqLen);
  c.InRange("data.max_completion_tokens", d.max_completion_tokens(), 0, limits::kMaxSeqLen);
  const v1::Objective objective = s.train().objective();
  if (objective != v1::OBJECTIVE_REWARD && s.reward_model().center_coefficient() != 0) {
    c.Fail("reward_model.center_coefficient", "applies to train.objective reward only");
  }
  if (objective != v1::OBJECTIVE_DPO) {
    // The dpo: section is read with objective dpo only: a value other than its default (or a stored
    // spec's unset field) would be ignored, so it is refused.
    const v1::DpoSpec& dpo = s.dpo();
    const std::pair<const char*, bool> set[] = {
        {"dpo.beta", dpo.beta() != 0 && dpo.beta() != 0.1},
        {"dpo.loss_type", dpo.loss_type() != v1::DPO_LOSS_TYPE_UNSPECIFIED && dpo.loss_type() != v1::DPO_LOSS_TYPE_SIGMOID},
        {"dpo.label_smoothing", dpo.label_smoothing() != 0},
        {"dpo.reference", !dpo.reference().empty() && dpo.reference() != "initial"},
        {"dpo.precompute_reference", dpo.precompute_reference()}};
    for (const auto& [field, differs] : set) {
      if (differs) c.Fail(field, "applies to train.objective dpo only (remove the dpo: section, or --set dpo=null)");
    }
  }
  if (objective == v1::OBJECTIVE_GRPO) {
    if (d.max_completion_tokens() != 0) {
      c.Fail("data.max_completion_tokens", "applies to preference pairs; GRPO's completions end at grpo.max_completion_tokens");
    }
    if (d.blend_size() > 0) c.Fail("data.blend", "is not supported with train.objective grpo (one prompt dataset, data.path)");
    if (d.packing()) c.Fail("data.packing", "is not supported with train.objective grpo (each completion is a sequence)");
    if (s.model().has_lora() && s.model().lora().dropout() != 0) {
      c.Fail("model.lora.dropout", absl::StrCat(s.model().lora().dropout(), " with train.objective grpo is not "
                                                "supported yet (the sampler runs without dropout): set 0"));
    }
    return;
  }
  if (objective != v1::OBJECTIVE_DPO && objective != v1::OBJECTIVE_REWARD) {
    for (const auto& [field, value] : {std::pair{"data.max_prompt_tokens", d.max_prompt_tokens()},
                                       std::pair{"data.max_completion_tokens", d.max_completion_tokens()}}) {
      if (value != 0) c.Fail(field, "applies to train.objective dpo or reward only (preference pairs)");
    }
    return;
  }
  const std::string with = objective == v1::OBJECTIVE_DPO ? "with train.objective dpo" : "with train.objective reward";
  if (d.blend_size() > 0) c.Fail("data.blend", absl::StrCat("is not supported ", with, " (one preference dataset, data.path)"));
  if (d.packing()) c.Fail("data.packing", absl::StrCat("is not supported ", with, " (each pair is two sequences)"));
  if (s.model().has_lora() && s.model().lora().dropout() != 0) {
    c.Fail("model.lora.dropout", absl::StrCat(s.model().lora().dropout(), ": ", with,
                                              " trains without dropout, as TRL's DPOTrainer and RewardTrainer do "
                                              "(disable_dropout, true by default; peft's lora_dropout too): set 0"));
  }
  if (objective == v1::OBJECTIVE_REWARD) {
    const double center = s.reward_model().center_coefficient();
    if (!(center >= 0 && center <= 1e6)) {
      c.Fail("reward_model.center_coefficient", absl::StrCat(center, " must be in [0, 1e6]"));
    }
    return;
  }
  const v1::DpoSpec& dpo = s.dpo();
  if (!(dpo.beta() > 0) || !(dpo.beta() <= 1e6)) c.Fail("dpo.beta", absl::StrCat(dpo.beta(), " must be in (0, 1e6]"));
  if (dpo.loss_type() == v1::DPO_LOSS_TYPE_UNSPECIFIED) c.Fail("dpo.loss_type", "must be sigmoid or ipo");
  if (!(dpo.label_smoothing() >= 0 && dpo.label_smoothing() < 0.5)) {
    c.Fail("dpo.label_smoothing", absl::StrCat(dpo.label_smoothing(), " must be in [0, 0.5)"));
  } else if (dpo.label_smoothing() != 0 && dpo.loss_type() == v1::DPO_LOSS_TYPE_IPO) {
    c.Fail("dpo.label_smoothing", "applies to loss_type sigmoid only");
  }
  if (!dpo.reference().empty() && dpo.reference() != "initial") {
    // A path: a tessera checkpoint or a transformers directory of the job's model (checked where the
    // rank reads it, against the spec's model).
    c.Path("dpo.reference", dpo.reference());
    if (s.model().has_lora()) {
      c.Fail("dpo.reference", "a path is not supported with model.lora: the reference is the base model, the adapters "
                              "off (as TRL with peft, which refuses a ref_model beside a peft_config)");
    }
  }
}

namespace {

// A reward's name: steps.jsonl's reward_NAME and TensorBoard's tag.
bool RewardNameOk(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') return false;
  }
  return true;
}

void CheckReward(const v1::RewardSpec& r, const std::string& at, Checker& c) {
  if (!RewardNameOk(r.name())) {
    c.Fail(at + ".name", r.name().empty() ? "is required (steps.jsonl reports reward_NAME)"
                                          : absl::StrCat("\"", r.name().substr(0, 64),
                                                         "\" must be 1-64 letters, digits or '_'"));
  }
  if (r.has_weight() && !std::isfinite(r.weight())) c.Fail(at + ".weight", "must be a finite number");
  // Each field belongs to one kind; another kind's field would be ignored, so it is refused.
  const bool exact = r.kind() == v1::REWARD_KIND_EXACT_ANSWER, regex = r.kind() == v1::REWARD_KIND_REGEX,
             length = r.kind() == v1::REWARD_KIND_LENGTH, program = r.kind() == v1::REWARD_KIND_PROGRAM,
             model = r.kind() == v1::REWARD_KIND_MODEL;
  const std::pair<const char*, bool> misplaced[] = {
      {"field", !exact && !r.field().empty()},      {"pattern", !regex && !r.pattern().empty()},
      {"max_tokens", !length && r.max_tokens() != 0}, {"soft_cache", !length && r.soft_cache() != 0},
      {"command", !program && r.command_size() > 0}, {"timeout_s", !program && r.timeout_s() != 0},
      {"path", !model && !r.path().empty()}};
  for (const auto& [field, bad] : misplaced) {
    if (bad) c.Fail(absl::StrCat(at, ".", field), "does not apply to this kind of reward");
  }
  switch (r.kind()) {
    case v1::REWARD_KIND_EXACT_ANSWER:
      if (r.field().size() > 256) c.Fail(at + ".field", "is longer than 256 bytes");
      break;
    case v1::REWARD_KIND_REGEX:
      if (r.pattern().empty()) c.Fail(at + ".pattern", "is required for kind regex");
      if (r.pattern().size() > 4096) c.Fail(at + ".pattern", "is longer than 4096 bytes");
      break;
    case v1::REWARD_KIND_LENGTH:
      if (c.InRange(at + ".max_tokens", r.max_tokens(), 1, limits::kMaxSeqLen)) {
        c.InRange(at + ".soft_cache", r.soft_cache(), 0, r.max_tokens());
      }
      break;
    case v1::REWARD_KIND_PROGRAM:
      if (r.command_size() == 0 || r.command(0).empty()) c.Fail(at + ".command", "is required for kind program (argv)");
      if (r.command_size() > 256) c.Fail(at + ".command", absl::StrCat(r.command_size(), " arguments exceed the limit 256"));
      for (int i = 0; i < r.command_size(); ++i) c.Path(absl::StrCat(at, ".command[", i, "]"), r.command(i));
      if (!(r.timeout_s() >= 0 && r.timeout_s() <= 86400)) {
        c.Fail(at + ".timeout_s", absl::StrCat(r.timeout_s(), " must be in [0, 86400] (0: the default, 60)"));
      }
      break;
    case v1::REWARD_KIND_MODEL:
      if (r.path().empty()) c.Fail(at + ".path", "is required for kind model (a reward checkpoint or directory)");
      c.Path(at + ".path", r.path());
      break;
    default:
      c.Fail(at + ".kind", "is required: exact_answer, regex, length, program or model");
  }
}

}  // namespace

// The grpo: section (TRL 0.24's GRPOConfig ranges; docs/post-training.md "GRPO"). With another
// objective its fields would be ignored: a value other than its default is refused.
void CheckGrpo(const v1::JobSpec& s, Checker& c) {
  const v1::GrpoSpec& g = s.grpo();
  if (s.train().objective() != v1::OBJECTIVE_GRPO) {
    const std::pair<const char*, bool> set[] = {
        {"grpo.num_generations", g.num_generations() != 0 && g.num_generations() != 8},
        {"grpo.max_completion_tokens", g.max_completion_tokens() != 0 && g.max_completion_tokens() != 256},
        {"grpo.temperature", g.temperature() != 0 && g.temperature() != 1},
        {"grpo.top_p", g.top_p() != 0 && g.top_p() != 1},
        {"grpo.top_k", g.top_k() != 0},
        {"grpo.beta", g.beta() != 0},
        {"grpo.epsilon", g.epsilon() != 0 && g.epsilon() != 0.2},
        {"grpo.epsilon_high", g.has_epsilon_high()},
        {"grpo.loss_type", g.loss_type() != v1::GRPO_LOSS_TYPE_UNSPECIFIED && g.loss_type() != v1::GRPO_LOSS_TYPE_DAPO},
        {"grpo.scale_rewards",
         g.scale_rewards() != v1::REWARD_SCALE_UNSPECIFIED && g.scale_rewards() != v1::REWARD_SCALE_GROUP},
        {"grpo.num_iterations", g.num_iterations() != 0 && g.num_iterations() != 1},
        {"grpo.mask_truncated_completions", g.mask_truncated_completions()},
        {"grpo.rewards", g.rewards_size() > 0}};
    for (const auto& [field, differs] : set) {
      if (differs) c.Fail(field, "applies to train.objective grpo only (remove the grpo: section, or --set grpo=null)");
    }
    return;
  }
  if (g.num_generations() < 2) {
    c.Fail("grpo.num_generations", absl::StrCat(g.num_generations(), " must be at least 2: a completion's advantage is "
                                                "its reward against its prompt's other completions (TRL's minimum)"));
  }
  c.InRange("grpo.num_generations", g.num_generations(), 1, 4096);
  c.InRange("grpo.max_completion_tokens", g.max_completion_tokens(), 1, limits::kMaxSeqLen);
  if (!(g.temperature() > 0 && g.temperature() <= 100)) {
    c.Fail("grpo.temperature", absl::StrCat(g.temperature(), " must be in (0, 100] (GRPO samples: no greedy)"));
  }
  if (!(g.top_p() > 0 && g.top_p() <= 1)) c.Fail("grpo.top_p", absl::StrCat(g.top_p(), " must be in (0, 1]"));
  c.InRange("grpo.top_k", g.top_k(), 0, limits::kMaxVocab);
  if (!(g.beta() >= 0 && g.beta() <= 1e6)) c.Fail("grpo.beta", absl::StrCat(g.beta(), " must be in [0, 1e6]"));
  if (!(g.epsilon() >= 0 && g.epsilon() < 1)) c.Fail("grpo.epsilon", absl::StrCat(g.epsilon(), " must be in [0, 1)"));
  if (g.has_epsilon_high() && !(g.epsilon_high() >= 0 && g.epsilon_high() <= 1e6)) {
    c.Fail("grpo.epsilon_high", absl::StrCat(g.epsilon_high(), " must be in [0, 1e6]"));
  }
  if (g.loss_type() == v1::GRPO_LOSS_TYPE_UNSPECIFIED) c.Fail("grpo.loss_type", "must be grpo, bnpo, dr_grpo or dapo");
  if (g.scale_rewards() == v1::REWARD_SCALE_UNSPECIFIED) c.Fail("grpo.scale_rewards", "must be group, batch or none");
  c.InRange("grpo.num_iterations", g.num_iterations(), 1, 1024);
  // A step's completions: at most kMaxGlobalBatch samples, in whole micro-batches on every replica.
  const int64_t completions = int64_t{s.train().global_batch()} * g.num_generations();
  if (completions > limits::kMaxGlobalBatch) {
    c.Fail("grpo.num_generations", absl::StrCat("train.global_batch × grpo.num_generations = ", completions,
                                                " completions a step exceed the limit ", limits::kMaxGlobalBatch));
  } else if (s.train().micro_batch() >= 1 && s.train().global_batch() >= 1 && g.num_generations() >= 1) {
    const int64_t per_step = int64_t{s.train().micro_batch()} * std::max(1, s.parallel().dp());
    if (completions % per_step != 0) {
      c.Fail("train.micro_batch", absl::StrCat(s.train().micro_batch(), " completions × parallel.dp = ", per_step,
                                               " does not divide the step's ", s.train().global_batch(), " prompts × ",
                                               g.num_generations(), " generations = ", completions, " completions"));
    }
  }
  // Each data-parallel replica samples its own prompts' groups whole.
  const int64_t dp = std::max(1, s.parallel().dp());
  if (s.train().global_batch() >= 1 && s.train().global_batch() % dp != 0) {
    c.Fail("train.global_batch", absl::StrCat(s.train().global_batch(), " prompts are not a multiple of parallel.dp = ",
                                              dp, " (each replica samples whole groups)"));
  }
  if (g.rewards_size() == 0) c.Fail("grpo.rewards", "needs at least one reward function");
  c.InRange("grpo.rewards", g.rewards_size(), 0, 64);
  std::set<std::string> names;
  for (int i = 0; i < g.rewards_size() && i < 64; ++i) {
    const std::string at = absl::StrCat("grpo.rewards[", i, "]");
    CheckReward(g.rewards(i), at, c);
    if (g.rewards(i).name() == "std") {
      c.Fail(at + ".name", "\"std\" would be logged as reward_std, the rewards' standard deviation: choose another");
    }
    if (!g.rewards(i).name().empty() && !names.insert(g.rewards(i).name()).second) {
      c.Fail(at + ".name", absl::StrCat("\"", g.rewards(i).name(), "\" is another reward's name too"));
    }
  }
  // What the GRPO step does not do yet (issue 57), refused by name rather than ignored.
  if (g.num_iterations() > 1) {
    // A checkpoint falls between generations: a resumed job starts a generation (nothing of one is kept).
    const int64_t mu = g.num_iterations();
    if (s.train().steps() % mu != 0) {
      c.Fail("train.steps", absl::StrCat(s.train().steps(), " is not a multiple of grpo.num_iterations = ", mu,
                                         " (each generation trains num_iterations steps)"));
    }
    if (s.checkpoint().every_steps() % mu != 0) {
      c.Fail("checkpoint.every_steps", absl::StrCat(s.checkpoint().every_steps(), " is not a multiple of "
                                                    "grpo.num_iterations = ", mu, " (a checkpoint falls between generations)"));
    }
  }
  if (!s.data().valid_path().empty()) c.Fail("data.valid_path", "is not supported with train.objective grpo (no validation loss)");
  if (s.data().valid_fraction() != 0) {
    c.Fail("data.valid_fraction", "is not supported with train.objective grpo (no validation loss)");
  }
}

}  // namespace tessera::spec::internal
