#include "parallel/models/router_bias.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"

namespace tessera::parallel {

absl::Status LoadRouterBias(const std::vector<std::vector<double>>& rows, at::Tensor& bias) {
  const int64_t layers = bias.size(0), experts = bias.size(1);
  if (static_cast<int64_t>(rows.size()) > layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("router_bias: ", rows.size(), " rows for a model of ", layers, " blocks"));
  }
  at::NoGradGuard no_grad;
  bias.zero_();
  for (int64_t layer = 0; layer < static_cast<int64_t>(rows.size()); ++layer) {
    const std::vector<double>& row = rows[layer];
    if (row.empty()) continue;
    if (static_cast<int64_t>(row.size()) != experts) {
      return absl::InvalidArgumentError(absl::StrCat("router_bias: block ", layer, " has ", row.size(),
                                                     " numbers for ", experts, " experts"));
    }
    bias[layer].copy_(at::tensor(row, at::kDouble).to(bias.scalar_type()));
  }
  return absl::OkStatus();
}

}  // namespace tessera::parallel
