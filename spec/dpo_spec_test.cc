// train.objective and its dpo: and reward_model: sections (proto Objective, DpoSpec, RewardModelSpec): a
// spec stored before the field existed (objective 0) is cross-entropy, the dpo section is checked only
// with objective dpo, reward_model's belongs to objective reward, what the preference objectives do not
// run yet is refused by field, and the layouts they cannot run in are CheckLayout's problems.
#include <string>
#include <vector>

#include "spec/job_spec.h"
#include "spec/paths.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::spec {
namespace {

using ::testing::HasSubstr;

constexpr char kSpec[] =
    "name: t\ndata: {path: /x}\nmodel: {heads: 4}\ntrain: {objective: dpo, micro_batch: 1, global_batch: 2}\n";

std::string Errors(const v1::JobSpec& s) {
  std::string all;
  for (const SpecError& e : ValidateJobSpec(s)) all += e.field + ": " + e.message + "\n";
  return all;
}

TEST(DpoSpecTest, TheDefaultsAreValidAndAStoredSpecWithoutTheFieldIsCrossEntropy) {
  auto dpo = ParseJobSpec(kSpec, {"output_dir=/out/t"});
  ASSERT_TRUE(dpo.ok()) << dpo.status();
  EXPECT_EQ(Errors(*dpo), "");
  EXPECT_EQ(dpo->train().objective(), v1::OBJECTIVE_DPO);
  EXPECT_EQ(dpo->dpo().beta(), 0.1);
  EXPECT_EQ(dpo->dpo().loss_type(), v1::DPO_LOSS_TYPE_SIGMOID);
  EXPECT_EQ(dpo->dpo().reference(), "initial");
  v1::JobSpec old = *dpo;
  old.mutable_train()->clear_objective();  // As stored by a version without it: cross-entropy.
  old.clear_dpo();
  EXPECT_EQ(Errors(old), "");
  old.mutable_dpo()->set_beta(0.1);  // The defaults the section is filled with.
  old.mutable_dpo()->set_loss_type(v1::DPO_LOSS_TYPE_SIGMOID);
  EXPECT_EQ(Errors(old), "");
  // Anything else is read only with objective dpo, so refused (it would be ignored).
  old.mutable_dpo()->set_beta(0.5);
  old.mutable_dpo()->set_loss_type(v1::DPO_LOSS_TYPE_IPO);
  old.mutable_dpo()->set_precompute_reference(true);
  const std::string errors = Errors(old);
  for (const char* field : {"dpo.beta", "dpo.loss_type", "dpo.precompute_reference"}) {
    EXPECT_THAT(errors, HasSubstr(std::string(field) + ": applies to train.objective dpo only")) << field;
  }
}

TEST(DpoSpecTest, BadValuesAreRefusedByField) {
  auto s = ParseJobSpec(kSpec, {"output_dir=/out/t", "dpo.beta=0", "dpo.label_smoothing=0.5",
                                "data.max_prompt_tokens=-1"});
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string errors = Errors(*s);
  EXPECT_THAT(errors, HasSubstr("dpo.beta: 0 must be in (0, 1e6]"));
  EXPECT_THAT(errors, HasSubstr("dpo.label_smoothing: 0.5 must be in [0, 0.5)"));
  EXPECT_THAT(errors, HasSubstr("data.max_prompt_tokens"));
  auto ipo = ParseJobSpec(kSpec, {"output_dir=/out/t", "dpo.loss_type=ipo", "dpo.label_smoothing=0.1"});
  ASSERT_TRUE(ipo.ok());
  EXPECT_THAT(Errors(*ipo), HasSubstr("dpo.label_smoothing: applies to loss_type sigmoid only"));
  // dpo.reference: initial or a path (read by the rank); not beside LoRA, whose reference is the base.
  auto path = ParseJobSpec(kSpec, {"output_dir=/out/t", "dpo.reference=/models/sft"});
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(Errors(*path), "");
  auto nul = ParseJobSpec(kSpec, {"output_dir=/out/t"});
  ASSERT_TRUE(nul.ok());
  nul->mutable_dpo()->set_reference(std::string("/models/a\0b", 11));
  EXPECT_THAT(Errors(*nul), HasSubstr("dpo.reference: contains a NUL byte at offset 9"));
  auto lora = ParseJobSpec(
      "name: t\ndata: {path: /x}\nmodel: {family: llama, heads: 4, lora: {rank: 4, alpha: 8, targets: [q_proj]}}\n"
      "train: {objective: dpo, micro_batch: 1, global_batch: 2}\ndpo: {reference: /models/sft}\n",
      {"output_dir=/out/t"});
  ASSERT_TRUE(lora.ok()) << lora.status();
  EXPECT_THAT(Errors(*lora), HasSubstr("dpo.reference: a path is not supported with model.lora"));
  auto bad_type = ParseJobSpec(kSpec, {"output_dir=/out/t", "dpo.loss_type=hinge"});
  EXPECT_FALSE(bad_type.ok());
  EXPECT_THAT(std::string(bad_type.status().message()), HasSubstr("dpo.loss_type"));
}

TEST(DpoSpecTest, WhatDpoDoesNotRunYetIsRefusedByField) {
  auto s = ParseJobSpec(kSpec, {"output_dir=/out/t", "data.shuffle=true", "data.packing=true",
                                "data.valid_fraction=0.1", "parallel.sp=2", "model.seq_len=128"});
  // Sequence parallelism is allowed (each sample made whole over its blocks: objective.h), and so is
  // shuffling (pairs permuted per epoch).
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string errors = Errors(*s);
  EXPECT_THAT(errors, ::testing::Not(HasSubstr("data.shuffle")));
  EXPECT_THAT(errors, HasSubstr("data.packing: is not supported with train.objective dpo"));
  EXPECT_THAT(errors, ::testing::Not(HasSubstr("data.valid_fraction")));  // Validation on held-out pairs.
  EXPECT_THAT(errors, ::testing::Not(HasSubstr("parallel.sp")));
  auto grid = ParseJobSpec(kSpec, {"output_dir=/out/t", "parallel.tp=4", "parallel.tp_mode=2d",
                                   "train.micro_batch=2", "train.global_batch=2"});
  ASSERT_TRUE(grid.ok()) << grid.status();
  EXPECT_THAT(Errors(*grid), ::testing::Not(HasSubstr("parallel.tp_mode"))) << "a grid splits the pairs whole";
  // A grid splits a micro-batch's pairs (not its sequences) over its sample axes.
  auto split_pair = ParseJobSpec(kSpec, {"output_dir=/out/t", "parallel.tp=4", "parallel.tp_mode=2d",
                                         "train.micro_batch=1", "train.global_batch=2"});
  ASSERT_TRUE(split_pair.ok()) << split_pair.status();
  EXPECT_THAT(Errors(*split_pair), HasSubstr("train.micro_batch"));
  auto moe = ParseJobSpec(kSpec, {"output_dir=/out/t", "model.family=llama", "model.experts=4"});
  ASSERT_TRUE(moe.ok()) << moe.status();
  EXPECT_THAT(Errors(*moe), ::testing::Not(HasSubstr("model.experts"))) << "without a balancing loss, as TRL's default";
  auto balanced = ParseJobSpec(kSpec, {"output_dir=/out/t", "model.family=llama", "model.experts=4",
                                       "model.aux_loss_coef=0.02"});
  ASSERT_TRUE(balanced.ok()) << balanced.status();
  EXPECT_THAT(Errors(*balanced), ::testing::Not(HasSubstr("model.aux_loss_coef")))
      << "DPO adds the balancing loss as TRL's DPOTrainer with output_router_logits";
  auto biased = ParseJobSpec(kSpec, {"output_dir=/out/t", "model.family=llama", "model.experts=4",
                                     "model.router_bias_rate=0.001"});
  ASSERT_TRUE(biased.ok()) << biased.status();
  EXPECT_THAT(Errors(*biased), ::testing::Not(HasSubstr("model.router_bias_rate")));
  // A reward model trains none (transformers' sequence classifiers return no balancing loss).
  auto reward = ParseJobSpec(kSpec, {"output_dir=/out/t", "model.family=llama", "model.experts=4",
                                     "model.aux_loss_coef=0.02", "train.objective=reward", "dpo=null"});
  ASSERT_TRUE(reward.ok()) << reward.status();
  EXPECT_THAT(Errors(*reward), HasSubstr("model.aux_loss_coef: 0.02: a reward model trains no balancing loss"));
  // LoRA's dropout: TRL's preference trainers disable every dropout (disable_dropout).
  auto dropout = ParseJobSpec(kSpec, {"output_dir=/out/t", "model.lora.rank=4", "model.lora.dropout=0.05"});
  ASSERT_TRUE(dropout.ok()) << dropout.status();
  EXPECT_THAT(Errors(*dropout), HasSubstr("model.lora.dropout: 0.05: with train.objective dpo trains without dropout"));
  // The pair cut belongs to DPO's data only.
  auto lm = ParseJobSpec(kSpec, {"output_dir=/out/t", "train.objective=cross_entropy", "data.max_completion_tokens=8"});
  ASSERT_TRUE(lm.ok());
  EXPECT_THAT(Errors(*lm), HasSubstr("data.max_completion_tokens: applies to train.objective dpo or reward only"));
}

TEST(DpoSpecTest, AReferencePathIsAnInputMadeAbsoluteAndConfined) {
  auto spec = ParseJobSpec(kSpec, {"output_dir=out/x", "dpo.reference=models/sft/"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  MakePathsAbsolute(&*spec, "/cwd/project");
  EXPECT_EQ(spec->dpo().reference(), "/cwd/project/models/sft");
  bool reference_is_input = false;
  for (const auto& [field, path] : InputPaths(*spec)) reference_is_input |= field == "dpo.reference";
  EXPECT_TRUE(reference_is_input);
  PathRoots roots{{"/x"}, ""};
  auto confined = ToStatus(CheckJobPaths(*spec, roots, ""));
  EXPECT_THAT(confined.message(), HasSubstr("dpo.reference: '/cwd/project/models/sft' is outside the data roots"));
  // "initial" is no path.
  auto initial = ParseJobSpec(kSpec, {"output_dir=/out/t"});
  ASSERT_TRUE(initial.ok());
  MakePathsAbsolute(&*initial, "/cwd/project");
  EXPECT_EQ(initial->dpo().reference(), "initial");
  for (const auto& [field, path] : InputPaths(*initial)) EXPECT_NE(field, "dpo.reference");
}

constexpr char kReward[] =
    "name: t\ndata: {path: /x}\nmodel: {heads: 4}\ntrain: {objective: reward, micro_batch: 1, global_batch: 2}\n";

TEST(RewardSpecTest, TheSectionIsCheckedByFieldAndBelongsToRewardOnly) {
  auto reward = ParseJobSpec(kReward, {"output_dir=/out/t", "reward_model.center_coefficient=0.01",
                                       "data.max_prompt_tokens=8"});
  ASSERT_TRUE(reward.ok()) << reward.status();
  EXPECT_EQ(Errors(*reward), "");
  EXPECT_EQ(reward->train().objective(), v1::OBJECTIVE_REWARD);
  EXPECT_EQ(reward->reward_model().center_coefficient(), 0.01);
  auto negative = ParseJobSpec(kReward, {"output_dir=/out/t", "reward_model.center_coefficient=-1"});
  ASSERT_TRUE(negative.ok());
  EXPECT_THAT(Errors(*negative), HasSubstr("reward_model.center_coefficient: -1 must be in [0, 1e6]"));
  auto nan = ParseJobSpec(kReward, {"output_dir=/out/t", "reward_model.center_coefficient=nan"});
  if (nan.ok()) {
    EXPECT_THAT(Errors(*nan), HasSubstr("reward_model.center_coefficient"));
  }
  auto sft = ParseJobSpec(kReward, {"output_dir=/out/t", "train.objective=cross_entropy", "dpo.reference=/models/sft"});
  ASSERT_TRUE(sft.ok());
  EXPECT_THAT(Errors(*sft), HasSubstr("dpo.reference: applies to train.objective dpo only"));
  for (const auto& [field, path] : InputPaths(*sft)) EXPECT_NE(field, "dpo.reference");
  auto elsewhere = ParseJobSpec(kSpec, {"output_dir=/out/t", "reward_model.center_coefficient=0.5"});
  ASSERT_TRUE(elsewhere.ok());
  EXPECT_THAT(Errors(*elsewhere), HasSubstr("reward_model.center_coefficient: applies to train.objective reward only"));
}

TEST(RewardSpecTest, WhatARewardModelDoesNotRunYetIsRefusedByField) {
  auto s = ParseJobSpec(kReward, {"output_dir=/out/t", "data.shuffle=true", "data.packing=true",
                                  "parallel.sp=2", "model.seq_len=128"});
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string errors = Errors(*s);
  EXPECT_THAT(errors, ::testing::Not(HasSubstr("data.shuffle")));
  EXPECT_THAT(errors, HasSubstr("data.packing: is not supported with train.objective reward"));
  EXPECT_THAT(errors, ::testing::Not(HasSubstr("parallel.sp")));
  auto lora = ParseJobSpec(
      "name: t\ndata: {path: /x}\nmodel: {family: llama, heads: 4, lora: {rank: 4, alpha: 8, targets: [q_proj]}}\n"
      "train: {objective: reward, micro_batch: 1, global_batch: 2}\n",
      {"output_dir=/out/t"});
  ASSERT_TRUE(lora.ok()) << lora.status();
  EXPECT_THAT(Errors(*lora), ::testing::Not(HasSubstr("model.lora"))) << "LoRA trains the score head beside the adapters";
}

}  // namespace
}  // namespace tessera::spec
