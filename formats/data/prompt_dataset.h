// Prompt datasets (docs/data-format.md "Prompt datasets"): the prompts a reinforcement-learning job
// samples completions for (issue 57), as `tessera data prepare --prompts` writes them. Four files; the
// dataset is complete when PREFIX.prompts.json exists:
//   PREFIX.bin + PREFIX.idx   a Megatron indexed dataset, one document of one sequence per prompt: its
//                             tokens (the chat template's rendering with the generation prompt);
//   PREFIX.fields.jsonl       one JSON object per prompt, in order: the record's other fields (what
//                             the rewards read: an `answer`, a test case) and "prompt_text", the
//                             rendered prompt the rewards see;
//   PREFIX.tokenizer.json     the tokenizer that rendered them (a copy): the job decodes its completions
//                             with it for the rewards;
//   PREFIX.prompts.json       {"format": "tessera-prompts", "version": 2, "prompts": N, "tokens": T,
//                             "stop_token": the tokenizer's EOS id (absent: none)}.
// No torch.
#ifndef TESSERA_FORMATS_DATA_PROMPT_DATASET_H_
#define TESSERA_FORMATS_DATA_PROMPT_DATASET_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/data/indexed_dataset.h"
#include "formats/data/mapped_indexed_dataset.h"
#include "nlohmann/json.hpp"

namespace tessera::formats::data {

struct PromptRow {
  std::vector<int32_t> ids;
  std::string text;                                  // The rendered prompt.
  nlohmann::json fields = nlohmann::json::object();  // The record's other fields.
};

class PromptDatasetWriter {
 public:
  static absl::StatusOr<std::unique_ptr<PromptDatasetWriter>> Create(const std::string& prefix, IndexedDtype dtype);
  ~PromptDatasetWriter();  // Before Finish: removes what it wrote.
  // InvalidArgument for a prompt without tokens, or fields that are not an object.
  absl::Status Add(const PromptRow& row);
  // The tokenizer's JSON (tokenizer.json's bytes) and its EOS id (-1: none), written by Finish.
  void set_tokenizer(std::string json, int64_t stop_token) {
    tokenizer_json_ = std::move(json);
    stop_token_ = stop_token;
  }
  absl::Status Finish();  // PREFIX.prompts.json last.
  int64_t prompts() const { return prompts_; }
  int64_t tokens() const { return tokens_->tokens(); }

 private:
  PromptDatasetWriter(std::string prefix, std::unique_ptr<IndexedDatasetWriter> tokens, std::FILE* fields);
  std::string prefix_;
  std::unique_ptr<IndexedDatasetWriter> tokens_;
  std::FILE* fields_;
  int64_t prompts_ = 0;
  bool finished_ = false;
  std::string tokenizer_json_;
  int64_t stop_token_ = -1;
};

class PromptDataset {
 public:
  // Reads and checks the four files (one document per prompt, as many as the .json says, one fields
  // line per prompt, each a JSON object with a string prompt_text); errors name the file and the
  // prompt or line. Ids must be below `vocab` (checked as rows are read).
  static absl::StatusOr<std::unique_ptr<PromptDataset>> Open(const std::string& prefix, int64_t vocab);
  ~PromptDataset();
  int64_t prompts() const { return static_cast<int64_t>(field_offsets_.size()); }
  // Prompt `i`: its ids, rendered text and fields.
  absl::StatusOr<PromptRow> Row(int64_t i) const;
  // Prompt `i`'s token count (0 <= i < prompts()).
  int64_t length(int64_t i) const;
  // The EOS id of the tokenizer that prepared it (-1: it has none), and that tokenizer's file.
  int64_t stop_token() const { return stop_token_; }
  std::string tokenizer_path() const { return prefix_ + ".tokenizer.json"; }
  // That file's bytes: a regular file of at most 1 GiB (a FIFO or device there is refused, not read).
  absl::StatusOr<std::string> ReadTokenizerJson() const;

 private:
  PromptDataset(std::string prefix, int64_t vocab) : prefix_(std::move(prefix)), vocab_(vocab) {}
  std::string prefix_;
  int64_t vocab_;
  std::unique_ptr<MappedIndexedDataset> tokens_;
  int fields_fd_ = -1;
  std::vector<int64_t> field_offsets_;  // Start of each prompt's line, and the end after the last.
  int64_t fields_end_ = 0;
  int64_t stop_token_ = -1;
};

}  // namespace tessera::formats::data

#endif  // TESSERA_FORMATS_DATA_PROMPT_DATASET_H_
