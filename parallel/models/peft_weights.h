// A PEFT LoRA adapter directory's tensors into a Decoder built with LoRA (formats/model/peft_adapter.h
// for the directory's format).
#ifndef TESSERA_PARALLEL_MODELS_PEFT_WEIGHTS_H_
#define TESSERA_PARALLEL_MODELS_PEFT_WEIGHTS_H_

#include <string>

#include "absl/status/status.h"
#include "parallel/models/decoder.h"

namespace tessera::parallel {

// Replaces `model`'s adapters (its trained parameters; config().lora enabled) with DIR/
// adapter_model.safetensors' (PEFT's names; this rank's parts of them). Every adapter the model holds
// must be there, and every tensor there must be a layer's adapter. Errors name the directory and the
// tensor. The config (rank, alpha, targets) is the caller's to check (ReadPeftLoraConfig).
absl::Status LoadPeftAdapterTensors(Decoder& model, const std::string& dir);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_MODELS_PEFT_WEIGHTS_H_
