// The safetensors file format (8-byte little-endian header length, JSON header, raw data), written
// and read without torch so that tools and tests can use it. See docs/checkpoint-format.md.
#ifndef TESSERA_FORMATS_CHECKPOINT_SAFETENSORS_H_
#define TESSERA_FORMATS_CHECKPOINT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/checkpoint/durable_file.h"

namespace tessera::formats::checkpoint {

// One tensor: a safetensors dtype name ("F32", "BF16", "F16", "I64", "I32", ...), its shape, and
// its bytes in row-major order.
struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;

  int64_t numel() const;
};

// Bytes per element of a safetensors dtype name; 0 when unknown.
int DtypeBytes(const std::string& dtype);

using TensorMap = std::map<std::string, RawTensor>;

// Where one tensor's bytes lie in a safetensors file.
struct TensorEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // Offsets into the data section, [begin, end).
  uint64_t end = 0;
};

// A checked safetensors header.
struct SafetensorsHeader {
  uint64_t data_start = 0;  // File offset of the data section: 8 + the header's length.
  std::map<std::string, TensorEntry> entries;
  std::map<std::string, std::string> metadata;  // "__metadata__" (string values).
};

// The longest header accepted (the format's own limit), so that a corrupt length allocates nothing.
inline constexpr uint64_t kMaxSafetensorsHeader = 100u << 20;

// Parses the JSON header `json` of the file `path` (named in errors) whose data section has
// `data_size` bytes: every entry needs a known dtype, a shape of non-negative integers whose byte
// count fits in 63 bits, and data_offsets inside the data section matching that count. Fails with
// DataLoss naming the file, the entry and the problem.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const std::string& path, std::string_view json,
                                                         uint64_t data_size);

// Writes `tensors` (and string `metadata`) to `path`, fsyncs it, and stores the size and CRC-32C of
// the file in `digest` when given. Fails on I/O errors (ResourceExhausted on a full disk) or on a
// tensor whose byte count does not match its dtype and shape.
absl::Status WriteSafetensors(const std::string& path, const TensorMap& tensors,
                              const std::map<std::string, std::string>& metadata = {},
                              FileDigest* digest = nullptr);

// Reads the whole file. Fails, naming the file and the problem, on a truncated file, a header that
// is not valid JSON, unknown dtypes, or data offsets that do not match the shapes or the file size.
absl::StatusOr<TensorMap> ReadSafetensors(const std::string& path,
                                          std::map<std::string, std::string>* metadata = nullptr);

}  // namespace tessera::formats::checkpoint

#endif  // TESSERA_FORMATS_CHECKPOINT_SAFETENSORS_H_
