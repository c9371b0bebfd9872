#include "common/spec/data_options_of.h"

namespace tessera::spec {

parallel::TokenDatasetOptions DataOptionsOf(const v1::JobSpec& spec) {
  parallel::TokenDatasetOptions o;
  const auto& d = spec.data();
  o.path = d.path();
  switch (d.format()) {
    case v1::DATA_FORMAT_FLAT: o.format = parallel::DataFormat::kFlat; break;
    case v1::DATA_FORMAT_MEGATRON: o.format = parallel::DataFormat::kMegatron; break;
    case v1::DATA_FORMAT_LLMC: o.format = parallel::DataFormat::kLlmc; break;
    default: o.format = parallel::DataFormat::kAuto; break;
  }
  o.token_bytes = d.dtype() == v1::TOKEN_DTYPE_UINT32 ? 4 : 2;
  o.seq_len = spec.model().seq_len();
  o.vocab = spec.model().vocab();
  o.shuffle = d.shuffle();
  o.seed = d.seed();
  return o;
}

}  // namespace tessera::spec
