// `tessera data prepare --preference`: preference pairs -> a preference dataset
// (formats/data/preference_dataset.h, docs/data-format.md "Preference datasets"), tokenized as TRL
// 0.24's DPOTrainer tokenizes them (maybe_apply_chat_template, then tokenize_row without the EOS it
// appends: the template's own end-of-turn token ends a completion).
//
// Records, one per line: conversational {"prompt": [messages], "chosen": [messages], "rejected":
// [messages], "tools": [...]?, "margin": number?} or text {"prompt": "...", "chosen": "...",
// "rejected": "...", "margin": number?}; other keys are ignored but `chat_template_kwargs` (refused:
// not supported). `tools` is per record here (DPOTrainer takes one list, DPOConfig.tools, for all). Conversational: the prompt is the
// chat template's rendering of `prompt` — with the generation prompt when it ends with a user
// message, continuing its final message when it ends with an assistant message (a prefill) — cut to
// the longest common prefix with the rendering of prompt + chosen; the chosen text is that rendering
// minus the prompt; the prompt is cut again to the common prefix with prompt + rejected, and the
// rejected text is that rendering minus it. Prompt, chosen and rejected are tokenized apart
// (tokenizer(text, add_special_tokens=False)). Either every record has a margin or none does.
// A bad record is refused with its file, line and the problem: a missing or mistyped field, an
// unknown role, a prompt that does not end with a user or assistant message, an empty completion,
// chosen equal to rejected, a template that cannot render it.
#ifndef TESSERA_CLIENT_PREFERENCE_PREPARE_H_
#define TESSERA_CLIENT_PREFERENCE_PREPARE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::client {

struct PreferencePrepareOptions {
  std::vector<std::string> inputs;  // .jsonl files, or "-" for stdin.
  std::string output_prefix;
  std::string tokenizer;  // A tokenizer directory, or its tokenizer.json.
  bool progress = true;
};

struct PreferencePrepareReport {
  int64_t pairs = 0;
  int64_t tokens = 0;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // Chosen and rejected.
  bool margins = false;
  double seconds = 0;
  std::string dtype;
};

absl::StatusOr<PreferencePrepareReport> PreparePreference(const PreferencePrepareOptions& options);

// `tessera score` of single completions: records {"prompt": [messages], "completion": [messages],
// "tools": [...]?} or {"prompt": "...", "completion": "..."} (TRL's prompt-completion formats),
// each tokenized as a pair's chosen is (the rules above, `completion` in place of `chosen`), so that a
// reward model scores a completion as it scored it in a pair. A bad record is refused with its file,
// line and the problem (also a record that holds chosen or rejected).
struct CompletionTokens {
  std::vector<int32_t> prompt, completion;
  std::string where;  // "FILE:LINE: ", for the caller's errors.
};
absl::StatusOr<std::vector<CompletionTokens>> PrepareCompletions(const std::vector<std::string>& inputs,
                                                                 const std::string& tokenizer);

// Whether the first record of the .jsonl file `path` is a single completion (has "completion") rather
// than a pair; its line's error when it is no JSON object.
absl::StatusOr<bool> HoldsCompletions(const std::string& path);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_PREFERENCE_PREPARE_H_
