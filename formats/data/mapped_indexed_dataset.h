// A Megatron indexed dataset (indexed_dataset.h) mapped for reading by sequence: the index read and
// checked, PREFIX.bin mapped, each sequence's ids checked against the vocabulary as it is read. No torch.
#ifndef TESSERA_FORMATS_DATA_MAPPED_INDEXED_DATASET_H_
#define TESSERA_FORMATS_DATA_MAPPED_INDEXED_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/data/indexed_dataset.h"

namespace tessera::formats::data {

class MappedIndexedDataset {
 public:
  // Errors name the file (ReadIndexedDatasetIndex's checks); the dtype must be a token type (uint16, int32).
  static absl::StatusOr<std::unique_ptr<MappedIndexedDataset>> Open(const std::string& prefix);
  ~MappedIndexedDataset();
  const IndexedDatasetIndex& index() const { return index_; }
  int64_t sequences() const { return static_cast<int64_t>(index_.sequence_lengths.size()); }
  // Sequence `s` (0 <= s < sequences()); DataLoss naming the file, sequence and position of an id
  // outside [0, vocab).
  absl::StatusOr<std::vector<int32_t>> Sequence(int64_t s, int64_t vocab) const;

 private:
  explicit MappedIndexedDataset(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string prefix_;
  IndexedDatasetIndex index_;
  const uint8_t* map_ = nullptr;
  size_t map_size_ = 0;
};

}  // namespace tessera::formats::data

#endif  // TESSERA_FORMATS_DATA_MAPPED_INDEXED_DATASET_H_
