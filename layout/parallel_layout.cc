#include "layout/parallel_layout.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tessera::layout {

const char* AxisName(Axis axis) {
  switch (axis) {
    case Axis::kDp: return "dp";
    case Axis::kPp: return "pp";
    case Axis::kTp: return "tp";
    case Axis::kSp: return "sp";
  }
  return "?";
}

absl::StatusOr<AxisOrder> ParseOrder(absl::string_view text) {
  AxisOrder order{};
  std::array<bool, kNumAxes> seen{};
  int n = 0;
  bool ok = text.size() <= 64;
  for (absl::string_view name : absl::StrSplit(text.substr(0, 64), '-')) {
    int a = -1;
    for (Axis axis : kAxes) {
      if (name == AxisName(axis)) a = static_cast<int>(axis);
    }
    if (a < 0 || seen[a] || n == kNumAxes) {
      ok = false;
      break;
    }
    seen[a] = true;
    order[n++] = static_cast<Axis>(a);
  }
  if (!ok || n != kNumAxes) {
    std::vector<std::string> names;
    for (Axis axis : kDefaultOrder) names.push_back(AxisName(axis));
    return absl::InvalidArgumentError(absl::StrCat("'", text.substr(0, 32), text.size() > 32 ? "…" : "",
                                                   "' must name dp, pp, sp and tp once each, e.g. ",
                                                   absl::StrJoin(names, "-")));
  }
  return order;
}

std::string OrderName(const AxisOrder& order) {
  std::vector<std::string> names;
  for (Axis a : order) names.push_back(AxisName(a));
  return absl::StrJoin(names, "-");
}

int ParallelLayout::Size(Axis axis) const {
  switch (axis) {
    case Axis::kDp: return dp;
    case Axis::kPp: return pp;
    case Axis::kTp: return tp;
    case Axis::kSp: return sp;
  }
  return 1;
}

int64_t ParallelLayout::WorldSize() const {
  int64_t world = 1;
  for (Axis a : kAxes) {
    if (Size(a) < 1) return 0;
  }
  for (Axis a : kAxes) {
    if (__builtin_mul_overflow(world, int64_t{Size(a)}, &world)) return INT64_MAX;
  }
  return world;
}

std::string ParallelLayout::ToString() const {
  std::string s;
  auto add = [&](const std::string& part) { absl::StrAppend(&s, s.empty() ? "" : " ", part); };
  if (dp > 1) add(absl::StrCat("dp", dp, ep > 1 ? absl::StrCat("(ep", ep, ")") : ""));
  if (pp > 1) {
    add(absl::StrCat("pp", pp,
                     pp_schedule == PipeSchedule::kInterleaved    ? absl::StrCat("(interleaved×", pp_chunks, ")")
                     : IsZeroBubble(pp_schedule) ? absl::StrCat("(", Name(pp_schedule), ")")
                                                 : ""));
  }
  if (tp > 1) {
    add(absl::StrCat("tp", tp, "(", Name(tp_mode), tp_mode == TpMode::k2p5D ? absl::StrCat(",d=", tp_depth) : "",
                     ")"));
  }
  if (sp > 1) add(absl::StrCat("sp", sp, "(", Name(sp_mode), ")"));
  return s.empty() ? "single" : s;
}

}  // namespace tessera::layout
