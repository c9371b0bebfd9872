#include "client/chat_prepare.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/jsonl_records.h"
#include "client/prepare_tokenizer.h"
#include "formats/chat/chat_template.h"
#include "formats/data/indexed_dataset.h"
#include "formats/data/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tessera::client {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using Span = std::pair<size_t, size_t>;

// The text of a record and the byte ranges of it that are trained on.
struct Rendered {
  std::string text;
  std::vector<Span> trained;
};

absl::Status Field(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::StatusOr<Rendered> RenderConversation(const formats::chat::ChatTemplate& t, const Json& record) {
  const Json& messages = record["messages"];
  if (absl::Status s = CheckChatMessages(messages, "messages"); !s.ok()) return s;
  const Json tools = record.contains("tools") ? record["tools"] : Json(nullptr);
  if (!tools.is_null() && !tools.is_array()) return Field("tools", "must be a list");
  Rendered r;
  auto full = t.Render(messages, /*add_generation_prompt=*/false, tools);
  if (!full.ok()) return full.status();
  r.text = *std::move(full);
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i]["role"] != "assistant") continue;
    const std::string field = absl::StrCat("messages[", i, "]");
    Json before = Json::array(), through = Json::array();
    for (size_t k = 0; k < i; ++k) before.push_back(messages[k]);
    through = before;
    through.push_back(messages[i]);
    auto prompt = t.Render(before, /*add_generation_prompt=*/true, tools);
    if (!prompt.ok()) {
      return Field(field, absl::StrCat("rendering the conversation before it with the generation prompt: ",
                                       prompt.status().message()));
    }
    auto turn = t.Render(through, /*add_generation_prompt=*/false, tools);
    if (!turn.ok()) return Field(field, absl::StrCat("rendering the conversation up to it: ", turn.status().message()));
    if (turn->compare(0, prompt->size(), *prompt) != 0 || r.text.compare(0, turn->size(), *turn) != 0) {
      return Field(field, "the chat template renders the earlier turns differently once this one or later ones "
                          "follow, so the assistant's part of the text cannot be told (an assistant turn is what "
                          "rendering messages[:i+1] adds to messages[:i] with the generation prompt)");
    }
    if (turn->size() > prompt->size()) r.trained.push_back({prompt->size(), turn->size()});
  }
  return r;
}

absl::StatusOr<Rendered> RenderCompletion(const Json& record, const std::string& eos) {
  if (!record["prompt"].is_string()) return Field("prompt", "must be a string");
  if (!record.contains("completion") || !record["completion"].is_string()) return Field("completion", "must be a string");
  Rendered r;
  r.text = record["prompt"].get<std::string>();
  const size_t begin = r.text.size();
  r.text += record["completion"].get<std::string>() + eos;
  if (r.text.size() > begin) r.trained.push_back({begin, r.text.size()});
  return r;
}

}  // namespace

absl::StatusOr<ChatPrepareReport> PrepareChat(const ChatPrepareOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  auto loaded = LoadPrepareTokenizer(o.tokenizer);
  if (!loaded.ok()) return loaded.status();
  const auto& encoder = loaded->encoder;  // The rendering spells the special tokens.
  const auto& tmpl = loaded->chat_template;
  const bool have_template = tmpl.ok();
  const std::string& eos = loaded->eos;  // For prompt/completion records.
  std::error_code ec;
  if (const fs::path parent = fs::path(o.output_prefix).parent_path(); !parent.empty()) {
    fs::create_directories(parent, ec);  // A failure shows as the writer's error below.
  }
  const formats::data::IndexedDtype dtype = loaded->dtype;
  auto writer = formats::data::IndexedDatasetWriter::Create(o.output_prefix, dtype);
  if (!writer.ok()) return writer.status();
  const std::string mask_path = o.output_prefix + ".sft.mask", json_path = o.output_prefix + ".sft.json";
  const std::string mask_tmp = mask_path + ".tmp", json_tmp = json_path + ".tmp";
  std::remove(json_path.c_str());  // The dataset is complete again only when this run finishes.
  std::ofstream mask(mask_tmp, std::ios::binary | std::ios::trunc);
  if (!mask) return absl::InvalidArgumentError(absl::StrCat(mask_tmp, ": cannot write"));
  struct RemoveTemps {
    std::string a, b;
    ~RemoveTemps() { std::remove(a.c_str()), std::remove(b.c_str()); }
  } remove_temps{mask_tmp, json_tmp};

  ChatPrepareReport report;
  report.dtype = formats::data::IndexedDtypeName(dtype);
  const bool tty = isatty(STDERR_FILENO);
  auto last_print = start;
  std::vector<int32_t> ids;
  std::vector<std::pair<size_t, size_t>> offsets;
  std::string flags;
  absl::Status read = ForEachJsonRecord(o.inputs, [&](const Json& record, const std::string& where) -> absl::Status {
    absl::StatusOr<Rendered> r = absl::InvalidArgumentError("a record needs \"messages\", or \"prompt\" and \"completion\"");
    if (record.contains("messages")) {
      if (!have_template) return absl::Status(tmpl.status().code(), where + std::string(tmpl.status().message()));
      r = RenderConversation(*tmpl, record);
    } else if (record.contains("prompt")) {
      r = RenderCompletion(record, eos);
    }
    if (!r.ok()) return absl::Status(r.status().code(), where + std::string(r.status().message()));
    ids.clear();
    offsets.clear();
    if (absl::Status s = encoder->EncodeWithOffsets(r->text, &ids, &offsets); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "the rendered text: ", s.message()));
    }
    if (ids.empty()) return absl::InvalidArgumentError(absl::StrCat(where, "the rendered text has no tokens"));
    flags.assign(ids.size(), '\0');
    int64_t trained = 0;
    for (size_t k = 0; k < ids.size(); ++k) {
      for (const Span& s : r->trained) {
        if (offsets[k].first >= s.first && offsets[k].second <= s.second) {
          flags[k] = 1;
          ++trained;
          break;
        }
      }
    }
    if (absl::Status s = (*writer)->AddDocument(ids); !s.ok()) return s;
    mask.write(flags.data(), static_cast<std::streamsize>(flags.size()));
    ++report.conversations;
    report.trained_tokens += trained;
    if (trained == 0) ++report.without_trained;
    const auto now = std::chrono::steady_clock::now();
    if (o.progress && now - last_print > std::chrono::seconds(tty ? 1 : 10)) {
      last_print = now;
      std::cerr << (tty ? "\r" : "") << "preparing: " << report.conversations << " conversations"
                << (tty ? "" : "\n") << std::flush;
    }
    return absl::OkStatus();
  });
  if (!read.ok()) return read;
  if (o.progress && tty) std::cerr << "\n";
  if (report.conversations == 0) return absl::InvalidArgumentError("the inputs hold no conversations");
  mask.close();
  if (!mask) return absl::InternalError(absl::StrCat(mask_tmp, ": write failed"));
  report.tokens = (*writer)->tokens();
  Json meta = Json::object();
  meta["format"] = "tessera-sft";
  meta["version"] = 1;
  meta["conversations"] = report.conversations;
  meta["tokens"] = report.tokens;
  meta["trained_tokens"] = report.trained_tokens;
  {
    std::ofstream js(json_tmp, std::ios::trunc);
    js << meta.dump(2) << "\n";
    if (!js) return absl::InternalError(absl::StrCat(json_tmp, ": write failed"));
  }
  // The mask and the tokens first; the metadata, which marks the dataset complete, last.
  if (std::rename(mask_tmp.c_str(), mask_path.c_str()) != 0) return absl::InternalError(absl::StrCat(mask_path, ": rename failed"));
  if (absl::Status s = (*writer)->Finish(); !s.ok()) return s;
  if (std::rename(json_tmp.c_str(), json_path.c_str()) != 0) return absl::InternalError(absl::StrCat(json_path, ": rename failed"));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace tessera::client
