// PEFT's LoRA adapter directory (what `PeftModel.save_pretrained` writes and `PeftModel.from_pretrained`
// loads): adapter_config.json and adapter_model.safetensors, whose tensors are named
// "base_model.model." + the transformers model's module path + ".lora_A.weight" / ".lora_B.weight"
// (a Llama: base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight). No torch: the tensors
// themselves are read and written by the caller; this file knows the config and the names.
#ifndef TESSERA_FORMATS_MODEL_PEFT_ADAPTER_H_
#define TESSERA_FORMATS_MODEL_PEFT_ADAPTER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::formats::model {

struct PeftLoraConfig {
  int rank = 0;                      // "r".
  double alpha = 0;                  // "lora_alpha".
  double dropout = 0;                // "lora_dropout".
  std::vector<std::string> targets;  // "target_modules" (a list; a regex string is refused).
  std::string base_model;            // "base_model_name_or_path" (may be empty).
  // task_type "SEQ_CLS" with modules_to_save ["classifier", "score"] (what peft gives such a task): the
  // adapters of a reward model, whose score head trains whole beside them and is saved as
  // base_model.model.score.weight. Else "CAUSAL_LM" (or no task) and no modules_to_save.
  bool score_head = false;
};

// Reads DIR/adapter_config.json. Refuses what tessera does not compute as PEFT does, naming the key:
// a peft_type other than LORA, use_rslora, use_dora, bias other than "none", modules_to_save other
// than a SEQ_CLS task's score head (score_head), layers_to_transform, rank_pattern / alpha_pattern
// that are not empty, fan_in_fan_out.
absl::StatusOr<PeftLoraConfig> ReadPeftLoraConfig(const std::string& dir);

// adapter_config.json's text for `config` (task CAUSAL_LM, or SEQ_CLS with its modules_to_save for a
// score head; everything else PEFT's defaults).
std::string PeftLoraConfigJson(const PeftLoraConfig& config);

// A tensor name of adapter_model.safetensors → tessera's documented name (the model's names without
// transformers' "model." prefix: layers.3.self_attn.q_proj.lora_A.weight; a SEQ_CLS task's
// base_model.model.score.weight → score.weight); "" when it is not one of a Llama-shaped model's
// adapters or score head.
std::string TesseraNameOfPeftKey(const std::string& key);
// The inverse.
std::string PeftKeyOfTesseraName(const std::string& name);

}  // namespace tessera::formats::model

#endif  // TESSERA_FORMATS_MODEL_PEFT_ADAPTER_H_
