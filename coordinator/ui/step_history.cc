#include "coordinator/ui/step_history.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace tessera::coordinator::ui {

absl::StatusOr<StepHistory> ReadStepHistory(const std::string& path, int64_t max_bytes) {
  StepHistory h;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return h;
    return absl::FailedPreconditionError(absl::StrCat(path, ": cannot open: ", strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  }
  const int64_t size = st.st_size;
  const int64_t start = size > max_bytes ? size - max_bytes : 0;
  std::string data(static_cast<size_t>(size - start), '\0');
  int64_t got = 0;
  while (got < static_cast<int64_t>(data.size())) {
    const ssize_t n = pread(fd, data.data() + got, data.size() - got, start + got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // Truncated meanwhile: what was read.
    got += n;
  }
  close(fd);
  data.resize(static_cast<size_t>(got));
  size_t from = 0;
  if (start > 0) {  // Begins inside a line: drop that partial line.
    const size_t nl = data.find('\n');
    from = nl == std::string::npos ? data.size() : nl + 1;
  }
  h.bytes_skipped = start + static_cast<int64_t>(from);
  // Complete lines only (an unfinished last one is being written), straight from the buffer;
  // ParseStepLine refuses a line longer than steplog::kMaxStepLineBytes.
  const std::string_view text(data);
  for (size_t nl = text.find('\n', from); nl != std::string_view::npos; from = nl + 1, nl = text.find('\n', from)) {
    std::optional<steplog::StepRecord> r = steplog::ParseStepLine(text.substr(from, nl - from));
    if (r.has_value() && r->warning.has_value()) continue;  // A warning line: not a step.
    if (!r.has_value() || r->step < 1) {
      ++h.bad_lines;
      continue;
    }
    // A step at or before the newest one: a later attempt, resumed from a checkpoint, trains again
    // from here; what earlier attempts logged past it is superseded.
    if (!h.steps.empty() && r->step <= h.steps.rbegin()->first) {
      h.steps.erase(h.steps.lower_bound(r->step), h.steps.end());
      h.val_loss.erase(h.val_loss.lower_bound(r->step), h.val_loss.end());
    }
    if (r->val_loss.has_value()) h.val_loss[r->step] = *r->val_loss;
    h.steps[r->step] = *r;
  }
  return h;
}

}  // namespace tessera::coordinator::ui
