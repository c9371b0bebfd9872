#include "client/preference_prepare.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "client/jsonl_records.h"
#include "client/prepare_tokenizer.h"
#include "formats/data/preference_dataset.h"

namespace tessera::client {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

absl::Status Field(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// The texts of a record before tokenization.
struct PairText {
  std::string prompt, chosen, rejected;
};

// The length of the longest common prefix of `a` and `b` in whole characters (TRL compares Python
// strings, so a prefix never ends inside a UTF-8 sequence).
size_t CommonPrefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  auto continuation = [](const std::string& s, size_t i) {
    return i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80;
  };
  while (n > 0 && (continuation(a, n) || continuation(b, n))) --n;
  return n;
}

Json Concat(const Json& a, const Json& b) {
  Json out = a;
  for (const Json& m : b) out.push_back(m);
  return out;
}

absl::StatusOr<PairText> RenderConversational(const formats::chat::ChatTemplate& t, const Json& record) {
  const Json& prompt = record["prompt"];
  for (const char* field : {"prompt", "chosen", "rejected"}) {
    if (absl::Status s = CheckChatMessages(record[field], field); !s.ok()) return s;
  }
  const Json tools = record.contains("tools") ? record["tools"] : Json(nullptr);
  if (!tools.is_null() && !tools.is_array()) return Field("tools", "must be a list");
  absl::StatusOr<std::string> rendered = RenderPromptText(t, prompt, tools);
  if (!rendered.ok()) return rendered.status();
  PairText out;
  std::string p = *std::move(rendered);
  for (const char* field : {"chosen", "rejected"}) {
    auto full = t.Render(Concat(prompt, record[field]), /*add_generation_prompt=*/false, tools);
    if (!full.ok()) return Field(field, absl::StrCat("rendering prompt + ", field, ": ", full.status().message()));
    p.resize(CommonPrefix(p, *full));
    (std::string(field) == "chosen" ? out.chosen : out.rejected) = full->substr(p.size());
  }
  out.prompt = std::move(p);
  return out;
}

absl::StatusOr<PairText> ReadText(const Json& record) {
  PairText out;
  for (const char* field : {"chosen", "rejected"}) {
    if (!record[field].is_string()) return Field(field, "must be a string, as the prompt is");
  }
  out.prompt = record["prompt"].get<std::string>();
  out.chosen = record["chosen"].get<std::string>();
  out.rejected = record["rejected"].get<std::string>();
  return out;
}

}  // namespace

absl::StatusOr<PreferencePrepareReport> PreparePreference(const PreferencePrepareOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  auto loaded = LoadPrepareTokenizer(o.tokenizer);
  if (!loaded.ok()) return loaded.status();
  std::error_code ec;
  if (const fs::path parent = fs::path(o.output_prefix).parent_path(); !parent.empty()) {
    fs::create_directories(parent, ec);  // A failure shows as the writer's error below.
  }
  PreferencePrepareReport report;
  report.dtype = formats::data::IndexedDtypeName(loaded->dtype);
  std::unique_ptr<formats::data::PreferenceDatasetWriter> writer;  // Made at the first record (margins or not).
  std::string margins_from;  // Where the first record was: the place that decided.
  const bool tty = isatty(STDERR_FILENO);
  auto last_print = start;
  absl::Status read = ForEachJsonRecord(o.inputs, [&](const Json& record, const std::string& where) -> absl::Status {
    auto fail = [&](const absl::Status& s) { return absl::Status(s.code(), where + std::string(s.message())); };
    for (const char* field : {"prompt", "chosen", "rejected"}) {
      if (!record.contains(field)) return fail(Field(field, "is missing (a pair has prompt, chosen and rejected)"));
    }
    if (record.contains("chat_template_kwargs")) {
      return fail(Field("chat_template_kwargs",
                        "is not supported (TRL passes them to the chat template as variables; tessera does not)"));
    }
    if (record["chosen"] == record["rejected"]) {
      return fail(absl::InvalidArgumentError("chosen and rejected are the same: a pair prefers one of two different completions"));
    }
    const bool has_margin = record.contains("margin");
    if (has_margin && (!record["margin"].is_number() || !std::isfinite(record["margin"].get<double>()))) {
      return fail(Field("margin", "must be a finite number"));
    }
    if (writer == nullptr) {
      auto made = formats::data::PreferenceDatasetWriter::Create(o.output_prefix, loaded->dtype, has_margin);
      if (!made.ok()) return made.status();
      writer = *std::move(made);
      report.margins = has_margin;
      margins_from = where;
    } else if (has_margin != report.margins) {
      return fail(Field("margin", absl::StrCat("every record has a margin or none does; the first record (",
                                               margins_from, " ) ", report.margins ? "has one" : "has none")));
    }
    absl::StatusOr<PairText> text = absl::InternalError("");
    if (record["prompt"].is_string()) {
      text = ReadText(record);
    } else if (record["prompt"].is_array()) {
      if (!loaded->chat_template.ok()) {
        return fail(absl::Status(loaded->chat_template.status().code(),
                                 absl::StrCat("a conversational record needs the tokenizer's chat template: ",
                                              loaded->chat_template.status().message())));
      }
      text = RenderConversational(*loaded->chat_template, record);
    } else {
      return fail(Field("prompt", "must be a list of messages or a string"));
    }
    if (!text.ok()) return fail(text.status());
    formats::data::PreferencePair pair;
    const std::pair<const char*, std::pair<const std::string*, std::vector<int32_t>*>> parts[] = {
        {"prompt", {&text->prompt, &pair.prompt}},
        {"chosen", {&text->chosen, &pair.chosen}},
        {"rejected", {&text->rejected, &pair.rejected}}};
    for (const auto& [field, io] : parts) {
      if (absl::Status s = loaded->encoder->Encode(*io.first, io.second); !s.ok()) {
        return fail(Field(field, absl::StrCat("the text: ", s.message())));
      }
    }
    for (const char* field : {"chosen", "rejected"}) {
      if ((std::string(field) == "chosen" ? pair.chosen : pair.rejected).empty()) {
        return fail(Field(field, "has no tokens (an empty completion: nothing to prefer)"));
      }
    }
    if (has_margin) pair.margin = record["margin"].get<double>();
    if (absl::Status s = writer->Add(pair); !s.ok()) return fail(s);
    ++report.pairs;
    report.prompt_tokens += static_cast<int64_t>(pair.prompt.size());
    report.completion_tokens += static_cast<int64_t>(pair.chosen.size() + pair.rejected.size());
    const auto now = std::chrono::steady_clock::now();
    if (o.progress && now - last_print > std::chrono::seconds(tty ? 1 : 10)) {
      last_print = now;
      std::cerr << (tty ? "\r" : "") << "preparing: " << report.pairs << " pairs" << (tty ? "" : "\n") << std::flush;
    }
    return absl::OkStatus();
  });
  if (!read.ok()) return read;
  if (o.progress && tty) std::cerr << "\n";
  if (writer == nullptr || report.pairs == 0) return absl::InvalidArgumentError("the inputs hold no pairs");
  if (absl::Status s = writer->Finish(); !s.ok()) return s;
  report.tokens = writer->tokens();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace tessera::client
