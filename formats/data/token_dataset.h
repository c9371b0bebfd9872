// TokenDataset: a stream of token ids read as fixed windows. The stream is a flat little-endian file
// of uint16 or uint32 ids, a Megatron indexed dataset (its sequences' tokens in order), or an llm.c
// token file (a 1024-byte header, then uint16 or uint32 ids); see docs/data-format.md.
//
// Sample order (docs/data-format.md): the file holds N = (num_tokens - 1) / seq_len whole windows;
// window w covers tokens [w·seq_len, w·seq_len + seq_len + 1). Global sample g reads window
// g mod N when shuffle is off. With shuffle on, epoch e = g / N reads window P_e[g mod N], where P_e
// is the Fisher-Yates permutation of [0, N) drawn with SplitMix64 seeded by seed + e (see
// Permutation()). Inputs are the window's first seq_len tokens, targets the last seq_len. No torch.
//
// Held-out tail (data.valid_fraction f > 0): of the file's N windows the last V = floor(N·f) are the
// validation part, the first N − V the training part. A split dataset reads only its part's windows
// (the training part as above with N − V in place of N; the validation part always in order, sample
// g reading window N − V + g mod V). The two parts share one token: the last target of the training
// part is the first input of the validation part.
//
// SFT datasets (docs/data-format.md "SFT datasets": a Megatron dataset with PREFIX.sft.mask and
// PREFIX.sft.json) are read one conversation per sample: the "windows" are the conversations (in file
// order; shuffled, split and held out as windows are), and sample g holds the first seq_len + 1 tokens
// of its conversation, right-padded. A token that is not trained on as a target is given as −id − 1
// (padding as −1: token 0, not trained); the first token of a sample is never a target and is given as
// is. TrainedTargets(g) counts the trained targets of sample g.
//
// Packing (TokenDatasetOptions::packing, an SFT dataset only): the "windows" are packs of whole
// conversations, greedily in file order: a pack takes the next conversations while their lengths sum
// to at most seq_len + 1 (a longer conversation is a pack of its own, truncated). A pack's tokens are
// its conversations' back to back, right-padded; the first token of each conversation after the
// first is given as untrained (−id − 1: no target crosses a conversation boundary). Read's positions
// restart at 0 at each conversation and at the padding: attention stays within the runs that start
// at a position 0 (the model's contract, Decoder::set_positions).
#ifndef TESSERA_FORMATS_DATA_TOKEN_DATASET_H_
#define TESSERA_FORMATS_DATA_TOKEN_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::formats::data {

// How data.path is read. kAuto: a Megatron dataset when PATH.bin and PATH.idx exist (or PATH is
// X.bin beside X.idx), else an llm.c file when its header says so, else a flat file.
enum class DataFormat { kAuto, kFlat, kMegatron, kLlmc };
const char* DataFormatName(DataFormat format);

// Which windows of the file a dataset reads (see "Held-out tail" above).
enum class DataSplit { kAll, kTrain, kValid };

struct TokenDatasetOptions {
  std::string path;
  DataFormat format = DataFormat::kAuto;
  int token_bytes = 2;     // Flat files: 2 (uint16) or 4 (uint32). The other formats say it themselves.
  int seq_len = 128;
  int64_t vocab = 256;     // Every token read must be below it; otherwise Read() fails.
  bool shuffle = false;     // Ignored by the validation part (always in order).
  uint64_t seed = 1234;
  DataSplit split = DataSplit::kAll;
  double valid_fraction = 0;  // kTrain / kValid: the held-out share f, in (0, 1).
  bool packing = false;       // SFT datasets: conversations packed into windows (above).
};

class TokenDataset {
 public:
  // Maps the file. Fails with a message naming the file when it is missing, its size is not a
  // multiple of token_bytes, or it holds fewer than seq_len + 1 tokens; split, when either part would
  // have no window.
  static absl::StatusOr<std::unique_ptr<TokenDataset>> Open(const TokenDatasetOptions& options);
  ~TokenDataset();

  int64_t num_tokens() const { return num_tokens_; }
  DataFormat format() const { return format_; }  // Never kAuto.
  int token_bytes() const { return token_bytes_; }
  int64_t num_windows() const { return num_windows_; }  // Of this dataset's part.
  bool sft() const { return !conversation_start_.empty(); }
  bool packed() const { return !pack_first_.empty(); }
  // The trained targets among the seq_len targets of global sample g (seq_len for a token stream).
  int64_t TrainedTargets(int64_t g);
  int64_t first_window() const { return first_window_; }  // The part's first window in the file.

  // The window of the file that global sample `g` reads.
  int64_t WindowOf(int64_t g);

  // Appends the seq_len + 1 tokens of global sample `g` to `out`, and with `positions` each token's
  // position: in its conversation for SFT datasets (the padding's counted from 0 again), else
  // 0 .. seq_len. Fails on a token >= vocab.
  absl::Status Read(int64_t g, std::vector<int64_t>* out, std::vector<int64_t>* positions = nullptr);

  // The documented permutation of [0, n) for `seed` (exposed for tests and the Python reference).
  static std::vector<int64_t> Permutation(int64_t n, uint64_t seed);

 private:
  TokenDataset(TokenDatasetOptions options, const uint8_t* map, size_t map_size);
  int64_t TokenAt(int64_t i) const;
  // Reads PREFIX.sft.json and maps PREFIX.sft.mask when they exist (an SFT dataset).
  absl::Status OpenSft(const std::string& prefix, const std::vector<int64_t>& pointers,
                       const std::vector<int32_t>& lengths);
  // The conversations [first, end) of SFT window `w` (one without packing).
  std::pair<int64_t, int64_t> ConversationsOf(int64_t w) const;
  // The tokens of window `w`'s conversations as Read gives them: (position in the file, length taken).
  std::vector<std::pair<int64_t, int64_t>> Pieces(int64_t w) const;

  TokenDatasetOptions options_;
  const uint8_t* map_;     // The whole file.
  size_t map_size_;
  const uint8_t* tokens_;  // The first token.
  DataFormat format_ = DataFormat::kFlat;
  int token_bytes_ = 2;
  int64_t num_tokens_;
  int64_t num_windows_;
  int64_t first_window_ = 0;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> cached_permutation_;
  // SFT datasets: each conversation's first token and length, and the flags (one byte per token).
  std::vector<int64_t> conversation_start_;
  std::vector<int32_t> conversation_length_;
  std::vector<int64_t> pack_first_;  // Packing: pack p holds conversations [pack_first_[p], pack_first_[p + 1]).
  const uint8_t* mask_ = nullptr;
  size_t mask_size_ = 0;
};

}  // namespace tessera::formats::data

#endif  // TESSERA_FORMATS_DATA_TOKEN_DATASET_H_
