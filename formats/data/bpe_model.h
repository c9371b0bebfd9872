// The BPE model of a byte-level tokenizer: vocabulary, ranked merges, and the merge procedure of the
// `tokenizers` library (repeatedly merge the adjacent pair of lowest rank, the leftmost on ties).
#ifndef TESSERA_FORMATS_DATA_BPE_MODEL_H_
#define TESSERA_FORMATS_DATA_BPE_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace tessera::formats::data {

struct BpeModelOptions {
  // Token (in the byte-level alphabet, as tokenizer.json writes it) -> id.
  std::vector<std::pair<std::string, int32_t>> vocab;
  // Merges in rank order: the two tokens to join.
  std::vector<std::pair<std::string, std::string>> merges;
  // Llama-3 style: a word that is a token by itself is that token, whatever its merges.
  bool ignore_merges = false;
  // A byte whose character is not in the vocabulary becomes this token, or, when empty, is dropped
  // (the `tokenizers` library does the same). fuse_unk joins consecutive unknowns into one.
  std::string unk_token;
  bool fuse_unk = false;
};

// Per-thread memo of encoded words. Bounded: cleared when it grows past its capacity.
class BpeCache {
 public:
  explicit BpeCache(size_t capacity = 1 << 16) : capacity_(capacity) {}

 private:
  friend class BpeModel;
  size_t capacity_;
  absl::flat_hash_map<std::string, std::vector<int32_t>> words_;
};

class BpeModel {
 public:
  // Fails naming the merge or token when a merge joins tokens that are not in the vocabulary or
  // produces one that is not, or when an id is negative or repeated.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Create(const BpeModelOptions& options);

  // Appends the ids of one pre-tokenized word, given as raw bytes.
  void Encode(std::string_view word, BpeCache* cache, std::vector<int32_t>* ids) const;

  // The token of `id` in the byte-level alphabet, or nullptr when the vocabulary has no such id.
  const std::string* Token(int32_t id) const;
  // The id of `token` (in the byte-level alphabet), or -1.
  int32_t Id(std::string_view token) const;
  // One past the largest id.
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }

 private:
  BpeModel() = default;
  void Merge(std::string_view word, std::vector<int32_t>* ids) const;

  struct MergeResult {
    int32_t rank;
    int32_t id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  int32_t byte_id_[256];
  absl::flat_hash_map<uint64_t, MergeResult> merges_;
  absl::flat_hash_map<std::string, int32_t> vocab_;        // Byte-level alphabet -> id.
  absl::flat_hash_map<std::string, int32_t> bytes_vocab_;  // Raw bytes -> id (for ignore_merges).
  std::vector<std::string> tokens_;                         // id -> token ("" for gaps).
  std::vector<bool> present_;
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
};

}  // namespace tessera::formats::data

#endif  // TESSERA_FORMATS_DATA_BPE_MODEL_H_
