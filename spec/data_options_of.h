// The data reader's options for a job spec: shared by the rank (training) and the CLI (which opens
// the data before it starts any rank).
#ifndef TESSERA_SPEC_DATA_OPTIONS_OF_H_
#define TESSERA_SPEC_DATA_OPTIONS_OF_H_

#include <vector>

#include "formats/data/token_dataset.h"
#include "formats/data/training_data.h"
#include "tessera/v1/job.pb.h"

namespace tessera::spec {

formats::data::TokenDatasetOptions DataOptionsOf(const v1::JobSpec& spec);
// data.blend's sources (empty without a blend), each with the job's seq_len, vocab, shuffle and seed.
std::vector<formats::data::BlendSource> BlendOf(const v1::JobSpec& spec);
// data.valid_path's stream (path empty without one), read with data.format and data.dtype.
formats::data::TokenDatasetOptions ValidDataOptionsOf(const v1::JobSpec& spec);

}  // namespace tessera::spec

#endif  // TESSERA_SPEC_DATA_OPTIONS_OF_H_
