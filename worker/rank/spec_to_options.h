// JobSpec (proto) -> TrainerOptions (plain values for the engine). Kept apart from torch code so
// that protobuf and LibTorch headers never meet in one translation unit.
#ifndef TESSERA_WORKER_RANK_SPEC_TO_OPTIONS_H_
#define TESSERA_WORKER_RANK_SPEC_TO_OPTIONS_H_

#include "parallel/train/trainer_options.h"
#include "tessera/v1/job.pb.h"

namespace tessera::rank {

// `spec` must be valid (spec::ValidateJobSpec).
parallel::TrainerOptions ToTrainerOptions(const v1::JobSpec& spec);

}  // namespace tessera::rank

#endif  // TESSERA_WORKER_RANK_SPEC_TO_OPTIONS_H_
