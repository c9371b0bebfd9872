#include "coordinator/ui/svg_chart.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/ui/html.h"

namespace tessera::coordinator::ui {
namespace {

// Plot margins inside the svg: left for y tick labels, bottom for x tick labels.
constexpr int kLeft = 56, kRight = 12, kTop = 26, kBottom = 30;

std::string Coord(double v) { return absl::StrFormat("%.1f", v); }

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int target) {
  std::vector<double> ticks;
  if (!std::isfinite(lo) || !std::isfinite(hi) || target < 1) return ticks;
  if (hi <= lo) return {lo};
  const double raw = (hi - lo) / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  // Multiples k·step (not a running sum, which drifts).
  for (double k = std::ceil(lo / step); k * step <= hi + step * 1e-9 && ticks.size() < 64; k += 1) {
    ticks.push_back(k == 0 ? 0.0 : k * step);
  }
  return ticks;
}

std::string RenderLineChart(const ChartOptions& o, const std::vector<ChartSeries>& series) {
  // Finite points only; the range over every series.
  std::vector<std::vector<std::pair<double, double>>> finite(series.size());
  int64_t skipped = 0;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (size_t s = 0; s < series.size(); ++s) {
    for (const auto& [x, y] : series[s].points) {
      if (!std::isfinite(x) || !std::isfinite(y)) {
        ++skipped;
        continue;
      }
      finite[s].push_back({x, y});
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  int64_t points = 0;
  bool markers = true;
  for (const auto& f : finite) {
    points += static_cast<int64_t>(f.size());
    markers = markers && static_cast<int>(f.size()) <= o.max_markers;
  }
  const std::string x_label = Escape(o.x_label);
  std::string out = absl::StrFormat(
      "<svg class=\"chart\" data-chart=\"%s\" data-points=\"%d\" data-skipped=\"%d\" data-markers=\"%d\" "
      "xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
      "aria-label=\"%s by %s\">",
      Escape(o.id), points, skipped, markers ? 1 : 0, o.width, o.height, o.width, o.height, Escape(o.title),
      x_label);
  absl::StrAppend(&out, "<text class=\"chart-title\" x=\"", kLeft, "\" y=\"16\">", Escape(o.title), "</text>");
  const double pw = o.width - kLeft - kRight, ph = o.height - kTop - kBottom;
  absl::StrAppend(&out, "<rect class=\"plot\" x=\"", kLeft, "\" y=\"", kTop, "\" width=\"", Coord(pw),
                  "\" height=\"", Coord(ph), "\"/>");
  if (points == 0) {
    absl::StrAppend(&out, "<text class=\"empty\" x=\"", Coord(kLeft + pw / 2), "\" y=\"", Coord(kTop + ph / 2),
                    "\" text-anchor=\"middle\">no ", x_label, "s reported yet</text></svg>");
    return out;
  }
  if (o.y_from_zero) y0 = std::min(0.0, y0);
  if (y1 - y0 <= std::abs(y1) * 1e-12) {  // A flat line: give it a band around the value.
    const double pad = std::abs(y1) > 0 ? std::abs(y1) * 0.05 : 1.0;
    y0 -= pad, y1 += pad;
  } else {
    const double pad = (y1 - y0) * 0.05;
    y1 += pad;
    if (!o.y_from_zero || y0 < 0) y0 -= pad;
  }
  if (x1 <= x0) x0 -= 1, x1 += 1;
  const auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  const auto py = [&](double y) { return kTop + ph - (y - y0) / (y1 - y0) * ph; };
  for (double t : NiceTicks(y0, y1, 4)) {
    absl::StrAppend(&out, "<line class=\"grid\" x1=\"", kLeft, "\" x2=\"", Coord(kLeft + pw), "\" y1=\"",
                    Coord(py(t)), "\" y2=\"", Coord(py(t)), "\"/><text class=\"tick\" x=\"", kLeft - 4, "\" y=\"",
                    Coord(py(t) + 4), "\" text-anchor=\"end\">", Compact(t), "</text>");
  }
  for (double t : NiceTicks(x0, x1, 5)) {
    absl::StrAppend(&out, "<text class=\"tick\" x=\"", Coord(px(t)), "\" y=\"", Coord(kTop + ph + 16),
                    "\" text-anchor=\"middle\">", Compact(t), "</text>");
  }
  absl::StrAppend(&out, "<text class=\"axis\" x=\"", Coord(kLeft + pw), "\" y=\"", o.height - 2,
                  "\" text-anchor=\"end\">", x_label, "</text>");
  int legend_x = kLeft + 8;
  for (size_t s = 0; s < series.size(); ++s) {
    const auto& pts = finite[s];
    const std::string name = Escape(series[s].name), color = Escape(series[s].color);
    if (!pts.empty()) {
      const size_t stride = o.max_line_points > 0 && static_cast<int>(pts.size()) > o.max_line_points
                                ? (pts.size() + o.max_line_points - 1) / o.max_line_points
                                : 1;
      absl::StrAppend(&out, "<polyline class=\"line\" data-series=\"", name, "\" fill=\"none\" stroke=\"", color,
                      "\" points=\"");
      for (size_t i = 0; i < pts.size(); i += stride) {
        absl::StrAppend(&out, i == 0 ? "" : " ", Coord(px(pts[i].first)), ",", Coord(py(pts[i].second)));
      }
      if ((pts.size() - 1) % stride != 0) {
        absl::StrAppend(&out, " ", Coord(px(pts.back().first)), ",", Coord(py(pts.back().second)));
      }
      absl::StrAppend(&out, "\"/>");
      if (markers) {
        absl::StrAppend(&out, "<g class=\"markers\" data-series=\"", name, "\" fill=\"", color, "\">");
        for (const auto& [x, y] : pts) {
          absl::StrAppend(&out, "<circle cx=\"", Coord(px(x)), "\" cy=\"", Coord(py(y)), "\" r=\"2\"><title>",
                          x_label, " ", Number(x, 12), ": ", Number(y, 5), "</title></circle>");
        }
        absl::StrAppend(&out, "</g>");
      }
    }
    if (series.size() > 1) {
      absl::StrAppend(&out, "<rect x=\"", legend_x, "\" y=\"", kTop + 6, "\" width=\"10\" height=\"3\" fill=\"", color,
                      "\"/><text class=\"legend\" x=\"", legend_x + 14, "\" y=\"", kTop + 11, "\">", name, "</text>");
      legend_x += 24 + 7 * static_cast<int>(series[s].name.size());
    }
  }
  absl::StrAppend(&out, "</svg>");
  return out;
}

}  // namespace tessera::coordinator::ui
