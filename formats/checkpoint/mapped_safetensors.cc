#include "formats/checkpoint/mapped_safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessera::formats::checkpoint {
namespace {

// Reads exactly n bytes at `offset`.
bool ReadAt(int fd, char* out, size_t n, off_t offset) {
  while (n > 0) {
    const ssize_t got = pread(fd, out, n, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    n -= static_cast<size_t>(got);
    offset += got;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MappedSafetensors>> MappedSafetensors::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat(path, ": not a valid safetensors file: ", why));
  };
  struct stat st;
  if (fstat(fd, &st) != 0) return absl::InternalError(absl::StrCat(path, ": stat: ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  unsigned char len[8];
  if (size < 8 || !ReadAt(fd, reinterpret_cast<char*>(len), 8, 0)) return bad("shorter than its 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  if (n > size - 8) return bad(absl::StrCat("header length ", n, " exceeds the file (", size, " bytes)"));
  if (n > kMaxSafetensorsHeader) return bad(absl::StrCat("header length ", n, " exceeds ", kMaxSafetensorsHeader));
  std::string json(n, '\0');
  if (!ReadAt(fd, json.data(), n, 8)) return absl::DataLossError(absl::StrCat(path, ": cannot read the header"));
  auto header = ParseSafetensorsHeader(path, json, size - 8 - n);
  if (!header.ok()) return header.status();
  std::unique_ptr<MappedSafetensors> f(new MappedSafetensors());
  f->path_ = path;
  f->header_ = std::move(*header);
  f->size_ = size;
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (base == MAP_FAILED) return absl::InternalError(absl::StrCat(path, ": mmap: ", std::strerror(errno)));
  f->base_ = static_cast<char*>(base);
  return f;
}

MappedSafetensors::~MappedSafetensors() {
  if (base_ != nullptr) munmap(base_, size_);
}

char* MappedSafetensors::data(const TensorEntry& entry) const {
  if (entry.end == entry.begin) return nullptr;
  return base_ + header_.data_start + entry.begin;
}

}  // namespace tessera::formats::checkpoint
