// LayoutOf speaks the spec's words: every mode's layout::Name() (trainer_state.json, `tessera plan`,
// the Trainer's messages) is the YAML name a user writes for the same proto value (EnumYamlName).
#include "spec/layout_of.h"

#include <string>
#include <utility>
#include <vector>

#include "spec/yaml_to_proto.h"
#include "gtest/gtest.h"
#include "layout/modes.h"

namespace tessera::spec {
namespace {

// Calls `check(value)` for every value of `descriptor` but the UNSPECIFIED one; returns how many.
template <typename Check>
int ForEachValue(const google::protobuf::EnumDescriptor* descriptor, Check check) {
  int n = 0;
  for (int i = 0; i < descriptor->value_count(); ++i) {
    if (descriptor->value(i)->number() == 0) continue;
    check(descriptor->value(i));
    ++n;
  }
  return n;
}

TEST(LayoutOfTest, ModeNamesAreTheSpecsYamlNames) {
  using google::protobuf::EnumValueDescriptor;
  EXPECT_EQ(ForEachValue(v1::TpMode_descriptor(), [](const EnumValueDescriptor* v) {
              v1::JobSpec spec;
              spec.mutable_parallel()->set_tp_mode(static_cast<v1::TpMode>(v->number()));
              EXPECT_EQ(layout::Name(LayoutOf(spec).tp_mode), EnumYamlName(v)) << v->name();
            }),
            4);
  EXPECT_EQ(ForEachValue(v1::SpMode_descriptor(), [](const EnumValueDescriptor* v) {
              v1::JobSpec spec;
              spec.mutable_parallel()->set_sp_mode(static_cast<v1::SpMode>(v->number()));
              EXPECT_EQ(layout::Name(LayoutOf(spec).sp_mode), EnumYamlName(v)) << v->name();
            }),
            2);
  EXPECT_EQ(ForEachValue(v1::PpSchedule_descriptor(), [](const EnumValueDescriptor* v) {
              v1::JobSpec spec;
              spec.mutable_parallel()->set_pp_schedule(static_cast<v1::PpSchedule>(v->number()));
              EXPECT_EQ(layout::Name(LayoutOf(spec).pp_schedule), EnumYamlName(v)) << v->name();
            }),
            4);
  EXPECT_EQ(ForEachValue(v1::Precision_descriptor(), [](const EnumValueDescriptor* v) {
              v1::JobSpec spec;
              spec.mutable_train()->set_precision(static_cast<v1::Precision>(v->number()));
              // fp8 is bf16 parameters and activations with FP8 GEMMs (TrainerOptions::fp8).
              const std::string want = v->number() == v1::PRECISION_FP8 ? "bf16" : EnumYamlName(v);
              EXPECT_EQ(layout::Name(PrecisionOf(spec)), want) << v->name();
            }),
            4);
}

// The proto <-> layout pairing is one table read both ways: every enumerator goes to a mode and back.
// `set` writes an enumerator's number into a spec's parallel section, `get` reads one back.
template <typename Set, typename Get>
void ExpectEveryValueRoundTrips(const google::protobuf::EnumDescriptor* descriptor, Set set, Get get) {
  ForEachValue(descriptor, [&](const google::protobuf::EnumValueDescriptor* v) {
    v1::JobSpec spec;
    set(spec.mutable_parallel(), v->number());
    v1::ParallelSpec back;
    SetLayout(LayoutOf(spec), &back);
    EXPECT_EQ(get(back), v->number()) << v->name();
  });
}

TEST(LayoutOfTest, SetLayoutWritesBackWhatLayoutOfRead) {
  ExpectEveryValueRoundTrips(
      v1::TpMode_descriptor(), [](v1::ParallelSpec* p, int n) { p->set_tp_mode(static_cast<v1::TpMode>(n)); },
      [](const v1::ParallelSpec& p) { return static_cast<int>(p.tp_mode()); });
  ExpectEveryValueRoundTrips(
      v1::SpMode_descriptor(), [](v1::ParallelSpec* p, int n) { p->set_sp_mode(static_cast<v1::SpMode>(n)); },
      [](const v1::ParallelSpec& p) { return static_cast<int>(p.sp_mode()); });
  ExpectEveryValueRoundTrips(
      v1::PpSchedule_descriptor(),
      [](v1::ParallelSpec* p, int n) { p->set_pp_schedule(static_cast<v1::PpSchedule>(n)); },
      [](const v1::ParallelSpec& p) { return static_cast<int>(p.pp_schedule()); });
  // UNSPECIFIED is named as a problem and reads as the default.
  v1::JobSpec unspecified;
  unspecified.mutable_parallel()->set_order("tp-sp-pp-dp");
  std::vector<SpecError> problems;
  const layout::ParallelLayout l = LayoutOf(unspecified, &problems);
  EXPECT_EQ(l.tp_mode, layout::TpMode::k1D);
  EXPECT_EQ(l.sp_mode, layout::SpMode::kRing);
  EXPECT_EQ(l.pp_schedule, layout::PipeSchedule::kOneFOneB);
  std::vector<std::string> fields;
  for (const SpecError& e : problems) fields.push_back(e.field);
  EXPECT_EQ(fields, (std::vector<std::string>{"parallel.tp_mode", "parallel.sp_mode", "parallel.pp_schedule"}));
}

// zbv always runs two chunks per stage: pp_chunks left out (1, the default) or 2 give 2; another
// count stays, for the layout check to name.
TEST(LayoutOfTest, ZeroBubbleVRunsTwoChunksPerStage) {
  for (const auto& [written, want] : std::vector<std::pair<int, int>>{{1, 2}, {2, 2}, {3, 3}}) {
    v1::JobSpec spec;
    spec.mutable_parallel()->set_pp_schedule(v1::PP_SCHEDULE_ZBV);
    spec.mutable_parallel()->set_pp_chunks(written);
    EXPECT_EQ(LayoutOf(spec).pp_chunks, want) << "pp_chunks " << written;
  }
  v1::JobSpec zb1p;
  zb1p.mutable_parallel()->set_pp_schedule(v1::PP_SCHEDULE_ZB1P);
  zb1p.mutable_parallel()->set_pp_chunks(1);
  EXPECT_EQ(LayoutOf(zb1p).pp_chunks, 1);
}

}  // namespace
}  // namespace tessera::spec
