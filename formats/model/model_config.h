// formats/model's names for the model description it shares with the control plane
// (layout/model_config.h).
#ifndef TESSERA_FORMATS_MODEL_MODEL_CONFIG_H_
#define TESSERA_FORMATS_MODEL_MODEL_CONFIG_H_

#include "layout/model_config.h"

namespace tessera::formats::model {

using layout::ModelConfig;
using layout::ModelFamily;
using layout::RopeScaling;

}  // namespace tessera::formats::model

#endif  // TESSERA_FORMATS_MODEL_MODEL_CONFIG_H_
