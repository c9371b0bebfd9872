// The ModelConfig (layout/model_config.h, no torch) of a spec's model section: the
// one conversion, used by the rank (to build the model) and by the CLI's planner (to cost it).
#ifndef TESSERA_SPEC_MODEL_CONFIG_OF_H_
#define TESSERA_SPEC_MODEL_CONFIG_OF_H_

#include "layout/model_config.h"
#include "tessera/v1/job.pb.h"

namespace tessera::spec {

// Zeros (older stored specs, unset fields) take the ModelConfig defaults.
layout::ModelConfig ModelConfigOf(const v1::ModelSpec& m);

}  // namespace tessera::spec

#endif  // TESSERA_SPEC_MODEL_CONFIG_OF_H_
