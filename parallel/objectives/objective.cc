#include "parallel/objectives/objective.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace tessera::parallel {

void RecordSampleValues(const at::Tensor& where_in, const at::Tensor& values, std::vector<double>* table) {
  TORCH_CHECK(where_in.defined() && where_in.numel() == values.numel(),
              "a scoring pass needs one table index per value: ", values.numel(), " values");
  const at::Tensor v = values.detach().to(at::kDouble).cpu().contiguous();
  const at::Tensor where = where_in.to(at::kDouble).cpu().contiguous();
  for (int64_t i = 0; i < v.numel(); ++i) {
    const double w = where.data_ptr<double>()[i];
    if (w < 0 || w >= static_cast<double>(table->size())) continue;  // Padding samples: no entry.
    (*table)[static_cast<size_t>(w)] = v.data_ptr<double>()[i];
  }
}

void MetricSums::Add(const at::Tensor& row) {
  const at::Tensor r = row.detach().to(at::kDouble).cpu().contiguous();
  TORCH_CHECK(static_cast<size_t>(r.numel()) == sums_.size(), "metrics: ", r.numel(), " values for ", sums_.size(),
              " names");
  for (size_t i = 0; i < sums_.size(); ++i) sums_[i] += r.data_ptr<double>()[i];
}

std::vector<double> MetricSums::Take() {
  std::vector<double> out = sums_;
  std::fill(sums_.begin(), sums_.end(), 0.0);
  return out;
}

}  // namespace tessera::parallel
