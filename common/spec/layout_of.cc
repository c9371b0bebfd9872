#include "common/spec/layout_of.h"

#include "absl/strings/str_cat.h"

namespace tessera::spec {
namespace {

void Note(std::vector<SpecError>* problems, std::string field, std::string message) {
  if (problems != nullptr) problems->push_back({std::move(field), std::move(message)});
}

}  // namespace

layout::ParallelLayout LayoutOf(const v1::JobSpec& spec, std::vector<SpecError>* problems) {
  using layout::PipeSchedule;
  using layout::SpMode;
  using layout::TpMode;
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
  switch (p.tp_mode()) {
    case v1::TP_MODE_2D: l.tp_mode = TpMode::k2D; break;
    case v1::TP_MODE_2P5D: l.tp_mode = TpMode::k2p5D; break;
    case v1::TP_MODE_3D: l.tp_mode = TpMode::k3D; break;
    case v1::TP_MODE_UNSPECIFIED: Note(problems, "parallel.tp_mode", "must be 1d, 2d, 2.5d or 3d"); break;
    default: break;  // 1d, or a number no enumerator has.
  }
  l.tp_depth = p.tp_depth();
  if (p.sp_mode() == v1::SP_MODE_ALL_TO_ALL) l.sp_mode = SpMode::kAllToAll;
  if (p.sp_mode() == v1::SP_MODE_UNSPECIFIED) Note(problems, "parallel.sp_mode", "must be ring or all_to_all");
  switch (p.pp_schedule()) {
    case v1::PP_SCHEDULE_INTERLEAVED: l.pp_schedule = PipeSchedule::kInterleaved; break;
    case v1::PP_SCHEDULE_ZB1P: l.pp_schedule = PipeSchedule::kZeroBubbleH1; break;
    case v1::PP_SCHEDULE_ZBV: l.pp_schedule = PipeSchedule::kZeroBubbleV; break;
    case v1::PP_SCHEDULE_UNSPECIFIED:
      Note(problems, "parallel.pp_schedule", "must be 1f1b, interleaved, zb1p or zbv");
      break;
    default: break;  // 1f1b, or a number no enumerator has.
  }
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

layout::BatchShape BatchOf(const v1::JobSpec& spec) {
  return {spec.train().micro_batch(), spec.train().global_batch()};
}

void SetLayout(const layout::ParallelLayout& l, v1::ParallelSpec* p) {
  using layout::TpMode;
  p->set_dp(l.dp);
  p->set_pp(l.pp);
  p->set_tp(l.tp);
  p->set_sp(l.sp);
  p->set_tp_mode(l.tp_mode == TpMode::k2D     ? v1::TP_MODE_2D
                 : l.tp_mode == TpMode::k2p5D ? v1::TP_MODE_2P5D
                 : l.tp_mode == TpMode::k3D   ? v1::TP_MODE_3D
                                              : v1::TP_MODE_1D);
  p->set_tp_depth(l.tp_depth);
  p->set_ep(l.ep);
  p->set_sp_mode(l.sp_mode == layout::SpMode::kAllToAll ? v1::SP_MODE_ALL_TO_ALL : v1::SP_MODE_RING);
  p->set_pp_schedule(l.pp_schedule == layout::PipeSchedule::kInterleaved    ? v1::PP_SCHEDULE_INTERLEAVED
                     : l.pp_schedule == layout::PipeSchedule::kZeroBubbleH1 ? v1::PP_SCHEDULE_ZB1P
                     : l.pp_schedule == layout::PipeSchedule::kZeroBubbleV  ? v1::PP_SCHEDULE_ZBV
                                                                            : v1::PP_SCHEDULE_1F1B);
  p->set_pp_chunks(l.pp_chunks);
  p->clear_pp_layers();
  for (int n : l.pp_layers) p->add_pp_layers(n);
}

}  // namespace tessera::spec
