// `tessera data prepare --prompts`: the prompts of a reinforcement-learning job -> a prompt dataset
// (formats/data/prompt_dataset.h, docs/data-format.md "Prompt datasets"), tokenized as TRL 0.24's
// GRPOTrainer tokenizes them: maybe_apply_chat_template({"prompt": prompt})["prompt"], then
// tokenizer(text, add_special_tokens=False).
//
// Records, one per line: {"prompt": [messages] | "text", ...other fields}. A conversational prompt is
// rendered with the chat template and the generation prompt (ending with a user message), or
// continuing its final message (ending with an assistant message); a text prompt is taken as it is.
// The other fields (an `answer`, test cases, an `id`, also `tools`: the prompt is rendered alone, as
// GRPOTrainer renders it) are kept for the rewards. `chat_template_kwargs` is refused (not supported). A bad record is
// refused with its file, line and problem, and the run leaves no dataset.
#ifndef TESSERA_CLIENT_PROMPT_PREPARE_H_
#define TESSERA_CLIENT_PROMPT_PREPARE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::client {

struct PromptPrepareOptions {
  std::vector<std::string> inputs;  // .jsonl files, or "-" for stdin.
  std::string output_prefix;
  std::string tokenizer;  // A tokenizer directory, or its tokenizer.json.
  bool progress = true;
};

struct PromptPrepareReport {
  int64_t prompts = 0;
  int64_t tokens = 0;
  int64_t longest = 0;  // Tokens of the longest prompt.
  double seconds = 0;
  std::string dtype;
};

absl::StatusOr<PromptPrepareReport> PreparePrompts(const PromptPrepareOptions& options);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_PROMPT_PREPARE_H_
