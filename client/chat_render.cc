#include "client/chat_render.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "client/jsonl_records.h"
#include "formats/chat/chat_template.h"
#include "nlohmann/json.hpp"

namespace tessera::client {
namespace {

using Json = nlohmann::ordered_json;

// The conversation of one input line, or the error naming its field.
absl::Status CheckConversation(const Json& record) {
  if (!record.is_object()) return absl::InvalidArgumentError("not a JSON object");
  if (!record.contains("messages")) return absl::InvalidArgumentError("messages: missing");
  const Json& messages = record["messages"];
  if (!messages.is_array()) return absl::InvalidArgumentError("messages: must be a list");
  for (size_t k = 0; k < messages.size(); ++k) {
    if (!messages[k].is_object()) return absl::InvalidArgumentError(absl::StrCat("messages[", k, "]: must be an object"));
    if (!messages[k].contains("role") || !messages[k]["role"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("messages[", k, "].role: must be a string"));
    }
  }
  if (record.contains("tools") && !record["tools"].is_array() && !record["tools"].is_null()) {
    return absl::InvalidArgumentError("tools: must be a list");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RenderChatCommand(const std::string& tokenizer, const std::vector<std::string>& inputs,
                               bool add_generation_prompt) {
  auto t = formats::chat::ChatTemplate::FromTokenizerDir(tokenizer);
  if (!t.ok()) return t.status();
  return ForEachJsonRecord(inputs, [&](const Json& record, const std::string& where) -> absl::Status {
    if (absl::Status s = CheckConversation(record); !s.ok()) return absl::InvalidArgumentError(where + std::string(s.message()));
    auto text = t->Render(record["messages"], add_generation_prompt,
                          record.contains("tools") ? record["tools"] : Json(nullptr));
    if (!text.ok()) return absl::Status(text.status().code(), where + std::string(text.status().message()));
    Json out = Json::object();
    out["text"] = *text;
    std::cout << out.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
    return absl::OkStatus();
  });
}

}  // namespace tessera::client
