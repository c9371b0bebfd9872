#include "common/userfs/user_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace tessera::userfs {
namespace {

absl::Status SystemError(const std::string& path, const char* what, int err) {
  const std::string message = absl::StrCat(path, ": cannot ", what, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  return absl::UnavailableError(message);
}

// Why openat refused `name` under `dir` (ELOOP/ENOTDIR/ENXIO): what stands there, without following it.
absl::Status Refused(int dir, const std::string& name, const std::string& path, const char* wanted, int err) {
  struct stat st {};
  if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return SystemError(path, "open", err);
  if (S_ISLNK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": is a symbolic link; refused (files under a job's directory are never followed out)"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat(path, ": is ", DescribeFileType(st.st_mode), ", not ", wanted, "; refused"));
}

absl::StatusOr<std::vector<std::string>> Components(absl::string_view relative) {
  std::vector<std::string> parts = absl::StrSplit(relative, '/');
  for (const std::string& p : parts) {
    if (p.empty() || p == "." || p == ".." || p.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("\"", relative, "\": not a relative path of plain components"));
    }
  }
  return parts;
}

// Opens `base` and walks `dirs` below it, each a directory opened with O_NOFOLLOW (made when `create`).
absl::StatusOr<UniqueFd> WalkDirs(const std::string& base, const std::vector<std::string>& dirs, bool create,
                                  std::string* path) {
  *path = base;
  UniqueFd dir(open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid() && errno == ENOENT && create) {
    std::error_code ec;
    std::filesystem::create_directories(base, ec);  // `base` is confined by the caller.
    dir = UniqueFd(open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  if (!dir.valid()) return SystemError(base, "open the directory", errno);
  for (const std::string& name : dirs) {
    *path = absl::StrCat(*path, "/", name);
    int fd = openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
      if (mkdirat(dir.get(), name.c_str(), 0755) != 0 && errno != EEXIST) return SystemError(*path, "create", errno);
      fd = openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) {
      const int err = errno;
      if (err == ELOOP || err == ENOTDIR) return Refused(dir.get(), name, *path, "a directory", err);
      return SystemError(*path, "open the directory", err);
    }
    dir = UniqueFd(fd);
  }
  return dir;
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) close(fd_);
}

int UniqueFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

absl::Status CheckDirBelow(const std::string& base, const std::string& dir) {
  if (base.empty() || dir.size() <= base.size() + 1 || dir.compare(0, base.size(), base) != 0 ||
      (base.back() != '/' && dir[base.size()] != '/')) {
    return absl::OkStatus();
  }
  const std::string relative = dir.substr(base.back() == '/' ? base.size() : base.size() + 1);
  auto opened = OpenDirUnder(base, relative, /*create_dirs=*/true);
  return opened.ok() ? absl::OkStatus() : opened.status();
}

absl::StatusOr<std::string> RelativeBelow(const std::string& base, const std::string& dir) {
  const std::filesystem::path b = std::filesystem::path(base).lexically_normal();
  const std::filesystem::path d = std::filesystem::path(dir).lexically_normal();
  auto refuse = [&] { return absl::InvalidArgumentError(absl::StrCat(dir, ": not below ", base)); };
  if (!b.is_absolute() || !d.is_absolute()) return refuse();
  auto bi = b.begin(), di = d.begin();
  for (; bi != b.end() && !bi->empty(); ++bi, ++di) {  // A trailing "/" normalises to an empty last part.
    if (di == d.end() || *bi != *di) return refuse();
  }
  std::string relative;
  for (; di != d.end(); ++di) {
    if (di->empty()) continue;
    if (*di == "..") return refuse();
    relative = relative.empty() ? di->string() : absl::StrCat(relative, "/", di->string());
  }
  return relative;
}

namespace {

// Whether every directory from / down to `parent` is safe to hold a private directory: each link on the
// way (as given) owned by root or this user (else its owner could re-point it), and each directory
// reached (links resolved) owned by root or this user and not writable by others unless sticky (/tmp)
// — else another user could rename the private directory away and put their own in its place. A
// directory of this user's own group (a user-private group, umask 002) may be group-writable.
// FailedPrecondition naming the first unsafe one.
absl::Status CheckAncestors(const std::string& dir, const std::filesystem::path& parent) {
  auto unsafe = [&](const std::string& what, const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat(dir, ": its ancestor ", what, " ", why, ": choose another place"));
  };
  std::filesystem::path at;
  for (const std::filesystem::path& part : parent) {  // As given: the links' owners.
    at /= part;
    struct stat st {};
    if (lstat(at.c_str(), &st) != 0) return absl::FailedPreconditionError(absl::StrCat(dir, ": ", at.string(), ": ", std::strerror(errno)));
    if (S_ISLNK(st.st_mode) && st.st_uid != 0 && st.st_uid != geteuid()) {
      return unsafe(at.string(), absl::StrCat("is a symbolic link owned by uid ", st.st_uid, ", who could re-point it"));
    }
  }
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(parent, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat(dir, ": its parent cannot be resolved: ", ec.message()));
  at.clear();
  for (const std::filesystem::path& part : real) {  // Resolved: the directories'.
    at /= part;
    struct stat st {};
    if (stat(at.c_str(), &st) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(dir, ": ", at.string(), ": ", std::strerror(errno)));
    }
    if (st.st_uid != 0 && st.st_uid != geteuid()) {
      return unsafe(at.string(), absl::StrCat("is owned by uid ", st.st_uid, ", who could replace it"));
    }
    const bool own_group = st.st_uid == geteuid() && st.st_gid == getegid();
    const mode_t others = own_group ? S_IWOTH : (S_IWGRP | S_IWOTH);
    if ((st.st_mode & others) != 0 && (st.st_mode & S_ISVTX) == 0) {
      return unsafe(at.string(), absl::StrCat("is writable by other users (mode 0", absl::StrFormat("%o", st.st_mode & 07777),
                                              ", not sticky), who could replace it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MakePrivateDir(const std::string& dir_in) {
  if (dir_in.empty()) return absl::InvalidArgumentError("an empty directory name");
  std::error_code ec;
  std::string dir = std::filesystem::absolute(dir_in, ec).lexically_normal().string();
  if (ec) return absl::FailedPreconditionError(absl::StrCat(dir_in, ": ", ec.message()));
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::filesystem::path parent = std::filesystem::path(dir).parent_path();
  // Missing parents 0755 (not 0777 less the umask: under umask 002 they would be group-writable).
  std::filesystem::path made;
  for (const std::filesystem::path& part : parent) {
    made /= part;
    if (mkdir(made.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::FailedPreconditionError(absl::StrCat(dir, ": cannot create ", made.string(), ": ", std::strerror(errno)));
    }
  }
  if (absl::Status safe = CheckAncestors(dir, parent); !safe.ok()) return safe;
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(absl::StrCat(dir, ": cannot create: ", std::strerror(errno)));
  }
  // Opened without following a link, then checked and changed through the descriptor: what is checked
  // is what is changed.
  UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    struct stat st {};
    const int err = errno;
    if (lstat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(dir, ": is ", DescribeFileType(st.st_mode), ", not a directory"));
    }
    return absl::FailedPreconditionError(absl::StrCat(dir, ": cannot open: ", std::strerror(err)));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return absl::FailedPreconditionError(absl::StrCat(dir, ": ", std::strerror(errno)));
  if (st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(dir, ": is owned by uid ", st.st_uid, ", not by this user (uid ",
                                                      geteuid(), "); another user may have made it: choose another"));
  }
  if ((st.st_mode & 07777) != 0700 && fchmod(fd.get(), 0700) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(dir, ": cannot make it private (0700): ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::string DescribeFileType(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "an unknown kind of file";
}

absl::StatusOr<UniqueFd> OpenDirUnder(const std::string& base, absl::string_view relative, bool create_dirs) {
  std::vector<std::string> parts;
  if (!relative.empty()) {
    auto c = Components(relative);
    if (!c.ok()) return c.status();
    parts = *std::move(c);
  }
  std::string path;
  return WalkDirs(base, parts, create_dirs, &path);
}

absl::StatusOr<UniqueFd> OpenUnder(const std::string& base, absl::string_view relative, const OpenOptions& options) {
  auto parts = Components(relative);
  if (!parts.ok()) return parts.status();
  const std::string name = parts->back();
  parts->pop_back();
  std::string path;
  auto dir = WalkDirs(base, *parts, options.create_dirs, &path);
  if (!dir.ok()) return dir.status();
  return OpenAt(dir->get(), name, options.access, absl::StrCat(path, "/", name));
}

absl::StatusOr<UniqueFd> OpenAt(int dir_fd, const std::string& name, Access access, const std::string& path) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("\"", name, "\": not a plain file name"));
  }
  int flags = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
  switch (access) {
    case Access::kRead: flags |= O_RDONLY; break;
    case Access::kAppend: flags |= O_WRONLY | O_APPEND | O_CREAT; break;
    case Access::kWrite: flags |= O_WRONLY | O_CREAT; break;  // Truncated only once known regular.
  }
  UniqueFd fd(openat(dir_fd, name.c_str(), flags, 0644));
  if (!fd.valid()) {
    const int err = errno;
    // ELOOP: a symbolic link (O_NOFOLLOW). ENXIO: a FIFO without a reader, opened for writing.
    if (err == ELOOP || err == ENXIO || err == EISDIR) return Refused(dir_fd, name, path, "a regular file", err);
    return SystemError(path, "open", err);
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return SystemError(path, "stat", errno);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": is ", DescribeFileType(st.st_mode), ", not a regular file; refused"));
  }
  if (access != Access::kRead && st.st_nlink > 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": has ", st.st_nlink, " hard links; refused (a write would reach another name)"));
  }
  if (access == Access::kWrite && ftruncate(fd.get(), 0) != 0) return SystemError(path, "truncate", errno);
  const int fl = fcntl(fd.get(), F_GETFL);
  if (fl >= 0) (void)fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK);  // A regular file: blocking I/O as usual.
  return fd;
}

absl::StatusOr<int64_t> FileSize(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return absl::UnavailableError(absl::StrCat("fstat: ", std::strerror(errno)));
  return static_cast<int64_t>(st.st_size);
}

absl::StatusOr<std::string> ReadAt(int fd, int64_t offset, int64_t max_bytes) {
  if (offset < 0 || max_bytes < 0) return absl::InvalidArgumentError("ReadAt: negative offset or size");
  std::string data(static_cast<size_t>(max_bytes), '\0');
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = pread(fd, data.data() + got, data.size() - got, offset + static_cast<int64_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(absl::StrCat("read at offset ", offset + got, ": ", std::strerror(errno)));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  data.resize(got);
  return data;
}

absl::Status WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(absl::StrCat("write: ", std::strerror(errno)));
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

std::string LastLineWithPrefix(int fd, absl::string_view prefix, int64_t tail_bytes) {
  auto size = FileSize(fd);
  if (!size.ok()) return "";
  // From one byte before the tail: whether the tail begins a line shows in that byte.
  const int64_t start = std::max<int64_t>(0, *size - tail_bytes - 1);
  auto data = ReadAt(fd, start, *size - start);
  if (!data.ok()) return "";
  absl::string_view text(*data);
  if (start > 0) {  // Up to the first line that begins inside the tail.
    const size_t nl = text.find('\n');
    text = nl == absl::string_view::npos ? absl::string_view() : text.substr(nl + 1);
  }
  absl::string_view last;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.substr(0, prefix.size()) == prefix) last = line;
  }
  return std::string(last);
}

}  // namespace tessera::userfs
