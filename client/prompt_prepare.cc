#include "client/prompt_prepare.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "client/jsonl_records.h"
#include "client/prepare_tokenizer.h"
#include "formats/data/prompt_dataset.h"

namespace tessera::client {

absl::StatusOr<PromptPrepareReport> PreparePrompts(const PromptPrepareOptions& o) {
  using Json = nlohmann::ordered_json;
  const auto start = std::chrono::steady_clock::now();
  auto loaded = LoadPrepareTokenizer(o.tokenizer);
  if (!loaded.ok()) return loaded.status();
  std::error_code ec;
  if (const std::filesystem::path parent = std::filesystem::path(o.output_prefix).parent_path(); !parent.empty()) {
    std::filesystem::create_directories(parent, ec);  // A failure shows as the writer's error below.
  }
  auto writer = formats::data::PromptDatasetWriter::Create(o.output_prefix, loaded->dtype);
  if (!writer.ok()) return writer.status();
  PromptPrepareReport report;
  report.dtype = formats::data::IndexedDtypeName(loaded->dtype);
  const bool tty = isatty(STDERR_FILENO);
  auto last_print = start;
  absl::Status read = ForEachJsonRecord(o.inputs, [&](const Json& record, const std::string& where) -> absl::Status {
    auto fail = [&](const absl::Status& s) { return absl::Status(s.code(), where + std::string(s.message())); };
    if (!record.contains("prompt")) return fail(absl::InvalidArgumentError("prompt: is missing"));
    if (record.contains("chat_template_kwargs")) {
      return fail(absl::InvalidArgumentError(
          "chat_template_kwargs: is not supported (TRL passes them to the chat template as variables; tessera does not)"));
    }
    const Json& prompt = record["prompt"];
    formats::data::PromptRow row;
    if (prompt.is_string()) {
      row.text = prompt.get<std::string>();
    } else if (prompt.is_array()) {
      if (absl::Status s = CheckChatMessages(prompt, "prompt"); !s.ok()) return fail(s);
      if (!loaded->chat_template.ok()) {
        return fail(absl::Status(loaded->chat_template.status().code(),
                                 absl::StrCat("a conversational prompt needs the tokenizer's chat template: ",
                                              loaded->chat_template.status().message())));
      }
      // As GRPOTrainer: the prompt alone (a record's "tools" is a field like any other).
      auto text = RenderPromptText(*loaded->chat_template, prompt, nullptr);
      if (!text.ok()) return fail(text.status());
      row.text = *std::move(text);
    } else {
      return fail(absl::InvalidArgumentError("prompt: must be a list of messages or a string"));
    }
    if (absl::Status s = loaded->encoder->Encode(row.text, &row.ids); !s.ok()) {
      return fail(absl::InvalidArgumentError(absl::StrCat("prompt: the text: ", s.message())));
    }
    if (row.ids.empty()) return fail(absl::InvalidArgumentError("prompt: has no tokens"));
    if (record.contains("prompt_text")) {
      return fail(absl::InvalidArgumentError("prompt_text: is a name the dataset keeps for the rendered prompt; rename it"));
    }
    row.fields = nlohmann::json::object();
    for (auto it = record.begin(); it != record.end(); ++it) {
      if (it.key() != "prompt") row.fields[it.key()] = nlohmann::json::parse(it.value().dump());
    }
    if (absl::Status s = (*writer)->Add(row); !s.ok()) return fail(s);
    ++report.prompts;
    report.longest = std::max<int64_t>(report.longest, static_cast<int64_t>(row.ids.size()));
    const auto now = std::chrono::steady_clock::now();
    if (o.progress && now - last_print > std::chrono::seconds(tty ? 1 : 10)) {
      last_print = now;
      std::cerr << (tty ? "\r" : "") << "preparing: " << report.prompts << " prompts" << (tty ? "" : "\n") << std::flush;
    }
    return absl::OkStatus();
  });
  if (!read.ok()) return read;
  if (o.progress && tty) std::cerr << "\n";
  if (report.prompts == 0) return absl::InvalidArgumentError("the inputs hold no prompts");
  // The job decodes its completions with the same tokenizer, and stops a completion at its EOS
  // (GRPOTrainer's eos_token_id).
  int64_t stop = -1;
  if (!loaded->eos.empty()) {
    stop = loaded->tokenizer->TokenId(loaded->eos);
    if (stop < 0) {
      return absl::InvalidArgumentError(absl::StrCat(loaded->json_path, ": the eos_token \"", loaded->eos,
                                                     "\" of tokenizer_config.json is not one of its tokens"));
    }
  }
  std::ifstream json(loaded->json_path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(json)), std::istreambuf_iterator<char>());
  if (!json && !json.eof()) return absl::InvalidArgumentError(absl::StrCat(loaded->json_path, ": cannot be read"));
  (*writer)->set_tokenizer(std::move(bytes), stop);
  if (absl::Status s = (*writer)->Finish(); !s.ok()) return s;
  report.tokens = (*writer)->tokens();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace tessera::client
