// Files that are on disk when the call returns: every write checked (a full disk is an error naming
// the file, never a silently short file), the data fsynced, the size and CRC-32C of what was written
// returned for a checkpoint's index. No torch.
#ifndef TESSERA_FORMATS_CHECKPOINT_DURABLE_FILE_H_
#define TESSERA_FORMATS_CHECKPOINT_DURABLE_FILE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera::formats::checkpoint {

struct FileDigest {
  int64_t bytes = 0;
  uint32_t crc32c = 0;
};

// Writes one new file (created or truncated, mode 0644) in pieces.
class DurableWriter {
 public:
  DurableWriter() = default;
  DurableWriter(const DurableWriter&) = delete;
  DurableWriter& operator=(const DurableWriter&) = delete;
  ~DurableWriter();  // Closes a file not Finish()ed (its content is then undefined).

  absl::Status Open(const std::string& path);
  absl::Status Append(std::string_view bytes);
  // fsyncs and closes the file; the digest of everything appended.
  absl::StatusOr<FileDigest> Finish();

 private:
  std::string path_;
  int fd_ = -1;
  FileDigest digest_;
};

// Open + Append(content) + Finish.
absl::StatusOr<FileDigest> WriteFileDurably(const std::string& path, std::string_view content);

// The size and CRC-32C of a file as it is now.
absl::StatusOr<FileDigest> DigestFile(const std::string& path);

// fsyncs a directory, so that the names created or renamed in it survive a crash.
absl::Status FsyncDirectory(const std::string& dir);

}  // namespace tessera::formats::checkpoint

#endif  // TESSERA_FORMATS_CHECKPOINT_DURABLE_FILE_H_
