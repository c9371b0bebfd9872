#include "formats/data/mapped_indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessera::formats::data {

absl::StatusOr<std::unique_ptr<MappedIndexedDataset>> MappedIndexedDataset::Open(const std::string& prefix) {
  const std::string bin_path = prefix + ".bin";
  const int fd = open(bin_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(bin_path, ": cannot open: ", std::strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(bin_path, ": not a regular file"));
  }
  std::unique_ptr<MappedIndexedDataset> ds(new MappedIndexedDataset(prefix));
  auto index = ReadIndexedDatasetIndex(prefix + ".idx", static_cast<uint64_t>(st.st_size));
  if (!index.ok()) {
    close(fd);
    return index.status();
  }
  ds->index_ = *std::move(index);
  const int size = IndexedDtypeSize(ds->index_.dtype);
  if (size != 2 && size != 4) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(prefix, ".idx: dtype ", IndexedDtypeName(ds->index_.dtype),
                                                   " is not a token type (uint16 or int32)"));
  }
  ds->map_size_ = static_cast<size_t>(st.st_size);
  if (ds->map_size_ > 0) {
    void* m = mmap(nullptr, ds->map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      close(fd);
      return absl::InternalError(absl::StrCat(bin_path, ": mmap failed: ", std::strerror(errno)));
    }
    ds->map_ = static_cast<const uint8_t*>(m);
  }
  close(fd);
  return ds;
}

MappedIndexedDataset::~MappedIndexedDataset() {
  if (map_ != nullptr) munmap(const_cast<uint8_t*>(map_), map_size_);
}

absl::StatusOr<std::vector<int32_t>> MappedIndexedDataset::Sequence(int64_t s, int64_t vocab) const {
  if (s < 0 || s >= sequences()) {
    return absl::OutOfRangeError(absl::StrCat(prefix_, ": sequence ", s, " is not one of its ", sequences()));
  }
  const int size = IndexedDtypeSize(index_.dtype);
  const int32_t length = index_.sequence_lengths[s];
  const uint8_t* p = map_ + index_.sequence_pointers[s];  // Inside the .bin: ReadIndexedDatasetIndex checked.
  std::vector<int32_t> ids(static_cast<size_t>(length));
  for (int32_t k = 0; k < length; ++k) {
    int64_t id;
    if (size == 2) {
      uint16_t v;
      std::memcpy(&v, p + 2 * static_cast<size_t>(k), 2);
      id = v;
    } else {
      int32_t v;
      std::memcpy(&v, p + 4 * static_cast<size_t>(k), 4);
      id = v;
    }
    if (id < 0 || id >= vocab) {
      return absl::DataLossError(absl::StrCat(prefix_, ".bin: token ", id, " at position ", k, " of sequence ", s,
                                              " is outside the vocabulary (", vocab, ")"));
    }
    ids[k] = static_cast<int32_t>(id);
  }
  return ids;
}

}  // namespace tessera::formats::data
