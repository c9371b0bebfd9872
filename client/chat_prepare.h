// `tessera data prepare --chat`: conversations -> an SFT dataset (docs/data-format.md "SFT datasets"):
// each conversation rendered with the tokenizer's chat template (formats/chat/chat_template.h), its
// tokens as one document of a Megatron indexed dataset PREFIX.bin/.idx, one flag per token in
// PREFIX.sft.mask (1: trained on as a target — its bytes lie in an assistant turn), and
// PREFIX.sft.json (counts; the dataset is complete when it exists). An assistant turn of message i is
// what rendering messages[:i+1] adds to rendering messages[:i] with the generation prompt.
// Records: {"messages": [...], "tools": [...]?} or {"prompt": "...", "completion": "..."} (the text
// prompt + completion + EOS, the completion and EOS trained). Errors name the file, line and field.
#ifndef TESSERA_CLIENT_CHAT_PREPARE_H_
#define TESSERA_CLIENT_CHAT_PREPARE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::client {

struct ChatPrepareOptions {
  std::vector<std::string> inputs;  // .jsonl files, or "-" for stdin.
  std::string output_prefix;
  std::string tokenizer;  // A tokenizer directory, or its tokenizer.json.
  bool progress = true;
};

struct ChatPrepareReport {
  int64_t conversations = 0;
  int64_t tokens = 0;
  int64_t trained_tokens = 0;
  int64_t without_trained = 0;  // Conversations with no assistant token.
  double seconds = 0;
  std::string dtype;
};

absl::StatusOr<ChatPrepareReport> PrepareChat(const ChatPrepareOptions& options);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_CHAT_PREPARE_H_
