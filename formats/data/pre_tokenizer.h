// The pre-tokenizer of a byte-level tokenizer.json: Split steps (a regex, Isolated or Removed) and a
// final ByteLevel step (optional prefix space; optional split by GPT-2's regex), applied in order to
// every piece, as the `tokenizers` library applies a Sequence. Pieces stay raw bytes: the byte-level
// alphabet is the BPE model's business.
#ifndef TESSERA_FORMATS_DATA_PRE_TOKENIZER_H_
#define TESSERA_FORMATS_DATA_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/data/regex.h"

namespace tessera::formats::data {

// What a Split step keeps: matches and the text between them as separate pieces (Isolated), or only
// the text between matches (Removed).
enum class SplitBehavior { kIsolated, kRemoved };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel };
  Kind kind = Kind::kSplit;
  std::shared_ptr<const Regex> regex;  // Split's pattern; ByteLevel's GPT-2 regex, or null (no split).
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;                 // Split: the pattern marks what to keep, not the delimiters.
  bool add_prefix_space = false;       // ByteLevel: a piece not starting with ' ' gets one.
};

// The regex the `tokenizers` library's ByteLevel pre-tokenizer splits with (Oniguruma syntax).
inline constexpr char kGpt2SplitPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}

  // Per-thread matchers.
  class State {
   private:
    friend class PreTokenizer;
    std::vector<std::unique_ptr<Regex::Matcher>> matchers;
    std::vector<std::pair<size_t, size_t>> spans;
  };
  std::unique_ptr<State> NewState() const;

  // Replaces `pieces` by the pieces of `text` (valid UTF-8; empty pieces are dropped).
  absl::Status Split(std::string_view text, State* state, std::vector<std::string>* pieces) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

}  // namespace tessera::formats::data

#endif  // TESSERA_FORMATS_DATA_PRE_TOKENIZER_H_
