// Byte-level BPE's alphabet: GPT-2's reversible map from the 256 byte values to printable Unicode
// characters (bytes 33..126, 161..172 and 174..255 map to the code point of the same value; the other
// 68 bytes, in increasing order, to U+0100, U+0101, ...). Vocabulary and merges in a byte-level
// tokenizer.json are written in this alphabet.
#ifndef TESSERA_FORMATS_DATA_BYTE_LEVEL_H_
#define TESSERA_FORMATS_DATA_BYTE_LEVEL_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tessera::formats::data {

// The UTF-8 encoding of byte `b`'s character.
const std::string& ByteLevelChar(unsigned char b);

// Every byte of `bytes` replaced by its character.
std::string ByteLevelEncode(std::string_view bytes);

// The inverse: fails when `text` holds a character outside the alphabet (or is not UTF-8).
absl::StatusOr<std::string> ByteLevelDecode(std::string_view text);

}  // namespace tessera::formats::data

#endif  // TESSERA_FORMATS_DATA_BYTE_LEVEL_H_
