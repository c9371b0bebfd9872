#include "spec/data_options_of.h"

namespace tessera::spec {

namespace {

formats::data::DataFormat FormatOf(v1::DataFormat f) {
  switch (f) {
    case v1::DATA_FORMAT_FLAT: return formats::data::DataFormat::kFlat;
    case v1::DATA_FORMAT_MEGATRON: return formats::data::DataFormat::kMegatron;
    case v1::DATA_FORMAT_LLMC: return formats::data::DataFormat::kLlmc;
    default: return formats::data::DataFormat::kAuto;
  }
}

}  // namespace

formats::data::TokenDatasetOptions DataOptionsOf(const v1::JobSpec& spec) {
  formats::data::TokenDatasetOptions o;
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

std::vector<formats::data::BlendSource> BlendOf(const v1::JobSpec& spec) {
  std::vector<formats::data::BlendSource> out;
  const formats::data::TokenDatasetOptions job = DataOptionsOf(spec);
  for (const auto& src : spec.data().blend()) {
    formats::data::BlendSource b;
    b.data = job;
    b.data.path = src.path();
    b.data.format = FormatOf(src.format());
    b.data.token_bytes = src.dtype() == v1::TOKEN_DTYPE_UINT32 ? 4 : 2;
    b.weight = src.weight();
    out.push_back(b);
  }
  return out;
}

formats::data::TokenDatasetOptions ValidDataOptionsOf(const v1::JobSpec& spec) {
  formats::data::TokenDatasetOptions o = DataOptionsOf(spec);
  o.path = spec.data().valid_path();
  o.shuffle = false;
  o.packing = false;
  return o;
}

}  // namespace tessera::spec
