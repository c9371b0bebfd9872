// Megatron's indexed dataset (MMIDIDX): PREFIX.bin holds the tokens of every sequence back to back;
// PREFIX.idx describes them (docs/data-format.md):
//   9 bytes   magic "MMIDIDX\0\0"
//   uint64    version, 1
//   uint8     dtype code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)
//   uint64    sequence count S
//   uint64    document count D (D = documents + 1)
//   int32[S]  sequence lengths, in tokens
//   int64[S]  sequence pointers, byte offsets into PREFIX.bin
//   int64[D]  document indices: 0, then the index one past each document's last sequence
// All little-endian. tessera writes one sequence per document. No torch.
#ifndef TESSERA_FORMATS_DATA_INDEXED_DATASET_H_
#define TESSERA_FORMATS_DATA_INDEXED_DATASET_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::formats::data {

enum class IndexedDtype : uint8_t {
  kUint8 = 1, kInt8 = 2, kInt16 = 3, kInt32 = 4, kInt64 = 5, kFloat64 = 6, kFloat32 = 7, kUint16 = 8,
};

// Bytes per element, or 0 for a code that is not a dtype.
int IndexedDtypeSize(IndexedDtype dtype);
const char* IndexedDtypeName(IndexedDtype dtype);
// Megatron's choice for a vocabulary: uint16 when every id fits, else int32.
IndexedDtype IndexedDtypeForVocab(int64_t vocab_size);

struct IndexedDatasetIndex {
  IndexedDtype dtype = IndexedDtype::kUint16;
  std::vector<int32_t> sequence_lengths;
  std::vector<int64_t> sequence_pointers;
  std::vector<int64_t> document_indices;
  int64_t num_tokens = 0;  // Sum of the sequence lengths.
};

// Reads and checks PREFIX.idx against the size of PREFIX.bin: magic, version, dtype, that the
// arrays are complete, lengths non-negative, the document indices non-decreasing from 0 to S, and
// every sequence inside the .bin. Errors name the file and the byte offset or array entry.
absl::StatusOr<IndexedDatasetIndex> ReadIndexedDatasetIndex(const std::string& idx_path, uint64_t bin_size);

// Writes PREFIX.bin and PREFIX.idx under temporary names and renames them into place in Finish();
// a writer destroyed before Finish() removes its temporaries, so an interrupted run leaves no
// half dataset (and the previous PREFIX.idx, if any, is removed before the new .bin appears).
class IndexedDatasetWriter {
 public:
  // dtype: uint16 or int32 (the token types Megatron writes).
  static absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> Create(const std::string& prefix, IndexedDtype dtype);
  ~IndexedDatasetWriter();

  // One document of one sequence. Fails on an id the dtype cannot hold.
  absl::Status AddDocument(const std::vector<int32_t>& ids);
  absl::Status Finish();

  int64_t documents() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t tokens() const { return tokens_; }

 private:
  IndexedDatasetWriter(std::string prefix, IndexedDtype dtype, std::FILE* bin);
  std::string prefix_;
  IndexedDtype dtype_;
  std::FILE* bin_;
  std::vector<int32_t> lengths_;
  int64_t tokens_ = 0;
  std::vector<char> buffer_;
  bool finished_ = false;
};

}  // namespace tessera::formats::data

#endif  // TESSERA_FORMATS_DATA_INDEXED_DATASET_H_
