// Commands on models outside training: `tessera export` (a checkpoint as a transformers model
// directory). Local; no coordinator.
#ifndef TESSERA_CLIENT_MODEL_COMMANDS_H_
#define TESSERA_CLIENT_MODEL_COMMANDS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace tessera::client {

struct ExportOptions {
  std::string checkpoint;  // A step_NNNNNNNN directory or a checkpoint directory (its newest).
  std::string out_dir;
  std::string dtype = "fp32";          // fp32 | bf16.
  std::string max_shard_size = "5GB";  // Bytes: N, NKB, NMB, NGB (10^3 steps) or NKiB, NMiB, NGiB.
  bool merge = false;  // A LoRA checkpoint: the base with the adapters merged in, not a PEFT directory.
  std::string base;    // With merge: the base model ("" = the one trainer_state.json names).
  // A reward model's config.json pad_token_id: transformers scores a sequence at its last token that
  // is not this id. -1 (the default): null (transformers then scores unpadded sequences one at a time).
  int64_t pad_token_id = -1;
};

// "5GB" → 5·10^9, "40KiB" → 40960; errors name the value.
absl::StatusOr<uint64_t> ParseByteSize(const std::string& text);

// Returns the process exit code.
int ExportCommand(const ExportOptions& options);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_MODEL_COMMANDS_H_
