#include "spec/layout_of.h"

#include <algorithm>

#include <cstddef>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::spec {
namespace {

void Note(std::vector<SpecError>* problems, std::string field, std::string message) {
  if (problems != nullptr) problems->push_back({std::move(field), std::move(message)});
}

// Each layout mode and the proto enumerator that stands for it: the one place the two are paired.
constexpr std::pair<layout::TpMode, v1::TpMode> kTpModes[] = {
    {layout::TpMode::k1D, v1::TP_MODE_1D},
    {layout::TpMode::k2D, v1::TP_MODE_2D},
    {layout::TpMode::k2p5D, v1::TP_MODE_2P5D},
    {layout::TpMode::k3D, v1::TP_MODE_3D}};
constexpr std::pair<layout::SpMode, v1::SpMode> kSpModes[] = {
    {layout::SpMode::kRing, v1::SP_MODE_RING},
    {layout::SpMode::kAllToAll, v1::SP_MODE_ALL_TO_ALL}};
constexpr std::pair<layout::PipeSchedule, v1::PpSchedule> kSchedules[] = {
    {layout::PipeSchedule::kOneFOneB, v1::PP_SCHEDULE_1F1B},
    {layout::PipeSchedule::kInterleaved, v1::PP_SCHEDULE_INTERLEAVED},
    {layout::PipeSchedule::kZeroBubbleH1, v1::PP_SCHEDULE_ZB1P},
    {layout::PipeSchedule::kZeroBubbleV, v1::PP_SCHEDULE_ZBV}};

// The mode of `proto`; nullopt for UNSPECIFIED or a number no enumerator has.
template <typename Mode, typename Proto, size_t N>
std::optional<Mode> FromProto(const std::pair<Mode, Proto> (&pairs)[N], Proto proto) {
  for (const auto& [mode, p] : pairs) {
    if (p == proto) return mode;
  }
  return std::nullopt;
}

template <typename Mode, typename Proto, size_t N>
Proto ToProto(const std::pair<Mode, Proto> (&pairs)[N], Mode mode) {
  for (const auto& [m, proto] : pairs) {
    if (m == mode) return proto;
  }
  return pairs[0].second;  // Unreachable: every mode has its enumerator.
}

}  // namespace

layout::ParallelLayout LayoutOf(const v1::JobSpec& spec, std::vector<SpecError>* problems) {
  using layout::PipeSchedule;
  const v1::ParallelSpec& p = spec.parallel();
  layout::ParallelLayout l;
  l.dp = p.dp(), l.pp = p.pp(), l.tp = p.tp(), l.sp = p.sp();
  // Specs stored before parallel.ep existed have 0 there: no expert parallelism. A written 0 is
  // refused by validation (ValidateJobSpec), which reads the field itself.
  l.ep = p.ep() > 0 ? p.ep() : 1;
  if (auto order = layout::ParseOrder(p.order()); order.ok()) {
    l.order = *order;
  } else {
    Note(problems, "parallel.order", std::string(order.status().message()));
  }
  // A number no enumerator has (a newer client's) reads as the default, as before: 1d.
  if (p.tp_mode() == v1::TP_MODE_UNSPECIFIED) Note(problems, "parallel.tp_mode", "must be 1d, 2d, 2.5d or 3d");
  l.tp_mode = FromProto(kTpModes, p.tp_mode()).value_or(layout::TpMode::k1D);
  l.tp_depth = p.tp_depth();
  if (p.sp_mode() == v1::SP_MODE_UNSPECIFIED) Note(problems, "parallel.sp_mode", "must be ring or all_to_all");
  l.sp_mode = FromProto(kSpModes, p.sp_mode()).value_or(layout::SpMode::kRing);
  if (p.pp_schedule() == v1::PP_SCHEDULE_UNSPECIFIED) {
    Note(problems, "parallel.pp_schedule", "must be 1f1b, interleaved, zb1p or zbv");
  }
  l.pp_schedule = FromProto(kSchedules, p.pp_schedule()).value_or(layout::PipeSchedule::kOneFOneB);
  l.pp_chunks = p.pp_chunks();
  // zbv always runs two chunks per stage: pp_chunks left out (the default 1) means 2.
  if (l.pp_schedule == PipeSchedule::kZeroBubbleV && l.pp_chunks == 1) l.pp_chunks = 2;
  l.pp_layers.assign(p.pp_layers().begin(), p.pp_layers().end());
  if (auto stage = layout::ZeroStageOf(p.zero_stage()); stage.ok()) {
    l.zero_stage = *stage;
  } else {
    Note(problems, "parallel.zero_stage", absl::StrCat(p.zero_stage(), " must be 0, 1, 2 or 3"));
  }
  return l;
}

layout::Precision PrecisionOf(const v1::JobSpec& spec) {
  switch (spec.train().precision()) {
    case v1::PRECISION_BF16:
    case v1::PRECISION_FP8: return layout::Precision::kBf16;  // bf16 around the FP8 GEMMs.
    case v1::PRECISION_FP16: return layout::Precision::kFp16;
    default: return layout::Precision::kFp32;
  }
}

layout::Target TargetOf(const v1::JobSpec& spec) {
  layout::Target t;
  t.device = spec.device() == v1::DEVICE_CUDA ? layout::DeviceKind::kCuda : layout::DeviceKind::kCpu;
  t.fp8 = spec.train().precision() == v1::PRECISION_FP8;
  t.objective = spec.train().objective() == v1::OBJECTIVE_DPO      ? layout::Objective::kDpo
                : spec.train().objective() == v1::OBJECTIVE_REWARD ? layout::Objective::kReward
                : spec.train().objective() == v1::OBJECTIVE_GRPO   ? layout::Objective::kGrpo
                                                                   : layout::Objective::kCrossEntropy;
  return t;
}

layout::BatchShape BatchOf(const v1::JobSpec& spec) {
  // GRPO: global_batch counts prompts, each sampled grpo.num_generations times; micro_batch counts
  // sequences — the layout's samples are the step's completions.
  if (spec.train().objective() == v1::OBJECTIVE_GRPO) {
    return {spec.train().micro_batch(),
            int64_t{spec.train().global_batch()} * std::max(1, spec.grpo().num_generations())};
  }
  return {spec.train().micro_batch(), spec.train().global_batch()};
}

void SetLayout(const layout::ParallelLayout& l, v1::ParallelSpec* p) {
  p->set_dp(l.dp);
  p->set_pp(l.pp);
  p->set_tp(l.tp);
  p->set_sp(l.sp);
  p->set_tp_mode(ToProto(kTpModes, l.tp_mode));
  p->set_tp_depth(l.tp_depth);
  p->set_ep(l.ep);
  p->set_sp_mode(ToProto(kSpModes, l.sp_mode));
  p->set_pp_schedule(ToProto(kSchedules, l.pp_schedule));
  p->set_pp_chunks(l.pp_chunks);
  p->clear_pp_layers();
  for (int n : l.pp_layers) p->add_pp_layers(n);
}

}  // namespace tessera::spec
