#include "formats/data/token_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "formats/data/indexed_dataset.h"
#include "nlohmann/json.hpp"


namespace tessera::formats::data {
namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<int64_t> TokenDataset::Permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  uint64_t state = seed;
  // Fisher-Yates from the back: swap i with j uniform in [0, i] (modulo draw; bias is negligible for
  // n far below 2^64 and the draw is what the documentation specifies).
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(SplitMix64(&state) % static_cast<uint64_t>(i + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

const char* DataFormatName(DataFormat format) {
  switch (format) {
    case DataFormat::kAuto: return "auto";
    case DataFormat::kFlat: return "flat";
    case DataFormat::kMegatron: return "megatron";
    case DataFormat::kLlmc: return "llmc";
  }
  return "?";
}

namespace {

constexpr int32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeaderBytes = 256 * 4;

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The Megatron prefix that `path` names, or "" when it names none.
std::string MegatronPrefix(const std::string& path) {
  if (IsFile(path + ".bin") && IsFile(path + ".idx")) return path;
  for (const char* ext : {".bin", ".idx"}) {
    const size_t n = std::strlen(ext);
    if (path.size() > n && path.compare(path.size() - n, n, ext) == 0) {
      const std::string prefix = path.substr(0, path.size() - n);
      if (IsFile(prefix + ".bin") && IsFile(prefix + ".idx")) return prefix;
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenDataset>> TokenDataset::Open(const TokenDatasetOptions& options) {
  if (options.seq_len < 1) return absl::InvalidArgumentError("seq_len must be at least 1");
  DataFormat format = options.format;
  std::string file = options.path;
  std::string prefix;
  if (format == DataFormat::kAuto || format == DataFormat::kMegatron) {
    prefix = MegatronPrefix(options.path);
    if (!prefix.empty()) {
      format = DataFormat::kMegatron;
      file = prefix + ".bin";
    } else if (format == DataFormat::kMegatron) {
      return absl::NotFoundError(absl::StrCat(options.path, ": no Megatron dataset here (PREFIX.bin and PREFIX.idx "
                                              "with PREFIX = data.path, or data.path = PREFIX.bin)"));
    }
  }
  int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(file, ": cannot open the token file: ", std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat(file, ": stat failed"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  size_t offset = 0;
  int token_bytes = options.token_bytes;
  int64_t tokens = 0;
  std::vector<int64_t> pointers;
  std::vector<int32_t> lengths;
  const bool sft = !prefix.empty() && IsFile(prefix + ".sft.json");
  auto fail = [&](absl::Status s) {
    close(fd);
    return s;
  };
  if (format == DataFormat::kMegatron) {
    auto index = ReadIndexedDatasetIndex(prefix + ".idx", size);
    if (!index.ok()) return fail(index.status());
    token_bytes = IndexedDtypeSize(index->dtype);
    // The sequences must lie back to back from byte 0, as Megatron's builder writes them: then the
    // dataset is the flat file of its documents' tokens in order.
    int64_t at = 0;
    for (size_t i = 0; i < index->sequence_pointers.size(); ++i) {
      if (index->sequence_pointers[i] != at) {
        return fail(absl::InvalidArgumentError(absl::StrCat(
            prefix, ".idx: sequence ", i, " starts at byte ", index->sequence_pointers[i], ", not ", at,
            " (tessera reads sequences stored back to back)")));
      }
      at += int64_t{index->sequence_lengths[i]} * token_bytes;
    }
    tokens = index->num_tokens;
    if (sft) {
      pointers = index->sequence_pointers;
      lengths = index->sequence_lengths;
    }
  } else {
    int32_t head[3] = {0, 0, 0};
    const bool has_head = size >= kLlmcHeaderBytes && pread(fd, head, sizeof(head), 0) == sizeof(head);
    if (format == DataFormat::kLlmc || (format == DataFormat::kAuto && has_head && head[0] == kLlmcMagic)) {
      if (!has_head || head[0] != kLlmcMagic) {
        return fail(absl::InvalidArgumentError(absl::StrCat(file, ": not an llm.c token file (magic ", kLlmcMagic,
                                                            " missing from the first 4 bytes)")));
      }
      if (head[1] != 1 && head[1] != 2) {
        return fail(absl::InvalidArgumentError(
            absl::StrCat(file, ": llm.c header version ", head[1], " is not supported (1: uint16, 2: uint32)")));
      }
      token_bytes = head[1] == 1 ? 2 : 4;
      const uint64_t expected = kLlmcHeaderBytes + static_cast<uint64_t>(static_cast<uint32_t>(head[2])) * token_bytes;
      if (head[2] < 0 || expected != size) {
        return fail(absl::InvalidArgumentError(absl::StrCat(file, ": the llm.c header says ", head[2],
                                                            " tokens (", expected, " bytes), the file has ", size,
                                                            " bytes")));
      }
      format = DataFormat::kLlmc;
      offset = kLlmcHeaderBytes;
    } else {
      format = DataFormat::kFlat;
      if (token_bytes != 2 && token_bytes != 4) {
        return fail(absl::InvalidArgumentError("token size must be 2 (uint16) or 4 (uint32) bytes"));
      }
      if (token_bytes == 2 && options.vocab > 65536) {
        return fail(absl::InvalidArgumentError(absl::StrCat(
            file, ": a flat file of uint16 cannot hold the token ids of model.vocab ", options.vocab,
            " (set data.dtype: uint32, or give a Megatron dataset)")));
      }
      if (size % token_bytes != 0) {
        return fail(absl::InvalidArgumentError(absl::StrCat(file, ": size ", size, " is not a multiple of the token size ",
                                                            token_bytes, " (wrong data.dtype?)")));
      }
    }
    tokens = static_cast<int64_t>((size - offset) / token_bytes);
  }
  if (!sft && tokens < options.seq_len + 1) {
    return fail(absl::InvalidArgumentError(absl::StrCat(file, ": holds ", tokens, " tokens, fewer than seq_len + 1 = ",
                                                        options.seq_len + 1)));
  }
  void* data = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (data == MAP_FAILED) return absl::InternalError(absl::StrCat(file, ": mmap failed"));
  std::unique_ptr<TokenDataset> ds(new TokenDataset(options, static_cast<const uint8_t*>(data), size));
  ds->tokens_ = ds->map_ + offset;
  ds->format_ = format;
  ds->token_bytes_ = token_bytes;
  ds->num_tokens_ = tokens;
  if (sft) {
    if (absl::Status s = ds->OpenSft(prefix, pointers, lengths); !s.ok()) return s;
  } else if (options.packing) {
    return absl::InvalidArgumentError(absl::StrCat("data.packing: ", file,
                                                   " is not an SFT dataset (packing packs conversations: prepare "
                                                   "one with `tessera data prepare --chat`)"));
  }
  int64_t windows = sft ? static_cast<int64_t>(lengths.size()) : (tokens - 1) / options.seq_len;
  if (sft && options.packing) {
    // Greedy, in file order: a pack takes conversations while they fit in seq_len + 1 tokens.
    const int64_t capacity = int64_t{options.seq_len} + 1;
    int64_t used = 0;
    for (size_t c = 0; c < lengths.size(); ++c) {
      if (ds->pack_first_.empty() || used + lengths[c] > capacity) {
        ds->pack_first_.push_back(static_cast<int64_t>(c));
        used = 0;
      }
      used += lengths[c];
    }
    ds->pack_first_.push_back(static_cast<int64_t>(lengths.size()));
    windows = static_cast<int64_t>(ds->pack_first_.size()) - 1;
  }
  ds->num_windows_ = windows;
  if (options.split != DataSplit::kAll) {
    if (!(options.valid_fraction > 0 && options.valid_fraction < 1)) {
      return absl::InvalidArgumentError(absl::StrCat("data.valid_fraction ", options.valid_fraction, " is not in (0, 1)"));
    }
    // floor(N·f) in long double: exact for every window count a file can hold.
    const int64_t held_out =
        static_cast<int64_t>(std::floor(static_cast<long double>(windows) * options.valid_fraction));
    if (held_out < 1 || held_out >= windows) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": data.valid_fraction ", options.valid_fraction, " of its ", windows, " windows of seq_len + 1 = ",
          options.seq_len + 1, " tokens leaves ", held_out < 1 ? "no validation window" : "no training window"));
    }
    if (options.split == DataSplit::kTrain) {
      ds->num_windows_ = windows - held_out;
    } else {
      ds->first_window_ = windows - held_out;
      ds->num_windows_ = held_out;
    }
  }
  return ds;
}

TokenDataset::TokenDataset(TokenDatasetOptions options, const uint8_t* map, size_t map_size)
    : options_(std::move(options)), map_(map), map_size_(map_size), tokens_(map) {}

TokenDataset::~TokenDataset() {
  munmap(const_cast<uint8_t*>(map_), map_size_);
  if (mask_ != nullptr) munmap(const_cast<uint8_t*>(mask_), mask_size_);
}

absl::Status TokenDataset::OpenSft(const std::string& prefix, const std::vector<int64_t>& pointers,
                                   const std::vector<int32_t>& lengths) {
  const std::string json_path = prefix + ".sft.json", mask_path = prefix + ".sft.mask";
  std::ifstream in(json_path);
  nlohmann::json meta = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object() || meta.value("format", "") != "tessera-sft") {
    return absl::InvalidArgumentError(absl::StrCat(json_path, ": not an SFT dataset's metadata (format tessera-sft)"));
  }
  if (meta.value("version", 0) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(json_path, ": version ", meta.value("version", 0),
                                                   " is not supported (1)"));
  }
  if (!meta.contains("tokens") || !meta["tokens"].is_number_integer() || meta["tokens"].get<int64_t>() != num_tokens_) {
    return absl::InvalidArgumentError(absl::StrCat(json_path, ": tokens does not match the ", num_tokens_,
                                                   " tokens of ", prefix, ".bin"));
  }
  if (lengths.empty()) return absl::InvalidArgumentError(absl::StrCat(prefix, ".idx: holds no conversation"));
  const int fd = open(mask_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(mask_path, ": cannot open: ", std::strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<int64_t>(st.st_size) != num_tokens_) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(mask_path, ": must hold one byte per token (", num_tokens_, "), holds ", st.st_size));
  }
  void* m = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return absl::InternalError(absl::StrCat(mask_path, ": mmap failed"));
  mask_ = static_cast<const uint8_t*>(m);
  mask_size_ = static_cast<size_t>(st.st_size);
  // A dataset without one trained token would train "loss 0" without a gradient and end in success:
  // refused at the start instead.
  if (std::all_of(mask_, mask_ + mask_size_, [](uint8_t b) { return b == 0; })) {
    return absl::FailedPreconditionError(absl::StrCat(
        mask_path, ": no token of the dataset is trained (no conversation has an assistant turn, or no completion "
                   "has a token): nothing to learn"));
  }
  conversation_start_.reserve(lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1) return absl::InvalidArgumentError(absl::StrCat(prefix, ".idx: conversation ", i, " is empty"));
    conversation_start_.push_back(pointers[i] / token_bytes_);
  }
  conversation_length_ = lengths;
  return absl::OkStatus();
}

int64_t TokenDataset::TokenAt(int64_t i) const {
  const uint8_t* at = tokens_ + i * token_bytes_;
  if (token_bytes_ == 2) {
    uint16_t h;
    std::memcpy(&h, at, 2);
    return h;
  }
  if (token_bytes_ == 4) {
    uint32_t w;  // int32 datasets hold no negative ids; one read as uint32 fails the vocab check.
    std::memcpy(&w, at, 4);
    return w;
  }
  if (token_bytes_ == 1) return *at;
  int64_t v;
  std::memcpy(&v, at, 8);
  return v;
}

std::pair<int64_t, int64_t> TokenDataset::ConversationsOf(int64_t w) const {
  if (pack_first_.empty()) return {w, w + 1};
  return {pack_first_[w], pack_first_[w + 1]};
}

std::vector<std::pair<int64_t, int64_t>> TokenDataset::Pieces(int64_t w) const {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t room = int64_t{options_.seq_len} + 1;
  const auto [first, end] = ConversationsOf(w);
  for (int64_t c = first; c < end && room > 0; ++c) {
    const int64_t n = std::min<int64_t>(conversation_length_[c], room);
    out.emplace_back(conversation_start_[c], n);
    room -= n;
  }
  return out;
}

int64_t TokenDataset::TrainedTargets(int64_t g) {
  if (!sft()) return options_.seq_len;
  // A conversation's first token is no target (the first of the window, or a boundary's).
  int64_t trained = 0;
  for (const auto& [start, n] : Pieces(WindowOf(g))) {
    for (int64_t k = 1; k < n; ++k) trained += mask_[start + k] != 0;
  }
  return trained;
}

int64_t TokenDataset::WindowOf(int64_t g) {
  const int64_t in_epoch = g % num_windows_;
  if (!options_.shuffle || options_.split == DataSplit::kValid) return first_window_ + in_epoch;
  const int64_t epoch = g / num_windows_;
  if (epoch != cached_epoch_) {
    cached_permutation_ = Permutation(num_windows_, options_.seed + static_cast<uint64_t>(epoch));
    cached_epoch_ = epoch;
  }
  return cached_permutation_[in_epoch];
}

absl::Status TokenDataset::Read(int64_t g, std::vector<int64_t>* out, std::vector<int64_t>* positions) {
  if (g < 0) return absl::InvalidArgumentError("negative sample index");
  if (sft()) {
    int64_t taken = 0;
    for (const auto& [start, n] : Pieces(WindowOf(g))) {
      for (int64_t k = 0; k < n; ++k) {
        const int64_t v = TokenAt(start + k);
        if (v < 0 || v >= options_.vocab) {
          return absl::InvalidArgumentError(absl::StrCat(options_.path, ": token ", v, " at position ", start + k,
                                                         " is not below model.vocab ", options_.vocab));
        }
        // The window's first token is no target; a later conversation's first is an untrained one.
        const bool trained = k == 0 ? taken == 0 : mask_[start + k] != 0;
        out->push_back(trained ? v : -v - 1);
        if (positions != nullptr) positions->push_back(k);
      }
      taken += n;
    }
    for (int64_t k = taken; k < options_.seq_len + 1; ++k) {
      out->push_back(-1);  // Padding: token 0, not trained.
      if (positions != nullptr) positions->push_back(k - taken);
    }
    return absl::OkStatus();
  }
  if (positions != nullptr) {
    for (int64_t k = 0; k <= options_.seq_len; ++k) positions->push_back(k);
  }
  const int64_t start = WindowOf(g) * options_.seq_len;
  for (int64_t i = start; i < start + options_.seq_len + 1; ++i) {
    const int64_t v = TokenAt(i);
    if (v < 0 || v >= options_.vocab) {
      return absl::InvalidArgumentError(absl::StrCat(options_.path, ": token ", v, " at position ", i,
                                                     " is not below model.vocab ", options_.vocab));
    }
    out->push_back(v);
  }
  return absl::OkStatus();
}

}  // namespace tessera::formats::data
