// `tessera data render-chat`: the text a tokenizer's chat template makes of each conversation, as
// transformers' apply_chat_template(tokenize=False) gives it — to check a template before preparing an
// SFT dataset with it.
#ifndef TESSERA_CLIENT_CHAT_RENDER_H_
#define TESSERA_CLIENT_CHAT_RENDER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tessera::client {

// Reads `inputs` (.jsonl files, one {"messages": [...], "tools": [...]?} per line; "-" is stdin) and
// prints one JSON line {"text": ...} per conversation. `tokenizer`: a tokenizer directory (or a
// tokenizer.json in one) holding chat_template.jinja or tokenizer_config.json. Errors name the file,
// line and field.
absl::Status RenderChatCommand(const std::string& tokenizer, const std::vector<std::string>& inputs,
                               bool add_generation_prompt);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_CHAT_RENDER_H_
