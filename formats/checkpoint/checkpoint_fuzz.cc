// libFuzzer target (tools/fuzz.sh checkpoint): what a resumed or imported run reads from disk, on
// arbitrary bytes — a safetensors file (ReadSafetensors, and its header through
// ParseSafetensorsHeader) and a checkpoint's index.json beside a model.safetensors
// (VerifyCheckpoint: sizes and CRC-32C of every listed file). Property: no crash, no sanitizer
// report, no hang, no allocation beyond the bytes given (kMaxSafetensorsHeader bounds a header).
//
// Input: byte 0 picks the reader (0: safetensors file, 1: header JSON alone, 2: checkpoint index);
// for 2, the next two bytes give the index's length, the rest is model.safetensors.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "formats/checkpoint/checkpoint_dir.h"
#include "formats/checkpoint/safetensors.h"
#include "fuzz/fuzz_files.h"

namespace {

// The scratch directory, with the checkpoint directory VerifyCheckpoint reads.
const std::string& Dir() {
  static const std::string dir = [] {
    const std::string d = tessera::fuzz::ScratchDir("ckpt-fuzz");
    mkdir((d + "/step_00000001").c_str(), 0700);
    return d;
  }();
  return dir;
}

using tessera::fuzz::WriteFile;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int kind = data[0] % 3;
  ++data;
  --size;
  if (kind == 0) {
    const std::string path = Dir() + "/model.safetensors";
    WriteFile(path, data, size);
    std::map<std::string, std::string> metadata;
    tessera::formats::checkpoint::ReadSafetensors(path, &metadata).IgnoreError();
  } else if (kind == 1) {
    tessera::formats::checkpoint::ParseSafetensorsHeader(
        "header", std::string_view(reinterpret_cast<const char*>(data), size), size)
        .IgnoreError();
  } else {
    if (size < 2) return 0;
    const size_t index = std::min<size_t>(size - 2, data[0] | (data[1] << 8));
    const std::string ckpt = Dir() + "/step_00000001";
    WriteFile(ckpt + "/index.json", data + 2, index);
    WriteFile(ckpt + "/model.safetensors", data + 2 + index, size - 2 - index);
    tessera::formats::checkpoint::VerifyCheckpoint(ckpt).IgnoreError();
  }
  return 0;
}
