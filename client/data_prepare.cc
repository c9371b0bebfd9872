#include "client/data_prepare.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tessera::client {

absl::StatusOr<int64_t> PrepareByteTokens(const std::string& input, const std::string& output) {
  std::ifstream in(input, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(input, ": cannot read: ", std::strerror(errno)));
  const std::string tmp = output + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat(output, ": cannot write: ", std::strerror(errno)));
  std::vector<char> buf(1 << 20);
  std::vector<uint16_t> tokens;
  int64_t count = 0;
  while (in) {
    in.read(buf.data(), buf.size());
    const std::streamsize n = in.gcount();
    tokens.resize(n);
    for (std::streamsize i = 0; i < n; ++i) tokens[i] = static_cast<uint8_t>(buf[i]);  // x86 is little-endian.
    out.write(reinterpret_cast<const char*>(tokens.data()), n * 2);
    count += n;
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(output, ": write failed"));
  if (std::rename(tmp.c_str(), output.c_str()) != 0) {
    return absl::InternalError(absl::StrCat(output, ": rename failed: ", std::strerror(errno)));
  }
  if (count == 0) return absl::InvalidArgumentError(absl::StrCat(input, ": is empty"));
  return count;
}

}  // namespace tessera::client
