// The engine's names for the model description it shares with the control plane
// (layout/model_config.h).
#ifndef TESSERA_PARALLEL_MODELS_MODEL_CONFIG_H_
#define TESSERA_PARALLEL_MODELS_MODEL_CONFIG_H_

#include "layout/model_config.h"

namespace tessera::parallel {

using layout::ModelConfig;
using layout::ModelFamily;
using layout::RopeScaling;

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_MODELS_MODEL_CONFIG_H_
