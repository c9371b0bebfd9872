#include "plan/planner.h"

#include <map>
#include <set>

#include "gtest/gtest.h"

namespace tessera::plan {

using layout::ModelFamily;
using layout::PipeSchedule;
using layout::TpMode;
namespace {

PlanInput Gpt8(int devices) {
  PlanInput in;
  in.model = {/*layers=*/8, /*hidden=*/256, /*heads=*/8, /*vocab=*/1024, /*seq_len=*/128};
  in.micro_batch = 8;
  in.global_batch = 64;
  in.devices = devices;
  in.device = {50e9, 2e9, 64e9};
  return in;
}

double Params(const ModelConfig& m) {
  const double h = m.hidden;
  return m.layers * (12 * h * h + 13 * h) + m.vocab * h + m.seq_len * h + 2 * h;
}

TEST(PlannerTest, EnumeratesOnlyValidLayoutsOfTheDeviceCount) {
  const PlanInput in = Gpt8(8);
  auto plan = Plan(in);
  std::set<std::string> names;
  for (const Prediction& p : plan) {
    const Layout& l = p.layout;
    EXPECT_EQ(l.dp * l.pp * l.tp * l.sp, 8) << l.ToString();
    EXPECT_EQ(Invalid(in, l), "") << l.ToString();
    names.insert(l.ToString());
  }
  for (const char* want : {"dp8", "dp2 pp2 tp2(1d)", "tp8(3d)", "tp8(2.5d,d=2)", "dp2 tp4(2d)", "pp2 sp4(ring)",
                           "dp2 pp2(interleaved×2) sp2(all_to_all)", "dp2 pp2(zb1p) tp2(1d)"}) {
    EXPECT_TRUE(names.count(want)) << want;
  }
  EXPECT_EQ(plan[0].verdict, "chosen: fastest predicted step that fits");
}

// The bubble model covers the zero-bubble schedule: ZB-H1's predicted bubble is below 1F1B's at the
// same layout (the simulator's F = B = W), and so is its step.
TEST(PlannerTest, ZeroBubbleScheduleHasTheSmallerPredictedBubble) {
  const PlanInput in = Gpt8(8);
  std::map<std::string, Prediction> by_name;
  for (const Prediction& p : Plan(in)) by_name.emplace(p.layout.ToString(), p);
  ASSERT_TRUE(by_name.count("pp2 tp4(1d)") && by_name.count("pp2(zb1p) tp4(1d)") && by_name.count("pp2(zbv) tp4(1d)"));
  const Prediction& one = by_name.at("pp2 tp4(1d)");
  const Prediction& zb = by_name.at("pp2(zb1p) tp4(1d)");
  EXPECT_GT(one.bubble, 0);
  EXPECT_LT(zb.bubble, one.bubble);
  EXPECT_LT(zb.step_s, one.step_s);
  // ZB-V's V (half-stage chunks) leaves no more than ZB-H1 (layout/schedule_test.cc).
  const Prediction& zv = by_name.at("pp2(zbv) tp4(1d)");
  EXPECT_LE(zv.bubble, zb.bubble);
  EXPECT_LT(zv.bubble, one.bubble);
}

// Llama: grid layouts need the grid side to divide kv_heads and ffn_hidden; a vocabulary 1D tp does
// not divide is padded, so 1D tp is offered.
TEST(PlannerTest, LlamaGridsFollowKeyValueHeadsAndPaddedVocabularies) {
  PlanInput in = Gpt8(8);
  in.model.family = ModelFamily::kLlama;
  in.model.kv_heads = 2;
  in.model.ffn_hidden = 640;
  in.model.vocab = 1000;  // 8 does not divide it; the grid sides (2) do.
  auto plan = Plan(in);
  ASSERT_FALSE(plan.empty());
  std::set<std::string> names;
  for (const Prediction& p : plan) names.insert(p.layout.ToString());
  EXPECT_TRUE(names.count("tp8(1d)"));
  EXPECT_TRUE(names.count("dp2 tp4(2d)"));
  in.model.kv_heads = 1;  // One key/value head cannot be split over a grid side.
  for (const Prediction& p : Plan(in)) EXPECT_EQ(p.layout.tp_mode, TpMode::k1D) << p.layout.ToString();
}

// Model states: 16 bytes per parameter on one device; 1D tp divides the blocks (not the first
// stage's embeddings, split by vocabulary); dp replicates.
TEST(PlannerTest, ModelStateBytesFollowTheSplits) {
  const PlanInput one = Gpt8(1);
  const ModelConfig& m = one.model;
  EXPECT_DOUBLE_EQ(Predict(one, Layout{}).state_bytes, 16 * (Params(m) - 2 * m.hidden));
  const double blocks = m.layers * (12.0 * m.hidden * m.hidden + 13 * m.hidden);
  const double emb = 1.0 * m.vocab * m.hidden + 1.0 * m.seq_len * m.hidden;
  Layout tp4{1, 1, 4, 1};
  EXPECT_DOUBLE_EQ(Predict(Gpt8(4), tp4).state_bytes, 16 * (blocks / 4 + emb / 4));
  Layout dp4{4, 1, 1, 1};
  EXPECT_DOUBLE_EQ(Predict(Gpt8(4), dp4).state_bytes, 16 * (blocks + emb));
  // Ring all-reduce of the fp32 gradients: 2(n−1)/n of them per device, nothing else for dp.
  EXPECT_DOUBLE_EQ(Predict(Gpt8(4), dp4).comm_bytes, 2.0 * 3 / 4 * (blocks + emb) * 4);
}

TEST(PlannerTest, PipelineBubbleIsTheScheduleFormula) {
  PlanInput in = Gpt8(4);
  // m = 64 / (8·1) = 8 micro-batches: 1F1B bubble (p−1)/(m+p−1) = 3/11; interleaved ×2: 3/19.
  EXPECT_NEAR(Predict(in, Layout{1, 4, 1, 1}).bubble, 3.0 / 11, 1e-12);
  Layout inter{1, 4, 1, 1};
  inter.pp_schedule = PipeSchedule::kInterleaved, inter.pp_chunks = 2;
  EXPECT_NEAR(Predict(in, inter).bubble, 3.0 / 19, 1e-12);
}

// Memory decides first: a budget below what pure data parallelism needs per device rejects it with
// a reason, and the choice is a layout that fits (4-way tensor parallelism does).
TEST(PlannerTest, RejectsLayoutsThatDoNotFit) {
  PlanInput in = Gpt8(4);
  in.device.memory_bytes = 0.8 * Predict(in, Layout{4, 1, 1, 1}).memory_bytes();
  ASSERT_LT(Predict(in, Layout{1, 1, 4, 1}).memory_bytes(), in.device.memory_bytes);
  auto plan = Plan(in);
  ASSERT_FALSE(plan.empty());
  EXPECT_TRUE(plan[0].fits);
  EXPECT_LE(plan[0].memory_bytes(), in.device.memory_bytes);
  bool rejected_dp4 = false;
  for (const Prediction& p : plan) {
    if (p.layout.ToString() == "dp4") {
      rejected_dp4 = true;
      EXPECT_FALSE(p.fits);
      EXPECT_NE(p.verdict.find("does not fit"), std::string::npos) << p.verdict;
    }
  }
  EXPECT_TRUE(rejected_dp4);
}

// With free communication every layout computes the same FLOPs per device, so the bubble-free
// ones tie first and every pipeline ranks behind them; with costly communication and ample memory
// the choice sends the fewest bytes among the bubble-free layouts.
// A Mixture of Experts: layouts with every ep out of dp that divides the experts; experts split over
// ep in the device's state; the all-to-all of expert parallelism in its traffic (the formula: per
// sparse block and micro-batch, 4·(ep−1)/ep·tokens·k·hidden·4 bytes); compute from active parameters.
TEST(PlannerTest, MixtureOfExpertsLayoutsSplitExpertsAndPayTheirAllToAll) {
  PlanInput in = Gpt8(4);
  in.model.family = ModelFamily::kMixtral;
  in.model.kv_heads = 4, in.model.experts = 8, in.model.experts_per_token = 2, in.model.moe_ffn_hidden = 512;
  in.model.tie_embeddings = false;
  in.global_batch = 32;
  auto plan = Plan(in);
  std::map<std::string, Prediction> by_name;
  for (const Prediction& p : plan) by_name[p.layout.ToString()] = p;
  for (const char* want : {"dp4", "dp4(ep2)", "dp4(ep4)", "dp2(ep2) tp2(1d)"}) {
    EXPECT_TRUE(by_name.count(want)) << want;
  }
  const Prediction& dense = by_name.at("dp4"), &ep2 = by_name.at("dp4(ep2)"), &ep4 = by_name.at("dp4(ep4)");
  // Model state: the experts (8 · 3 · 256 · 512 per block, 8 blocks) split 2 and 4 ways.
  const double experts = 8.0 * 3 * 256 * 512 * 8;
  EXPECT_NEAR(dense.state_bytes - ep2.state_bytes, 16 * experts / 2, 1e-6 * dense.state_bytes);
  EXPECT_NEAR(dense.state_bytes - ep4.state_bytes, 16 * experts * 3 / 4, 1e-6 * dense.state_bytes);
  // Traffic: ep4's experts have no replicas (no all-reduce of theirs), its tokens an all-to-all.
  const double tokens_mb = 8.0 * 128, micro_batches = 1;
  const double all_to_all = micro_batches * 8 * 4 * 0.75 * tokens_mb * 2 * 256 * 4;
  const double expert_allreduce = 2.0 * 3 / 4 * experts * 4;
  EXPECT_NEAR(ep4.comm_bytes - dense.comm_bytes, all_to_all - expert_allreduce, 1e-6 * dense.comm_bytes);
  EXPECT_EQ(ep4.compute_s, dense.compute_s) << "the same active parameters per token";
  // Active parameters: 2 of 8 experts per token.
  EXPECT_NEAR(in.model.Parameters() - in.model.Parameters(/*active=*/true), experts * 6 / 8, 1);

  // Grid layouts split each expert over the grid's hidden axis only (q = 2 of tp 4), every other
  // weight q² ways as 1D tp 4 does; embeddings and head q ways (1D: tp).
  in.devices = 4;
  in.global_batch = 8;
  std::map<std::string, Prediction> on4;
  for (const Prediction& p : Plan(in)) on4[p.layout.ToString()] = p;
  ASSERT_TRUE(on4.count("tp4(1d)") && on4.count("tp4(2d)"));
  const double outside = in.model.EmbeddingParameters() + in.model.HeadParameters();
  EXPECT_NEAR(on4.at("tp4(2d)").state_bytes - on4.at("tp4(1d)").state_bytes,
              16 * (experts + outside) * (1.0 / 2 - 1.0 / 4), 1e-6 * dense.state_bytes);
}

TEST(PlannerTest, RanksByTheCostModel) {
  PlanInput in = Gpt8(4);
  in.device.bandwidth = 1e30;
  auto free_comm = Plan(in);
  EXPECT_EQ(free_comm[0].layout.pp, 1);
  EXPECT_DOUBLE_EQ(free_comm[0].bubble, 0);
  for (const Prediction& p : free_comm) {
    if (p.layout.pp > 1) {
      EXPECT_GT(p.step_s, free_comm[0].step_s) << p.layout.ToString();
    }
  }
  in.device.bandwidth = 1e6;
  auto costly = Plan(in);
  for (const Prediction& p : costly) {
    if (p.layout.pp == 1) {
      EXPECT_GE(p.comm_bytes, costly[0].comm_bytes) << p.layout.ToString();
    }
  }
  EXPECT_NE(costly[1].verdict.find("× the chosen step"), std::string::npos) << costly[1].verdict;
}

}  // namespace
}  // namespace tessera::plan
