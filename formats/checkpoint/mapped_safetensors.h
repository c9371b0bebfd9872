// A safetensors file mapped into memory: its header is read and checked at Open, its tensors' bytes
// are read by the kernel only where they are touched. A rank that needs a slice of a tensor (its tp
// part, its pipeline stage's blocks) reads those pages, never the whole file.
#ifndef TESSERA_FORMATS_CHECKPOINT_MAPPED_SAFETENSORS_H_
#define TESSERA_FORMATS_CHECKPOINT_MAPPED_SAFETENSORS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "formats/checkpoint/safetensors.h"

namespace tessera::formats::checkpoint {

class MappedSafetensors {
 public:
  // Maps `path` (private, copy-on-write: writes through a pointer never reach the file). Fails naming
  // the file on I/O errors or an invalid header (see ParseSafetensorsHeader).
  static absl::StatusOr<std::unique_ptr<MappedSafetensors>> Open(const std::string& path);
  ~MappedSafetensors();
  MappedSafetensors(const MappedSafetensors&) = delete;
  MappedSafetensors& operator=(const MappedSafetensors&) = delete;

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  // The first byte of `entry`'s data (valid while this object lives), or null for an empty tensor.
  char* data(const TensorEntry& entry) const;

 private:
  MappedSafetensors() = default;
  std::string path_;
  SafetensorsHeader header_;
  char* base_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tessera::formats::checkpoint

#endif  // TESSERA_FORMATS_CHECKPOINT_MAPPED_SAFETENSORS_H_
