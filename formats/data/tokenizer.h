// A byte-level BPE tokenizer read from a transformers tokenizer.json (GPT-2, Llama 3, Qwen2 and every
// tokenizer trained by the `tokenizers` library as byte-level BPE). No LibTorch.
//
// Encode(text) gives the ids of the `tokenizers` library's `encode(text, add_special_tokens=False)`
// with `encode_special_tokens = True`: added tokens marked special (<|endoftext|>, <|begin_of_text|>,
// ...) are never produced from text, even when the text spells them; other added tokens are matched
// in the text, longest first. An encoder made with `match_special` matches the special tokens too, as
// transformers' `tokenizer(text, add_special_tokens=False)` does (a rendered chat template spells its
// turn markers as text). Post-processors (BOS/EOS templates) are not applied: callers add such
// ids themselves. Supported: normalizer none or NFC (nfc.h); pre-tokenizer ByteLevel, or a Sequence of Split steps
// ending in ByteLevel; model BPE without dropout, byte fallback or subword affixes. Anything else is
// refused with the field named. Text must be valid UTF-8; otherwise Encode fails naming the offset.
#ifndef TESSERA_FORMATS_DATA_TOKENIZER_H_
#define TESSERA_FORMATS_DATA_TOKENIZER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "formats/data/bpe_model.h"
#include "formats/data/pre_tokenizer.h"

namespace tessera::formats::data {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  // Matched in the normalized text (true, the library's default for non-special tokens) or in the
  // text as given (false). As the library: the text is first split at the latter, then each piece
  // is normalized and split at the former.
  bool normalized = true;
};

enum class Normalization { kNone, kNfc };

class Tokenizer {
 public:
  // Reads `path` (a tokenizer.json). Errors name the file and the JSON field.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  // The same from the file's text; `name` prefixes errors.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json, const std::string& name);

  // Per-thread encoding state (regex matchers, word cache). The Tokenizer itself is shared.
  class Encoder {
   public:
    // Appends the ids of `text`. Fails on invalid UTF-8 ("byte N: invalid UTF-8").
    absl::Status Encode(std::string_view text, std::vector<int32_t>* ids);
    // The same ids, and for each the bytes of `text` it stands for, [begin, end): an added token its
    // match; a vocabulary token its bytes; where NFC changed the text, the whole run of text between
    // two ASCII characters that the normalisation rewrote (a token inside it gets that run's range);
    // a prefix space the pre-tokenizer added belongs to the token that starts there. Consecutive
    // tokens' ranges never overlap except inside such a rewritten run.
    absl::Status EncodeWithOffsets(std::string_view text, std::vector<int32_t>* ids,
                                   std::vector<std::pair<size_t, size_t>>* offsets);
    // The pre-tokenizer's pieces of `text` in the byte-level alphabet, as the library's
    // `pre_tokenizer.pre_tokenize_str` gives them (added tokens are not looked for).
    absl::Status Pieces(std::string_view text, std::vector<std::string>* pieces);

   private:
    friend class Tokenizer;
    Encoder(const Tokenizer* tokenizer, bool match_special);
    // Splits `text` at the added tokens matched with `normalized` (appending their ids) and hands
    // each piece between them to `piece`.
    absl::Status SplitAtAdded(std::string_view text, bool normalized, std::vector<int32_t>* ids,
                              const std::function<absl::Status(std::string_view)>& piece);
    absl::Status EncodeSegment(std::string_view segment, std::vector<int32_t>* ids);
    // EncodeSegment of `segment`, which starts at byte `base` of the (normalised) text, appending the
    // [begin, end) of each token in that text.
    absl::Status EncodeSegmentAt(std::string_view segment, size_t base, std::vector<int32_t>* ids,
                                 std::vector<std::pair<size_t, size_t>>* offsets);
    const Tokenizer* tokenizer_;
    const bool match_special_;
    std::unique_ptr<PreTokenizer::State> state_;
    std::vector<std::string> pieces_;
    BpeCache cache_;
  };
  // `match_special`: special tokens spelled in the text are matched (see above). Fails when a special
  // token asks for lstrip, rstrip or single_word (not supported).
  absl::StatusOr<std::unique_ptr<Encoder>> NewEncoder(bool match_special) const;
  std::unique_ptr<Encoder> NewEncoder() const;

  // The bytes the ids stand for (added tokens as their content). Fails on an unknown id.
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;

  // The id of an added token's content or a vocabulary token's text (its bytes), or -1.
  int32_t TokenId(std::string_view text) const;
  // One past the largest id of the vocabulary and the added tokens.
  int64_t vocab_size() const { return vocab_size_; }
  const std::vector<AddedToken>& added_tokens() const { return added_; }

 private:
  Tokenizer() = default;

  std::unique_ptr<BpeModel> model_;
  PreTokenizer pre_tokenizer_;
  std::vector<AddedToken> added_;
  absl::flat_hash_map<int32_t, const AddedToken*> added_by_id_;
  Normalization normalization_ = Normalization::kNone;
  // Non-special added tokens by first byte, longest first: matched in text ([0]: in the text as
  // given, [1]: in the normalized text). matchable_with_special_: all added tokens.
  std::vector<std::vector<const AddedToken*>> matchable_[2];
  std::vector<std::vector<const AddedToken*>> matchable_with_special_[2];
  std::string special_flag_error_;  // Why special tokens cannot be matched ("" if they can).
  int64_t vocab_size_ = 0;
};

}  // namespace tessera::formats::data

#endif  // TESSERA_FORMATS_DATA_TOKENIZER_H_
