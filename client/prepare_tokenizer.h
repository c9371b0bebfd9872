// What the `data prepare` commands that read records (--chat, --preference) share: the tokenizer as
// they load it, and the check of a list of chat messages.
#ifndef TESSERA_CLIENT_PREPARE_TOKENIZER_H_
#define TESSERA_CLIENT_PREPARE_TOKENIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "formats/chat/chat_template.h"
#include "formats/data/indexed_dataset.h"
#include "formats/data/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tessera::client {

struct PrepareTokenizer {
  std::unique_ptr<formats::data::Tokenizer> tokenizer;
  // Matches the special tokens a rendering spells (tokenizer(text, add_special_tokens=False)).
  std::unique_ptr<formats::data::Tokenizer::Encoder> encoder;
  // The tokenizer's chat template, or why there is none (an error for the records that need one).
  absl::StatusOr<formats::chat::ChatTemplate> chat_template = absl::NotFoundError("no chat template");
  std::string eos;  // tokenizer_config.json's eos_token ("" if none).
  std::string json_path;  // The tokenizer.json read.
  formats::data::IndexedDtype dtype = formats::data::IndexedDtype::kUint16;  // For its vocabulary.
};

// `path`: a tokenizer directory, or its tokenizer.json (the template and tokenizer_config.json are
// read beside it).
absl::StatusOr<PrepareTokenizer> LoadPrepareTokenizer(const std::string& path);

// `messages` (the record's field `field`) is a non-empty list of {"role": R, ...} with R one of the
// roles chat templates know — a misspelt role ("asistant") renders without complaint under most
// templates and would silently not be trained. InvalidArgument naming the field and message.
absl::Status CheckChatMessages(const nlohmann::ordered_json& messages, const std::string& field);

// The text of a conversational prompt (checked messages) as TRL's maybe_apply_chat_template renders
// it: with the generation prompt when it ends with a user message, continuing its final message when
// it ends with an assistant message (a prefill); another last role is InvalidArgument naming it.
absl::StatusOr<std::string> RenderPromptText(const formats::chat::ChatTemplate& t, const nlohmann::ordered_json& prompt,
                                             const nlohmann::ordered_json& tools);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_PREPARE_TOKENIZER_H_
