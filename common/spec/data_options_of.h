// The data reader's options for a job spec: shared by the rank (training) and the CLI (which opens
// the data before it starts any rank).
#ifndef TESSERA_COMMON_SPEC_DATA_OPTIONS_OF_H_
#define TESSERA_COMMON_SPEC_DATA_OPTIONS_OF_H_

#include "parallel/data/token_dataset.h"
#include "tessera/v1/job.pb.h"

namespace tessera::spec {

parallel::TokenDatasetOptions DataOptionsOf(const v1::JobSpec& spec);

}  // namespace tessera::spec

#endif  // TESSERA_COMMON_SPEC_DATA_OPTIONS_OF_H_
