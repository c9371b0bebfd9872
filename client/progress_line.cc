#include "client/progress_line.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace tessera::client {

std::string FormatDuration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

std::string FormatCount(double v) {
  if (v >= 1e9) return absl::StrFormat("%.1fG", v / 1e9);
  if (v >= 1e6) return absl::StrFormat("%.1fM", v / 1e6);
  if (v >= 1e3) return absl::StrFormat("%.1fk", v / 1e3);
  return absl::StrFormat("%.0f", v);
}

std::string FormatProgress(const Progress& p) {
  std::string line = absl::StrFormat("step %d/%d  loss %.4f", p.step, p.total_steps, p.loss);
  if (p.val_loss >= 0) line += absl::StrFormat("  val %.4f", p.val_loss);
  line += absl::StrFormat("  lr %.2e  %s tok/s", p.lr, FormatCount(p.tokens_per_s));
  if (p.eta_seconds >= 0) line += "  ETA " + FormatDuration(p.eta_seconds);
  return line;
}

}  // namespace tessera::client
