#include "client/prepare_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::client {
namespace {

namespace fs = std::filesystem;

// The roles chat templates know: the four every template handles, OpenAI's "developer" and "function",
// Llama 3's "ipython" (a tool's output).
constexpr const char* kRoles[] = {"system", "user", "assistant", "tool", "developer", "function", "ipython"};

}  // namespace

absl::StatusOr<PrepareTokenizer> LoadPrepareTokenizer(const std::string& path) {
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  std::string dir = is_dir ? path : fs::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const std::string tokenizer_json = is_dir ? (fs::path(path) / "tokenizer.json").string() : path;
  PrepareTokenizer t;
  t.json_path = tokenizer_json;
  auto tok = formats::data::Tokenizer::FromFile(tokenizer_json);
  if (!tok.ok()) return tok.status();
  t.tokenizer = *std::move(tok);
  auto encoder = t.tokenizer->NewEncoder(/*match_special=*/true);
  if (!encoder.ok()) return encoder.status();
  t.encoder = *std::move(encoder);
  t.chat_template = formats::chat::ChatTemplate::FromTokenizerDir(dir);
  const std::string config = (fs::path(dir) / "tokenizer_config.json").string();
  std::ifstream in(config);
  const nlohmann::json j = in ? nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false) : nlohmann::json();
  if (j.is_object() && j.contains("eos_token")) {
    const nlohmann::json& e = j["eos_token"];
    if (e.is_string()) t.eos = e.get<std::string>();
    if (e.is_object() && e.contains("content") && e["content"].is_string()) t.eos = e["content"].get<std::string>();
  }
  t.dtype = formats::data::IndexedDtypeForVocab(t.tokenizer->vocab_size());
  return t;
}

absl::Status CheckChatMessages(const nlohmann::ordered_json& messages, const std::string& field) {
  if (!messages.is_array()) return absl::InvalidArgumentError(absl::StrCat(field, ": must be a list"));
  if (messages.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": is empty"));
  for (size_t k = 0; k < messages.size(); ++k) {
    const std::string at = absl::StrCat(field, "[", k, "]");
    if (!messages[k].is_object()) return absl::InvalidArgumentError(absl::StrCat(at, ": must be an object"));
    if (!messages[k].contains("role") || !messages[k]["role"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(at, ".role: must be a string"));
    }
    const std::string role = messages[k]["role"].get<std::string>();
    if (std::find(std::begin(kRoles), std::end(kRoles), role) == std::end(kRoles)) {
      return absl::InvalidArgumentError(absl::StrCat(at, ".role: \"", role.substr(0, 64), "\" is not a chat role (",
                                                     absl::StrJoin(kRoles, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RenderPromptText(const formats::chat::ChatTemplate& t, const nlohmann::ordered_json& prompt,
                                             const nlohmann::ordered_json& tools) {
  const std::string last = prompt.back()["role"].get<std::string>();
  absl::StatusOr<std::string> rendered = absl::InternalError("");
  if (last == "user") {
    rendered = t.Render(prompt, /*add_generation_prompt=*/true, tools);
  } else if (last == "assistant") {
    rendered = t.RenderContinuing(prompt, tools);  // A prefill the completions continue.
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt[", prompt.size() - 1, "].role: the prompt must end with a user message (or an assistant "
                     "message the completions continue), not \"", last.substr(0, 64), "\""));
  }
  if (!rendered.ok()) return absl::InvalidArgumentError(absl::StrCat("prompt: ", rendered.status().message()));
  return rendered;
}

}  // namespace tessera::client
