#include "rewards/advantages.h"

#include <cmath>
#include <cstddef>
#include <limits>

#include "absl/strings/str_cat.h"

namespace tessera::rewards {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// The unbiased standard deviation of values[first, first + n) (n ≥ 2).
double UnbiasedStd(const std::vector<double>& values, size_t first, size_t n) {
  double mean = 0;
  for (size_t i = first; i < first + n; ++i) mean += values[i];
  mean /= static_cast<double>(n);
  double squares = 0;
  for (size_t i = first; i < first + n; ++i) squares += (values[i] - mean) * (values[i] - mean);
  return std::sqrt(squares / static_cast<double>(n - 1));
}

}  // namespace

absl::StatusOr<Advantages> ComputeAdvantages(const std::vector<std::vector<double>>& per_function,
                                             const AdvantageOptions& o) {
  if (per_function.empty()) return absl::InvalidArgumentError("no reward function");
  const size_t n = per_function[0].size();
  const size_t functions = per_function.size();
  if (o.group_size < 2) return absl::InvalidArgumentError(absl::StrCat("group size ", o.group_size, " is below 2"));
  const size_t g = static_cast<size_t>(o.group_size);
  if (n == 0 || n % g != 0) {
    return absl::InvalidArgumentError(absl::StrCat(n, " completions are not whole groups of ", g));
  }
  if (!o.weights.empty() && o.weights.size() != functions) {
    return absl::InvalidArgumentError(absl::StrCat(o.weights.size(), " weights for ", functions, " reward functions"));
  }
  for (size_t f = 0; f < functions; ++f) {
    if (!o.weights.empty() && !std::isfinite(o.weights[f])) {
      return absl::InvalidArgumentError(absl::StrCat("weight ", f, " is ", o.weights[f]));
    }
    if (per_function[f].size() != n) {
      return absl::InvalidArgumentError(absl::StrCat("reward function ", f, " scored ", per_function[f].size(),
                                                     " completions, function 0 ", n));
    }
    for (size_t c = 0; c < n; ++c) {
      if (std::isinf(per_function[f][c])) {
        return absl::InvalidArgumentError(absl::StrCat("reward function ", f, " gave ", per_function[f][c],
                                                       " for completion ", c));
      }
    }
  }
  Advantages out;
  out.rewards.assign(n, 0.0);
  for (size_t f = 0; f < functions; ++f) {
    const double w = o.weights.empty() ? 1.0 : o.weights[f];
    for (size_t c = 0; c < n; ++c) {
      if (!std::isnan(per_function[f][c])) out.rewards[c] += w * per_function[f][c];
    }
  }
  const size_t groups = n / g;
  std::vector<double> std_of(n);
  const double batch_std = o.scale == RewardScale::kBatch ? UnbiasedStd(out.rewards, 0, n) : 0.0;
  out.advantages.resize(n);
  size_t zero_std = 0;
  for (size_t k = 0; k < groups; ++k) {
    double mean = 0;
    for (size_t c = k * g; c < (k + 1) * g; ++c) mean += out.rewards[c];
    mean /= static_cast<double>(g);
    out.reward += mean / static_cast<double>(groups);
    const double s = o.scale == RewardScale::kBatch ? batch_std : UnbiasedStd(out.rewards, k * g, g);
    for (size_t c = k * g; c < (k + 1) * g; ++c) {
      std_of[c] = s;
      out.advantages[c] = out.rewards[c] - mean;
      if (o.scale != RewardScale::kNone) out.advantages[c] /= s + 1e-4;
      if (std::abs(s) <= 1e-8) ++zero_std;
    }
  }
  for (double s : std_of) out.reward_std += s / static_cast<double>(n);
  out.frac_reward_zero_std = static_cast<double>(zero_std) / static_cast<double>(n);
  for (size_t f = 0; f < functions; ++f) {
    double sum = 0;
    size_t count = 0;
    for (double r : per_function[f]) {
      if (!std::isnan(r)) sum += r, ++count;
    }
    const double mean = count > 0 ? sum / static_cast<double>(count) : kNan;
    double squares = 0;
    for (double r : per_function[f]) {
      if (!std::isnan(r)) squares += (r - mean) * (r - mean);
    }
    out.function_mean.push_back(mean);
    out.function_std.push_back(count > 1 ? std::sqrt(squares / static_cast<double>(count - 1)) : kNan);
  }
  return out;
}

}  // namespace tessera::rewards
