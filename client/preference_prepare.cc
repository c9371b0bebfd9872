#include "client/preference_prepare.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

// The texts of a record before tokenization: the prompt, then each completion field's.
struct RecordText {
  std::string prompt;
  std::vector<std::string> completions;
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

// The header's rule: the prompt's rendering, cut to its common prefix with the rendering of prompt +
// each completion in turn; each completion's text that rendering minus the prompt cut so far.
absl::StatusOr<RecordText> RenderConversational(const formats::chat::ChatTemplate& t, const Json& record,
                                                const std::vector<const char*>& fields) {
  const Json& prompt = record["prompt"];
  if (absl::Status s = CheckChatMessages(prompt, "prompt"); !s.ok()) return s;
  for (const char* field : fields) {
    if (absl::Status s = CheckChatMessages(record[field], field); !s.ok()) return s;
  }
  const Json tools = record.contains("tools") ? record["tools"] : Json(nullptr);
  if (!tools.is_null() && !tools.is_array()) return Field("tools", "must be a list");
  absl::StatusOr<std::string> rendered = RenderPromptText(t, prompt, tools);
  if (!rendered.ok()) return rendered.status();
  RecordText out;
  std::string p = *std::move(rendered);
  for (const char* field : fields) {
    auto full = t.Render(Concat(prompt, record[field]), /*add_generation_prompt=*/false, tools);
    if (!full.ok()) return Field(field, absl::StrCat("rendering prompt + ", field, ": ", full.status().message()));
    p.resize(CommonPrefix(p, *full));
    out.completions.push_back(full->substr(p.size()));
  }
  out.prompt = std::move(p);
  return out;
}

absl::StatusOr<RecordText> ReadText(const Json& record, const std::vector<const char*>& fields) {
  RecordText out;
  out.prompt = record["prompt"].get<std::string>();
  for (const char* field : fields) {
    if (!record[field].is_string()) return Field(field, "must be a string, as the prompt is");
    out.completions.push_back(record[field].get<std::string>());
  }
  return out;
}

// A record's prompt and its completion fields' ids, rendered (conversational) or read (text) and
// tokenized apart; a completion with no tokens is refused.
absl::Status TokenizeRecord(const PrepareTokenizer& loaded, const Json& record, const std::vector<const char*>& fields,
                            std::vector<int32_t>* prompt, const std::vector<std::vector<int32_t>*>& completions) {
  absl::StatusOr<RecordText> text = absl::InternalError("");
  if (record["prompt"].is_string()) {
    text = ReadText(record, fields);
  } else if (record["prompt"].is_array()) {
    if (!loaded.chat_template.ok()) {
      return absl::Status(loaded.chat_template.status().code(),
                          absl::StrCat("a conversational record needs the tokenizer's chat template: ",
                                       loaded.chat_template.status().message()));
    }
    text = RenderConversational(*loaded.chat_template, record, fields);
  } else {
    return Field("prompt", "must be a list of messages or a string");
  }
  if (!text.ok()) return text.status();
  if (absl::Status s = loaded.encoder->Encode(text->prompt, prompt); !s.ok()) {
    return Field("prompt", absl::StrCat("the text: ", s.message()));
  }
  for (size_t i = 0; i < fields.size(); ++i) {
    if (absl::Status s = loaded.encoder->Encode(text->completions[i], completions[i]); !s.ok()) {
      return Field(fields[i], absl::StrCat("the text: ", s.message()));
    }
    if (completions[i]->empty()) {
      return Field(fields[i], "has no tokens (an empty completion)");
    }
  }
  return absl::OkStatus();
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
    if (record.contains("completion")) {
      return fail(Field("completion", "a pair has chosen and rejected, not a completion (pairs and single "
                                      "completions do not mix)"));
    }
    for (const char* field : {"prompt", "chosen", "rejected"}) {
      if (!record.contains(field)) return fail(Field(field, "is missing (a pair has prompt, chosen and rejected)"));
    }
    if (record.contains("chat_template_kwargs")) {
      return fail(Field("chat_template_kwargs",
                        "is not supported (TRL passes them to the chat template as variables; tessera does not)"));
    }
    const bool has_margin = record.contains("margin");
    if (has_margin && (!record["margin"].is_number() || !std::isfinite(record["margin"].get<double>()) ||
                       std::abs(record["margin"].get<double>()) > std::numeric_limits<float>::max())) {
      return fail(Field("margin", "must be a finite number within float32's range (the loss is float32)"));
    }
    if (writer == nullptr) {
      auto made = formats::data::PreferenceDatasetWriter::Create(o.output_prefix, loaded->dtype, has_margin);
      if (!made.ok()) return made.status();
      writer = *std::move(made);
      report.margins = has_margin;
      margins_from = where.substr(0, where.rfind(':'));  // "FILE:LINE" of "FILE:LINE: ".
    } else if (has_margin != report.margins) {
      return fail(Field("margin", absl::StrCat("every record has a margin or none does; the first record (",
                                               margins_from, ") ", report.margins ? "has one" : "has none")));
    }
    formats::data::PreferencePair pair;
    if (absl::Status s = TokenizeRecord(*loaded, record, {"chosen", "rejected"}, &pair.prompt,
                                        {&pair.chosen, &pair.rejected});
        !s.ok()) {
      return fail(s);
    }
    // The same completion twice (whatever its JSON's key order or the fields its template ignores).
    if (pair.chosen == pair.rejected) {
      return fail(absl::InvalidArgumentError(
          "chosen and rejected are the same completion (the same tokens): a pair prefers one of two different ones"));
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
  if (writer == nullptr || report.pairs == 0) {
    return absl::InvalidArgumentError(absl::StrCat(absl::StrJoin(o.inputs, ", "), ": ",
                                                   o.inputs.size() == 1 ? "holds" : "hold",
                                                   " no pairs (one JSON object per line: prompt, chosen, rejected)"));
  }
  if (absl::Status s = writer->Finish(); !s.ok()) return s;
  report.tokens = writer->tokens();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

absl::StatusOr<bool> HoldsCompletions(const std::string& path) {
  bool completions = false, seen = false;
  absl::Status read = ForEachJsonRecord({path}, [&](const Json& record, const std::string&) -> absl::Status {
    completions = record.contains("completion");
    seen = true;
    return absl::CancelledError();  // The first record decides.
  });
  if (!seen && !read.ok()) return read;
  return completions;
}

absl::StatusOr<std::vector<CompletionTokens>> PrepareCompletions(const std::vector<std::string>& inputs,
                                                                 const std::string& tokenizer) {
  auto loaded = LoadPrepareTokenizer(tokenizer);
  if (!loaded.ok()) return loaded.status();
  std::vector<CompletionTokens> out;
  absl::Status read = ForEachJsonRecord(inputs, [&](const Json& record, const std::string& where) -> absl::Status {
    auto fail = [&](const absl::Status& s) { return absl::Status(s.code(), where + std::string(s.message())); };
    if (record.contains("chosen") || record.contains("rejected")) {
      return fail(Field(record.contains("chosen") ? "chosen" : "rejected",
                        "a record of single completions has none (pairs and single completions do not mix)"));
    }
    for (const char* field : {"prompt", "completion"}) {
      if (!record.contains(field)) return fail(Field(field, "is missing (a record has a prompt and a completion)"));
    }
    if (record.contains("chat_template_kwargs")) {
      return fail(Field("chat_template_kwargs", "is not supported"));
    }
    CompletionTokens row;
    if (absl::Status s = TokenizeRecord(*loaded, record, {"completion"}, &row.prompt, {&row.completion}); !s.ok()) {
      return fail(s);
    }
    row.where = where;
    out.push_back(std::move(row));
    return absl::OkStatus();
  });
  if (!read.ok()) return read;
  if (out.empty()) return absl::InvalidArgumentError("the inputs hold no records");
  return out;
}

}  // namespace tessera::client
