#include "parallel/models/hf_weights.h"

#include <ATen/ATen.h>

#include "formats/model/family.h"
#include "formats/model/hf_files.h"

namespace tessera::parallel {

using formats::model::HfStoredTensor;
using formats::model::ModelPart;
using formats::model::OpenHfFiles;
using formats::model::ParamSpec;
using formats::model::ParamSpecs1D;

namespace {

at::Tensor View(const HfStoredTensor& s) {
  const std::string& d = s.entry->dtype;
  const at::ScalarType type = d == "F32"    ? at::kFloat
                              : d == "BF16" ? at::kBFloat16
                              : d == "F16"  ? at::kHalf
                                            : at::kDouble;  // OpenHfFiles admits only these four.
  const auto options = at::TensorOptions().dtype(type);
  char* data = s.file->data(*s.entry);
  if (data == nullptr) return at::empty(s.entry->shape, options);
  return at::from_blob(data, s.entry->shape, options);
}

}  // namespace

absl::StatusOr<HfWeights> OpenHfWeights(const std::string& dir, const ModelConfig& config) {
  auto files = OpenHfFiles(dir, config);
  if (!files.ok()) return files.status();
  HfWeights out;
  for (const ParamSpec& p : ParamSpecs1D(config, ModelPart::Whole(config.layers), 1)) {
    auto it = files->params.find(p.name);
    if (it == files->params.end()) continue;  // A causal LM's directory read as a reward model: no score head.
    const HfStoredTensor& s = it->second;
    at::Tensor t = View(s);
    if (s.transposed) t = t.t();  // Conv1D [in, out] → [out, in].
    if (s.positions) t = t.narrow(0, 0, p.shape[0]);
    out.tensors.emplace(p.name, t);
  }
  out.files = std::move(files->files);
  return out;
}

}  // namespace tessera::parallel
