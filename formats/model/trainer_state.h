// A checkpoint's trainer_state.json, read (no torch): what a resumed run, `tessera export` and
// `tessera generate` take from it. The file is written by the trainer (Trainer::TrainerStateJson);
// a reader meets it after a crash, a copy or an edit, so every field is checked for presence, type
// and range, and a bad file is a DataLoss error naming the file and the field — never an exception.
#ifndef TESSERA_FORMATS_MODEL_TRAINER_STATE_H_
#define TESSERA_FORMATS_MODEL_TRAINER_STATE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/model/model_config.h"

namespace tessera::formats::model {

struct TrainerState {
  int64_t step = 0;  // Optimizer steps taken.
  // model.*: family and sizes. kv_heads and ffn_hidden are 0 when absent (checkpoints written before
  // model families existed: GPT-2's defaults, as ModelConfig::KvHeads() / FfnHidden() give).
  ModelConfig model;
  int64_t optimizer_step = 0;     // optimizer.step (the Adam step count); `step` when absent.
  bool optimizer_sharded = false;  // optimizer.sharded: the state is in one file per dp and tp rank.
  int mesh_tp = 0;                 // mesh.tp; 0 when absent.
  std::string precision;           // "" when absent.
  std::optional<double> loss_scale;  // loss_scale.scale (fp16), when present.
  int64_t good_steps = 0;            // loss_scale.good_steps.
  int64_t next_sample = -1;          // data.next_sample; -1 when absent.
  // data.blend[i].samples_taken (-1 where a source lacks it); empty without a blend.
  std::vector<int64_t> blend_samples_taken;
  // Loss-free balancing: router_bias[layer][expert] of every block ([] for a dense block); empty when
  // absent.
  std::vector<std::vector<double>> router_bias;
  // LoRA (model.lora present; model.lora then in `model`): the base model the adapters belong to (the
  // job's init_from or pretrained; "" when it had none).
  std::string lora_base;
};

// The largest model size (layers, hidden, heads, vocab, seq_len, ...) a trainer state may name.
inline constexpr int64_t kMaxTrainerStateSize = int64_t{1} << 24;
// The largest trainer_state.json read.
inline constexpr int64_t kMaxTrainerStateBytes = int64_t{16} << 20;

// Parses the file's text; `where` names it in errors ("DIR/trainer_state.json: model.hidden: ...").
absl::StatusOr<TrainerState> ParseTrainerState(std::string_view text, const std::string& where);
// Reads and parses CHECKPOINT/trainer_state.json.
absl::StatusOr<TrainerState> ReadTrainerState(const std::string& checkpoint);

}  // namespace tessera::formats::model

#endif  // TESSERA_FORMATS_MODEL_TRAINER_STATE_H_
