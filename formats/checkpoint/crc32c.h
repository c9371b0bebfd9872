// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF), the
// checksum that checkpoint indexes record for their files. SSE4.2's crc32 instruction where the CPU
// has it, a table otherwise; both give the same value.
#ifndef TESSERA_FORMATS_CHECKPOINT_CRC32C_H_
#define TESSERA_FORMATS_CHECKPOINT_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace tessera::formats::checkpoint {

// Extends `crc` (the value returned for the bytes before; 0 for none) by `n` bytes at `data`.
// Crc32c(Crc32c(0, a), b) == Crc32c(0, a + b).
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);

// The table version, for tests that compare the two.
uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t n);

}  // namespace tessera::formats::checkpoint

#endif  // TESSERA_FORMATS_CHECKPOINT_CRC32C_H_
