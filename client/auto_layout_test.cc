// The planner proposes only layouts that the spec's validation and the engine's own constructors
// accept: every candidate of Plan() (fitting or not), written into the spec, passes ValidateJobSpec,
// and its rank generator, stage layout and every pipeline rank's schedule build. The layout rules
// live in CheckLayout alone (layout/check_layout.h); a rule kept anywhere else — or removed from
// CheckLayout while a constructor still refuses the layout — fails this test.
#include "client/auto_layout.h"

#include <string>
#include <vector>

#include "spec/job_spec.h"
#include "spec/layout_of.h"
#include "gtest/gtest.h"
#include "layout/check_layout.h"
#include "layout/rank_generator.h"
#include "layout/schedule.h"
#include "layout/stage_layout.h"

namespace tessera::client {
namespace {

struct Case {
  const char* name;
  const char* yaml;
  std::vector<std::string> overrides;
};

// Specs chosen so that each family of rules bites somewhere among the candidates: few layers (virtual
// stages), heads and kv heads that few tp sizes divide, an odd accumulation count (interleaved), a
// Mixture of Experts (ep, expert widths, capacity with sp), ZeRO-3 (zero-bubble schedules), LoRA and
// FP8 (1D only) and CUDA (no pp, sp or grid).
const char kGpt[] = R"(
name: gpt
model: {family: gpt, layers: 3, hidden: 48, heads: 6, vocab: 96, seq_len: 12}
data: {path: /data/tokens.bin}
train: {steps: 1, micro_batch: 2, global_batch: 12}
parallel: {auto_layout: true, devices: 8}
)";

const char kLlama[] = R"(
name: llama
model: {family: llama, layers: 4, hidden: 64, heads: 8, kv_heads: 2, vocab: 128, seq_len: 16}
data: {path: /data/tokens.bin}
train: {steps: 1, micro_batch: 4, global_batch: 16}
parallel: {auto_layout: true, devices: 8, zero_stage: 3}
)";

const char kMoe[] = R"(
name: moe
model: {family: mixtral, layers: 2, hidden: 32, heads: 4, kv_heads: 4, vocab: 64, seq_len: 8, experts: 4,
        experts_per_token: 2, moe_ffn_hidden: 24, capacity_factor: 1.5}
data: {path: /data/tokens.bin}
train: {steps: 1, micro_batch: 2, global_batch: 16}
parallel: {auto_layout: true, devices: 8}
)";

std::vector<Case> Cases() {
  return {
      {"gpt cpu", kGpt, {}},
      {"gpt cuda", kGpt, {"device=cuda", "train.global_batch=16"}},
      {"gpt 12 devices", kGpt, {"parallel.devices=12"}},
      {"llama zero3", kLlama, {}},
      {"llama lora", kLlama, {"model.lora.rank=4", "model.lora.targets=[q_proj,v_proj]"}},
      {"llama fp8", kLlama, {"train.precision=fp8"}},
      {"llama cuda fp8", kLlama, {"device=cuda", "train.precision=fp8", "parallel.zero_stage=1"}},
      {"moe", kMoe, {}},
      {"moe lora", kMoe, {"model.lora.rank=2", "model.lora.targets=[q_proj,w1]"}},
      {"moe cuda", kMoe, {"device=cuda", "model.capacity_factor=0"}},
  };
}

// What the engine builds from the layout before its first step, beside CheckLayout.
std::string EngineRefuses(const v1::JobSpec& spec) {
  const layout::ParallelLayout l = spec::LayoutOf(spec);
  if (auto g = layout::RankGenerator::Create(l); !g.ok()) return std::string(g.status().message());
  const int micro_batches = spec::AccumulationSteps(spec);
  if (l.pp > 1) {
    auto stages = layout::StageLayout::Create(spec.model().layers(), l.pp, l.pp_chunks, l.pp_layers,
                                              layout::PlacementOf(l.pp_schedule));
    if (!stages.ok()) return std::string(stages.status().message());
    for (int r = 0; r < l.pp; ++r) {
      auto actions = layout::MakeSchedule(l.pp_schedule, l.pp, l.pp_chunks, r, micro_batches);
      if (!actions.ok()) return std::string(actions.status().message());
    }
  }
  return "";
}

TEST(AutoLayoutTest, EveryPlannerCandidateIsAcceptedByValidationAndTheEngine) {
  for (const Case& c : Cases()) {
    auto spec = spec::ParseJobSpec(c.yaml, c.overrides);
    ASSERT_TRUE(spec.ok()) << c.name << ": " << spec.status();
    const int devices = spec->parallel().devices();
    std::vector<spec::SpecError> before = spec::ValidateJobSpec(*spec);
    ASSERT_TRUE(before.empty()) << c.name << ": " << before[0].field << ": " << before[0].message;
    const std::vector<plan::Prediction> candidates = plan::Plan(PlanInputFor(*spec, devices));
    ASSERT_FALSE(candidates.empty()) << c.name;
    for (const plan::Prediction& p : candidates) {
      v1::JobSpec chosen = *spec;
      spec::SetLayout(p.layout, chosen.mutable_parallel());
      chosen.mutable_parallel()->set_auto_layout(false);
      const std::vector<spec::SpecError> errors = spec::ValidateJobSpec(chosen);
      EXPECT_TRUE(errors.empty()) << c.name << ", " << p.layout.ToString() << ": the planner proposes it, validation says "
                                  << errors[0].field << ": " << errors[0].message;
      EXPECT_EQ(EngineRefuses(chosen), "") << c.name << ", " << p.layout.ToString();
    }
  }
}

// The property above is not vacuous: the specs' rules remove candidates (the unconstrained
// enumeration of 8 devices is much larger), and each target's own rule removes some.
TEST(AutoLayoutTest, TheRulesRemoveCandidates) {
  auto count = [](const char* yaml, std::vector<std::string> overrides) {
    auto spec = spec::ParseJobSpec(yaml, overrides);
    EXPECT_TRUE(spec.ok()) << spec.status();
    return plan::Plan(PlanInputFor(*spec, spec->parallel().devices())).size();
  };
  const size_t cpu = count(kGpt, {"train.global_batch=16"});
  EXPECT_LT(count(kGpt, {"device=cuda", "train.global_batch=16"}), cpu);
  const size_t llama = count(kLlama, {"parallel.zero_stage=1"});
  EXPECT_LT(count(kLlama, {}), llama);  // ZeRO-3: no zero-bubble schedule.
  EXPECT_LT(count(kLlama, {"train.precision=fp8", "parallel.zero_stage=1"}), llama);
  EXPECT_LT(count(kLlama, {"model.lora.rank=4", "model.lora.targets=[q_proj]", "parallel.zero_stage=1"}), llama);
}

}  // namespace
}  // namespace tessera::client
