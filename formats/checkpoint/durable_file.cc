#include "formats/checkpoint/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "formats/checkpoint/crc32c.h"

namespace tessera::formats::checkpoint {

namespace {

absl::Status Errno(const std::string& path, const char* what) {
  const int e = errno;
  std::string message = absl::StrCat(path, ": ", what, ": ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(message);
  return e == ENOSPC || e == EDQUOT ? absl::ResourceExhaustedError(message) : absl::InternalError(message);
}

}  // namespace

DurableWriter::~DurableWriter() {
  if (fd_ >= 0) close(fd_);
}

absl::Status DurableWriter::Open(const std::string& path) {
  if (fd_ >= 0) close(fd_);
  path_ = path;
  digest_ = FileDigest();
  fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return Errno(path, "cannot create");
  return absl::OkStatus();
}

absl::Status DurableWriter::Append(std::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": not open for writing"));
  digest_.crc32c = Crc32c(digest_.crc32c, bytes.data(), bytes.size());
  digest_.bytes += static_cast<int64_t>(bytes.size());
  while (!bytes.empty()) {
    const ssize_t n = write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno(path_, "write failed");
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::StatusOr<FileDigest> DurableWriter::Finish() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": not open for writing"));
  const int fd = fd_;
  fd_ = -1;
  if (fsync(fd) != 0) {
    absl::Status s = Errno(path_, "fsync failed");
    close(fd);
    return s;
  }
  if (close(fd) != 0) return Errno(path_, "close failed");
  return digest_;
}

absl::StatusOr<FileDigest> WriteFileDurably(const std::string& path, std::string_view content) {
  DurableWriter w;
  absl::Status s = w.Open(path);
  if (s.ok()) s = w.Append(content);
  if (!s.ok()) return s;
  return w.Finish();
}

absl::StatusOr<FileDigest> DigestFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno(path, "cannot open");
  FileDigest d;
  std::vector<char> buf(1 << 20);
  for (;;) {
    const ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status s = Errno(path, "read failed");
      close(fd);
      return s;
    }
    if (n == 0) break;
    d.crc32c = Crc32c(d.crc32c, buf.data(), static_cast<size_t>(n));
    d.bytes += n;
  }
  close(fd);
  return d;
}

absl::Status FsyncDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno(dir, "cannot open directory");
  const int rc = fsync(fd);
  absl::Status s = rc == 0 ? absl::OkStatus() : Errno(dir, "fsync failed");
  close(fd);
  return s;
}

}  // namespace tessera::formats::checkpoint
