// UTF-8 validation: text entering the tokenizer, text shown to people (the CLI, the dashboard).
#ifndef TESSERA_COMMON_TEXT_UTF8_H_
#define TESSERA_COMMON_TEXT_UTF8_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::text {

// The byte offset of the first byte that does not begin a well-formed UTF-8 sequence (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF, no truncated sequence), or -1 when `text` is
// valid UTF-8.
int64_t FirstInvalidUtf8(std::string_view text);

// `text` with every maximal ill-formed subsequence replaced by U+FFFD (Unicode's "maximal subpart"
// practice, as Python's errors="replace" and Rust's from_utf8_lossy do it).
std::string Utf8Lossy(std::string_view text);

}  // namespace tessera::text

#endif  // TESSERA_COMMON_TEXT_UTF8_H_
