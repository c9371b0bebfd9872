#include "common/spec/data_options_of.h"

namespace tessera::spec {

namespace {

parallel::DataFormat FormatOf(v1::DataFormat f) {
  switch (f) {
    case v1::DATA_FORMAT_FLAT: return parallel::DataFormat::kFlat;
    case v1::DATA_FORMAT_MEGATRON: return parallel::DataFormat::kMegatron;
    case v1::DATA_FORMAT_LLMC: return parallel::DataFormat::kLlmc;
    default: return parallel::DataFormat::kAuto;
  }
}

}  // namespace

parallel::TokenDatasetOptions DataOptionsOf(const v1::JobSpec& spec) {
  parallel::TokenDatasetOptions o;
  const auto& d = spec.data();
  o.path = d.path();
  o.format = FormatOf(d.format());
  o.token_bytes = d.dtype() == v1::TOKEN_DTYPE_UINT32 ? 4 : 2;
  o.seq_len = spec.model().seq_len();
  o.vocab = spec.model().vocab();
  o.shuffle = d.shuffle();
  o.seed = d.seed();
  o.packing = d.packing();
  return o;
}

std::vector<parallel::BlendSource> BlendOf(const v1::JobSpec& spec) {
  std::vector<parallel::BlendSource> out;
  const parallel::TokenDatasetOptions job = DataOptionsOf(spec);
  for (const auto& src : spec.data().blend()) {
    parallel::BlendSource b;
    b.data = job;
    b.data.path = src.path();
    b.data.format = FormatOf(src.format());
    b.data.token_bytes = src.dtype() == v1::TOKEN_DTYPE_UINT32 ? 4 : 2;
    b.weight = src.weight();
    out.push_back(b);
  }
  return out;
}

parallel::TokenDatasetOptions ValidDataOptionsOf(const v1::JobSpec& spec) {
  parallel::TokenDatasetOptions o = DataOptionsOf(spec);
  o.path = spec.data().valid_path();
  o.shuffle = false;
  o.packing = false;
  return o;
}

}  // namespace tessera::spec
