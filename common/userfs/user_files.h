// Files that users control: a job's OUTPUT_DIR (steps.jsonl, logs/, ranks/, tensorboard/, ...) lies on
// storage its owner can write, so anything may stand where a daemon expects its own regular file: a
// FIFO (opening it would wait for a writer forever), a symbolic link (to /dev/zero, or into another
// job's directory), a directory, a huge file. A daemon's loop thread must never block on such a thing,
// and no write may be redirected out of the directory it was meant for.
//
// The rule here: `base` is a directory the caller has already confined (spec::ConfineJobPaths: its own
// path may go through symbolic links the operator made); `relative` names components below it that the
// user may have replaced. Every component of `relative` is opened relative to its parent (openat) with
// O_NOFOLLOW — a symbolic link is refused, never followed — and the file itself with O_NONBLOCK (a FIFO
// opens at once or fails) and is refused unless fstat says it is a regular file. Errors name the path
// and what stands there. No torch, no gRPC; thread-compatible (no shared state).
#ifndef TESSERA_COMMON_USERFS_USER_FILES_H_
#define TESSERA_COMMON_USERFS_USER_FILES_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::userfs {

// A file descriptor that closes itself. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();  // Gives up ownership; returns the descriptor (-1 when none).

 private:
  int fd_ = -1;
};

enum class Access {
  kRead,    // O_RDONLY.
  kAppend,  // O_WRONLY | O_APPEND, created (mode 0644) when missing.
  kWrite,   // O_WRONLY | O_TRUNC, created (mode 0644) when missing.
};

struct OpenOptions {
  Access access = Access::kRead;
  // Missing directories of `relative` are made (mode 0755, each with mkdirat under its opened parent).
  bool create_dirs = false;
};

// Opens base/relative as described at the top. `relative` is a '/'-separated path of normal components
// (no "", ".", ".." or leading '/'). NotFound when a component (or, for kRead, the file) does not exist;
// FailedPrecondition when a component is a symbolic link or not a directory, or the file is not a
// regular file; Unavailable for other system errors (EIO, EMFILE, EACCES, ...), with strerror.
absl::StatusOr<UniqueFd> OpenUnder(const std::string& base, absl::string_view relative, const OpenOptions& options);

// Opens `name` (one plain component) in the directory open at `dir_fd`, as OpenUnder opens its last
// component; `shown` is the path errors name.
absl::StatusOr<UniqueFd> OpenAt(int dir_fd, const std::string& name, Access access, const std::string& shown);

// Opens base/relative as a directory, to be kept open: OpenAt and renameat relative to it stay inside
// it whatever the user renames later. Components as in OpenUnder; made when `create_dirs`.
absl::StatusOr<UniqueFd> OpenDirUnder(const std::string& base, absl::string_view relative, bool create_dirs);

// When `dir` lies strictly below `base` (both absolute and normalised; compared by components), makes
// sure every component between them is a real directory, made when missing (OpenDirUnder with
// create_dirs): a symbolic link planted there (say OUTPUT_DIR/checkpoints pointing into another job's
// directory) is refused by name. Nothing to check otherwise (OK).
absl::Status CheckDirBelow(const std::string& base, const std::string& dir);

// The path of `dir` below `base` ("" for base itself), both absolute and compared lexically by
// components after normalisation (no link is resolved; a ".." left after normalisation is refused):
// the `relative` to give OpenUnder(base, ...). InvalidArgument naming both when `dir` is not there.
absl::StatusOr<std::string> RelativeBelow(const std::string& base, const std::string& dir);

// A daemon's own directory (the worker's --work_dir: job specs, rank scratch) made private: created
// with mode 0700 when missing (parents 0755); an existing one must be a real directory (not a
// symbolic link) owned by this process's user, and is set to 0700. FailedPrecondition naming the
// directory and the problem (owned by another uid, a link, not a directory) otherwise: a directory
// another user made first (in /tmp, say) is never used. Its ancestors (links resolved) must be owned by
// root or this user and not writable by others unless sticky (as /tmp): else another user could
// replace the directory itself; refused naming the ancestor.
absl::Status MakePrivateDir(const std::string& dir);

// What stands at `fd`: "a regular file", "a FIFO", "a directory", "a character device", ...
std::string DescribeFileType(mode_t mode);

// The size of the regular file open at `fd`.
absl::StatusOr<int64_t> FileSize(int fd);

// Up to `max_bytes` from `offset` of the file open at `fd` (pread; EINTR retried; fewer at its end).
absl::StatusOr<std::string> ReadAt(int fd, int64_t offset, int64_t max_bytes);

// Writes all of `data` at `fd`'s position (EINTR and short writes retried).
absl::Status WriteAll(int fd, absl::string_view data);

// The last line of the file open at `fd` that starts with `prefix` ("" when none), looking only at its
// last `tail_bytes` (a huge log costs no more than that).
std::string LastLineWithPrefix(int fd, absl::string_view prefix, int64_t tail_bytes = 64 << 10);

}  // namespace tessera::userfs

#endif  // TESSERA_COMMON_USERFS_USER_FILES_H_
