// Preference datasets (docs/data-format.md "Preference datasets"): pairs of completions of one prompt,
// the chosen one preferred to the rejected one, as `tessera data prepare --preference` writes them.
// Four files (five with margins); the dataset is complete when PREFIX.pref.json exists:
//   PREFIX.bin + PREFIX.idx   a Megatron indexed dataset (indexed_dataset.h) with three documents per
//                             pair, in pair order: the prompt's tokens, the chosen completion's, the
//                             rejected completion's (TRL's prompt_input_ids, chosen_input_ids and
//                             rejected_input_ids, without the EOS TRL appends);
//   PREFIX.pref.margin        with margins only: one float64 (little-endian) per pair;
//   PREFIX.pref.json          {"format": "tessera-preference", "version": 1, "pairs": N, "tokens": T,
//                             "margins": true|false}.
// A pair's completions are never empty; its prompt may be (a text record with an empty prompt). No torch.
#ifndef TESSERA_FORMATS_DATA_PREFERENCE_DATASET_H_
#define TESSERA_FORMATS_DATA_PREFERENCE_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/data/indexed_dataset.h"

namespace tessera::formats::data {

struct PreferencePair {
  std::vector<int32_t> prompt;
  std::vector<int32_t> chosen;
  std::vector<int32_t> rejected;
  double margin = 0;  // 0 in a dataset without margins.
};

// How a pair is cut to size when it is read (data.max_prompt_tokens, data.max_completion_tokens; 0:
// not cut): the prompt keeps its last max_prompt tokens, each completion its first max_completion —
// TRL's DPOTrainer.tokenize_row.
struct PreferenceTruncation {
  int64_t max_prompt = 0;
  int64_t max_completion = 0;

  void CutPrompt(std::vector<int32_t>* prompt) const {
    if (max_prompt > 0 && static_cast<int64_t>(prompt->size()) > max_prompt) {
      prompt->erase(prompt->begin(), prompt->end() - max_prompt);
    }
  }
  void CutCompletion(std::vector<int32_t>* completion) const {
    if (max_completion > 0 && static_cast<int64_t>(completion->size()) > max_completion) {
      completion->resize(static_cast<size_t>(max_completion));
    }
  }
};

class PreferenceDatasetWriter {
 public:
  // dtype: uint16 or int32 (IndexedDtypeForVocab). `margins`: whether every pair has one.
  static absl::StatusOr<std::unique_ptr<PreferenceDatasetWriter>> Create(const std::string& prefix, IndexedDtype dtype,
                                                                         bool margins);
  ~PreferenceDatasetWriter();  // Before Finish: removes what it wrote (no half dataset).
  // InvalidArgument when a completion is empty or an id does not fit the dtype.
  absl::Status Add(const PreferencePair& pair);
  // Renames everything into place, PREFIX.pref.json last.
  absl::Status Finish();
  int64_t pairs() const { return pairs_; }
  int64_t tokens() const { return tokens_->tokens(); }

 private:
  PreferenceDatasetWriter(std::string prefix, bool margins, std::unique_ptr<IndexedDatasetWriter> tokens);
  std::string prefix_;
  bool margins_;
  std::unique_ptr<IndexedDatasetWriter> tokens_;
  std::vector<double> margin_values_;
  int64_t pairs_ = 0;
  bool finished_ = false;
};

class PreferenceDataset {
 public:
  // Reads and checks PREFIX.pref.json, PREFIX.idx against PREFIX.bin (three documents of one sequence
  // per pair, as many pairs as the .json says, no empty completion) and the margins' size; errors
  // name the file and what is wrong. Every id must be below `vocab` (checked as pairs are read).
  static absl::StatusOr<std::unique_ptr<PreferenceDataset>> Open(const std::string& prefix, int64_t vocab);
  ~PreferenceDataset();

  int64_t pairs() const { return pairs_; }
  int64_t tokens() const { return index_.num_tokens; }
  bool has_margins() const { return !margins_.empty(); }
  // Pair `i`'s margin (0 <= i < pairs(); 0 without margins), as stored: the reader checks it is finite.
  double margin(int64_t i) const { return margins_.empty() ? 0 : margins_[static_cast<size_t>(i)]; }
  // Pair `i` (0 <= i < pairs()), cut as `cut` says. DataLoss naming the pair on an id >= vocab.
  absl::StatusOr<PreferencePair> Pair(int64_t i, const PreferenceTruncation& cut = {}) const;

 private:
  PreferenceDataset(std::string prefix, int64_t vocab) : prefix_(std::move(prefix)), vocab_(vocab) {}
  absl::StatusOr<std::vector<int32_t>> Sequence(int64_t s) const;

  std::string prefix_;
  int64_t vocab_;
  int64_t pairs_ = 0;
  IndexedDatasetIndex index_;
  const uint8_t* map_ = nullptr;  // PREFIX.bin.
  size_t map_size_ = 0;
  std::vector<double> margins_;
};

}  // namespace tessera::formats::data

#endif  // TESSERA_FORMATS_DATA_PREFERENCE_DATASET_H_
