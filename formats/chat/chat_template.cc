#include "formats/chat/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <utility>
#include <vector>
#include <fstream>
#include <sstream>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "formats/chat/jinja_parser.h"
#include "formats/chat/jinja_render.h"
#include "formats/chat/jinja_value.h"

namespace tessera::formats::chat {
namespace {

namespace fs = std::filesystem;

constexpr uintmax_t kMaxConfigBytes = 64 << 20;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(path, ": ", ec.message()));
  if (size > kMaxConfigBytes) return absl::InvalidArgumentError(absl::StrCat(path, ": larger than 64 MiB"));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<nlohmann::ordered_json> ReadJson(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  auto j = nlohmann::ordered_json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  return j;
}

// A special token as tokenizer_config.json writes it: a string or an AddedToken {"content": ...}.
std::optional<std::string> TokenText(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

// How deep JSON nests (objects and arrays), without recursion.
int JsonDepth(const nlohmann::ordered_json& root) {
  int deepest = 0;
  std::vector<std::pair<const nlohmann::ordered_json*, int>> stack = {{&root, 1}};
  while (!stack.empty()) {
    auto [j, d] = stack.back();
    stack.pop_back();
    if (!j->is_structured()) continue;
    deepest = std::max(deepest, d);
    for (const auto& child : *j) stack.push_back({&child, d + 1});
  }
  return deepest;
}

constexpr int kMaxJsonDepth = 64;

constexpr const char* kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                          "pad_token", "cls_token", "mask_token"};

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(const std::string& source,
                                                 const std::map<std::string, std::string>& special_tokens,
                                                 const std::vector<std::string>& additional_special_tokens) {
  auto body = ParseTemplate(source);
  if (!body.ok()) return absl::Status(body.status().code(), absl::StrCat("chat_template ", body.status().message()));
  ChatTemplate t;
  t.source_ = source;
  t.body_ = std::make_shared<const Body>(*std::move(body));
  t.special_ = special_tokens;
  t.additional_ = additional_special_tokens;
  return t;
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromTokenizerDir(const std::string& path) {
  std::error_code ec;
  const std::string dir = fs::is_directory(path, ec) ? path : fs::path(path).parent_path().string();
  const std::string config_path = (fs::path(dir.empty() ? "." : dir) / "tokenizer_config.json").string();
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (fs::exists(config_path, ec)) {
    auto c = ReadJson(config_path);
    if (!c.ok()) return c.status();
    config = *std::move(c);
  }
  std::string source;
  const std::string jinja_path = (fs::path(dir.empty() ? "." : dir) / "chat_template.jinja").string();
  if (fs::exists(jinja_path, ec)) {
    auto s = ReadFile(jinja_path);
    if (!s.ok()) return s.status();
    source = *std::move(s);
  } else if (config.contains("chat_template")) {
    const auto& ct = config["chat_template"];
    if (ct.is_string()) {
      source = ct.get<std::string>();
    } else if (ct.is_array()) {
      for (const auto& named : ct) {
        if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
            named["template"].is_string()) {
          source = named["template"].get<std::string>();
        }
      }
      if (source.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(config_path, ": chat_template: a list of named templates without one named \"default\""));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(config_path, ": chat_template: must be a string or a list"));
    }
  } else {
    return absl::NotFoundError(absl::StrCat("no chat template: neither ", jinja_path, " nor a chat_template in ",
                                            config_path));
  }
  std::map<std::string, std::string> special;
  std::vector<std::string> additional;
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  const std::string map_path = (fs::path(dir.empty() ? "." : dir) / "special_tokens_map.json").string();
  if (fs::exists(map_path, ec)) {
    auto m = ReadJson(map_path);
    if (!m.ok()) return m.status();
    map = *std::move(m);
  }
  for (const char* name : kSpecialTokens) {
    for (const auto* src : {&config, &map}) {
      if (special.count(name) || !src->contains(name)) continue;
      if (auto text = TokenText((*src)[name])) special[name] = *text;
    }
  }
  for (const auto* src : {&config, &map}) {
    if (!additional.empty() || !src->contains("additional_special_tokens")) continue;
    const auto& list = (*src)["additional_special_tokens"];
    if (!list.is_array()) continue;
    for (const auto& t : list) {
      if (auto text = TokenText(t)) additional.push_back(*text);
    }
  }
  auto t = Parse(source, special, additional);
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat(fs::exists(jinja_path, ec) ? jinja_path : config_path, ": ",
                                                        t.status().message()));
  }
  return t;
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                                 const nlohmann::ordered_json& tools) const {
  for (const auto& [name, j] : std::initializer_list<std::pair<const char*, const nlohmann::ordered_json*>>{
           {"messages", &messages}, {"tools", &tools}}) {
    if (JsonDepth(*j) > kMaxJsonDepth) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": nested deeper than ", kMaxJsonDepth, " levels"));
    }
  }
  Value context = Value::NewDict();
  Dict& c = context.AsDict();
  for (const auto& [name, text] : special_) c.Set(name, Value::String(text));
  if (!additional_.empty()) {
    std::vector<Value> list;
    for (const std::string& t : additional_) list.push_back(Value::String(t));
    c.Set("additional_special_tokens", Value::List(std::move(list)));
  }
  c.Set("messages", Value::FromJson(messages));
  c.Set("tools", Value::FromJson(tools));
  c.Set("documents", Value::None());
  c.Set("add_generation_prompt", Value::Bool(add_generation_prompt));
  auto text = RenderTemplate(*body_, context, limits_);
  if (!text.ok()) return absl::Status(text.status().code(), absl::StrCat("chat_template ", text.status().message()));
  return text;
}

absl::StatusOr<std::string> ChatTemplate::RenderContinuing(const nlohmann::ordered_json& messages,
                                                           const nlohmann::ordered_json& tools) const {
  // transformers' way: a tag is appended to the final text, the whole rendered, and the text cut at
  // the tag (and the whitespace before it, when the template trimmed the tag's own space).
  static constexpr char kTag[] = "CONTINUE_FINAL_MESSAGE_TAG ";
  if (!messages.is_array() || messages.empty() || !messages.back().is_object()) {
    return absl::InvalidArgumentError("messages: the final message to continue must be an object");
  }
  nlohmann::ordered_json tagged = messages;
  nlohmann::ordered_json& content = tagged.back()["content"];
  std::string final_text;
  if (content.is_string()) {
    final_text = content.get<std::string>();
    content = final_text + kTag;
  } else if (content.is_array()) {
    bool found = false;
    for (auto it = content.rbegin(); it != content.rend() && !found; ++it) {
      if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) {
        final_text = (*it)["text"].get<std::string>();
        (*it)["text"] = final_text + kTag;
        found = true;
      }
    }
    if (!found) return absl::InvalidArgumentError("messages: the final message has no text to continue");
  } else {
    return absl::InvalidArgumentError("messages: the final message's content must be a string or a list");
  }
  auto text = Render(tagged, /*add_generation_prompt=*/false, tools);
  if (!text.ok()) return text;
  // Python's str.strip(): the characters str.isspace() is true of, in UTF-8.
  static const char* const kSpaces[] = {" ", "\t", "\n", "\v", "\f", "\r", "\x1c", "\x1d", "\x1e", "\x1f",
                                        "\xc2\x85", "\xc2\xa0", "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81",
                                        "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84", "\xe2\x80\x85",
                                        "\xe2\x80\x86", "\xe2\x80\x87", "\xe2\x80\x88", "\xe2\x80\x89",
                                        "\xe2\x80\x8a", "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf",
                                        "\xe2\x81\x9f", "\xe3\x80\x80"};
  auto space_at_end = [](std::string_view v) -> size_t {  // Bytes of the space ending `v`, 0 if none.
    for (const char* s : kSpaces) {
      const std::string_view sp(s);
      if (v.size() >= sp.size() && v.substr(v.size() - sp.size()) == sp) return sp.size();
    }
    return 0;
  };
  auto space_at_start = [](std::string_view v) -> size_t {
    for (const char* s : kSpaces) {
      const std::string_view sp(s);
      if (v.substr(0, sp.size()) == sp) return sp.size();
    }
    return 0;
  };
  auto rstrip = [&](std::string_view v) {
    while (size_t n = space_at_end(v)) v.remove_suffix(n);
    return v;
  };
  auto strip = [&](std::string_view v) {
    while (size_t n = space_at_start(v)) v.remove_prefix(n);
    return rstrip(v);
  };
  const std::string_view bare_tag = strip(kTag);
  const size_t tag = text->rfind(bare_tag);
  if (text->find(strip(final_text)) == std::string::npos || tag == std::string::npos) {
    return absl::FailedPreconditionError(
        "the chat template drops or rewrites part of the final message, so the text cannot end with it "
        "(continuing a final message)");
  }
  if (text->compare(tag, sizeof(kTag) - 1, kTag) == 0) {
    text->resize(tag);  // The template kept the tag's space: cut exactly.
  } else {
    text->resize(rstrip(std::string_view(*text).substr(0, tag)).size());
  }
  return text;
}

}  // namespace tessera::formats::chat
