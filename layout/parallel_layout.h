// ParallelLayout: how one job's ranks split the work — the sizes of the parallel axes, the order in
// which ranks are numbered over them, and every mode — described once, typed, and shared by the spec's
// validation, the planner, the coordinator's placement, both launchers and the engine (which all read
// it, never re-derive it). Made from the proto once (spec/layout_of.h); no torch, no proto.
//
// A new axis is added here (Axis, kAxes, the size field, Size()), in ParseOrder's names, and in
// CheckLayout's rules; the rank generator and placement take it from there.
#ifndef TESSERA_LAYOUT_PARALLEL_LAYOUT_H_
#define TESSERA_LAYOUT_PARALLEL_LAYOUT_H_

#include <array>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "layout/modes.h"

namespace tessera::layout {

enum class Axis { kDp = 0, kPp = 1, kTp = 2, kSp = 3 };
inline constexpr int kNumAxes = 4;
inline constexpr std::array<Axis, kNumAxes> kAxes = {Axis::kDp, Axis::kPp, Axis::kTp, Axis::kSp};

// "dp", "pp", "tp" or "sp".
const char* AxisName(Axis axis);

// Every axis once, fastest-varying first: with {tp, sp, pp, dp}, ranks 0..tp-1 form the first tensor
// parallel group.
using AxisOrder = std::array<Axis, kNumAxes>;
inline constexpr AxisOrder kDefaultOrder = {Axis::kTp, Axis::kSp, Axis::kPp, Axis::kDp};

// "tp-sp-pp-dp" ↔ the order. InvalidArgument unless every axis is named exactly once.
absl::StatusOr<AxisOrder> ParseOrder(absl::string_view text);
std::string OrderName(const AxisOrder& order);

struct ParallelLayout {
  int dp = 1;  // Data parallel replicas.
  int pp = 1;  // Pipeline stages.
  int tp = 1;  // Tensor parallel ranks (1D: tp; 2D: q²; 2.5D: tp_depth·q²; 3D: q³).
  int sp = 1;  // Sequence parallel ranks.
  // Expert parallel ranks, carved out of dp (not an axis of its own: the world is still dp·pp·tp·sp).
  // ep divides dp; dp ranks d and d' share an expert-parallel group (the experts split over it) when
  // d/ep = d'/ep, and an expert's data-parallel group (its replicas) when d mod ep = d' mod ep — so
  // an ep group is ep consecutive dp indices (RankGenerator::ExpertParallelGroup).
  int ep = 1;
  AxisOrder order = kDefaultOrder;

  TpMode tp_mode = TpMode::k1D;
  int tp_depth = 1;  // 2.5D: the number d of q×q layers.
  SpMode sp_mode = SpMode::kRing;
  PipeSchedule pp_schedule = PipeSchedule::kOneFOneB;
  int pp_chunks = 1;            // Model chunks per pipeline stage (interleaved: ≥ 2).
  std::vector<int> pp_layers;   // Blocks per virtual stage (pp·pp_chunks entries); empty: balanced.
  ZeroStage zero_stage = ZeroStage::kNone;

  int Size(Axis axis) const;
  // dp·pp·tp·sp; 0 when a size is below 1, INT64_MAX when the product overflows 64 bits.
  int64_t WorldSize() const;
  // "dp4(ep2) pp2(interleaved×2) tp4(2d) sp2(ring)": the axes above 1 with their modes; "single" for
  // one rank.
  std::string ToString() const;
};

}  // namespace tessera::layout

#endif  // TESSERA_LAYOUT_PARALLEL_LAYOUT_H_
