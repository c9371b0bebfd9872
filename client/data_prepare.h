// `tessera data prepare INPUT.txt OUT.bin`: byte-level tokens (vocab 256) as flat uint16.
#ifndef TESSERA_CLIENT_DATA_PREPARE_H_
#define TESSERA_CLIENT_DATA_PREPARE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace tessera::client {

// Writes one little-endian uint16 per byte of `input` to `output`; returns the token count.
absl::StatusOr<int64_t> PrepareByteTokens(const std::string& input, const std::string& output);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_DATA_PREPARE_H_
