// Line charts as inline SVG for the dashboard (no script, no external asset). One <circle> marker
// per point (up to a limit), so a reader of the DOM can count the points: a chart of a job's loss
// has one per step it reported.
#ifndef TESSERA_COORDINATOR_UI_SVG_CHART_H_
#define TESSERA_COORDINATOR_UI_SVG_CHART_H_

#include <string>
#include <utility>
#include <vector>

namespace tessera::coordinator::ui {

struct ChartSeries {
  std::string name;   // Legend text and the data-series attribute.
  std::string color;  // A CSS colour ("#1f77b4"): written as given, so never from a request.
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending.
};

struct ChartOptions {
  std::string id;             // The svg's data-chart attribute ("loss").
  std::string title;          // Drawn above the plot.
  std::string x_label = "step";
  int width = 520;
  int height = 190;
  bool y_from_zero = false;   // The y axis starts at 0 (throughput) rather than at the data's minimum.
  // A series with at most this many points gets a marker per point; with more, the line only (its
  // svg says data-markers="0").
  int max_markers = 600;
  // A line of more points is thinned to about this many (every k-th, the last always kept).
  int max_line_points = 3000;
};

// Non-finite points (a NaN loss) are left out and counted in the svg's data-skipped attribute.
// A chart with no finite point says so in place of the plot.
std::string RenderLineChart(const ChartOptions& options, const std::vector<ChartSeries>& series);

// Tick values covering [lo, hi]: about `target` of them, at 1, 2 or 5 times a power of ten.
std::vector<double> NiceTicks(double lo, double hi, int target);

}  // namespace tessera::coordinator::ui

#endif  // TESSERA_COORDINATOR_UI_SVG_CHART_H_
