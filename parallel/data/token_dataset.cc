#include "parallel/data/token_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessera::parallel {
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

absl::StatusOr<std::unique_ptr<TokenDataset>> TokenDataset::Open(const TokenDatasetOptions& options) {
  if (options.token_bytes != 2 && options.token_bytes != 4) {
    return absl::InvalidArgumentError("token size must be 2 (uint16) or 4 (uint32) bytes");
  }
  if (options.seq_len < 1) return absl::InvalidArgumentError("seq_len must be at least 1");
  int fd = open(options.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(options.path, ": cannot open the token file: ",
                                            std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat(options.path, ": stat failed"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size % options.token_bytes != 0) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(options.path, ": size ", size,
                                                   " is not a multiple of the token size ",
                                                   options.token_bytes, " (wrong data.dtype?)"));
  }
  const int64_t tokens = static_cast<int64_t>(size / options.token_bytes);
  if (tokens < options.seq_len + 1) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(options.path, ": holds ", tokens,
                                                   " tokens, fewer than seq_len + 1 = ",
                                                   options.seq_len + 1));
  }
  void* data = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (data == MAP_FAILED) return absl::InternalError(absl::StrCat(options.path, ": mmap failed"));
  return std::unique_ptr<TokenDataset>(
      new TokenDataset(options, static_cast<const uint8_t*>(data), size));
}

TokenDataset::TokenDataset(TokenDatasetOptions options, const uint8_t* data, size_t size)
    : options_(std::move(options)), data_(data), size_(size) {
  num_tokens_ = static_cast<int64_t>(size / options_.token_bytes);
  num_windows_ = (num_tokens_ - 1) / options_.seq_len;
}

TokenDataset::~TokenDataset() { munmap(const_cast<uint8_t*>(data_), size_); }

int64_t TokenDataset::WindowOf(int64_t g) {
  const int64_t in_epoch = g % num_windows_;
  if (!options_.shuffle) return in_epoch;
  const int64_t epoch = g / num_windows_;
  if (epoch != cached_epoch_) {
    cached_permutation_ = Permutation(num_windows_, options_.seed + static_cast<uint64_t>(epoch));
    cached_epoch_ = epoch;
  }
  return cached_permutation_[in_epoch];
}

absl::Status TokenDataset::Read(int64_t g, std::vector<int64_t>* out) {
  if (g < 0) return absl::InvalidArgumentError("negative sample index");
  const int64_t start = WindowOf(g) * options_.seq_len;
  for (int64_t i = start; i < start + options_.seq_len + 1; ++i) {
    uint32_t v;
    if (options_.token_bytes == 2) {
      uint16_t h;
      std::memcpy(&h, data_ + 2 * i, 2);
      v = h;
    } else {
      std::memcpy(&v, data_ + 4 * i, 4);
    }
    if (static_cast<int64_t>(v) >= options_.vocab) {
      return absl::InvalidArgumentError(absl::StrCat(options_.path, ": token ", v, " at position ", i,
                                                     " is not below model.vocab ", options_.vocab));
    }
    out->push_back(v);
  }
  return absl::OkStatus();
}

}  // namespace tessera::parallel
