// libFuzzer target (tools/fuzz.sh token_files): the token-file readers on arbitrary bytes — flat
// uint16/uint32, llm.c (header + ids) and Megatron indexed datasets (.idx against .bin) — opened as
// a training run opens them (TokenDataset::Open, in order and shuffled, with a validation split),
// then every window read. Property: no crash, no sanitizer report, no hang; a file that opens yields
// windows whose reads either succeed with seq_len + 1 ids below the vocabulary or fail cleanly.
//
// Input: byte 0 picks the format (flat16, flat32, llmc, megatron, auto), byte 1 the window length,
// byte 2 the split; for megatron the next two bytes give the .idx length, the rest is .bin.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "formats/data/indexed_dataset.h"
#include "formats/data/token_dataset.h"
#include "fuzz/fuzz_files.h"

namespace {

using tessera::formats::data::DataFormat;
using tessera::formats::data::DataSplit;

const std::string& Dir() { return tessera::fuzz::ScratchDir("token-fuzz"); }

using tessera::fuzz::WriteFile;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const int kind = data[0] % 5;
  const int seq_len = 1 + data[1] % 64;
  const int split = data[2] % 3;
  data += 3;
  size -= 3;
  const std::string prefix = Dir() + "/data";
  unlink((prefix + ".bin").c_str());
  unlink((prefix + ".idx").c_str());
  tessera::formats::data::TokenDatasetOptions o;
  o.seq_len = seq_len;
  o.vocab = 1000;
  o.path = prefix + ".bin";
  if (kind == 3) {
    if (size < 2) return 0;
    const size_t idx = std::min<size_t>(size - 2, data[0] | (data[1] << 8));
    WriteFile(prefix + ".idx", data + 2, idx);
    WriteFile(prefix + ".bin", data + 2 + idx, size - 2 - idx);
    o.format = DataFormat::kMegatron;
    tessera::formats::data::ReadIndexedDatasetIndex(prefix + ".idx", size - 2 - idx).IgnoreError();
    o.path = prefix;
  } else {
    WriteFile(o.path, data, size);
    o.format = kind == 2 ? DataFormat::kLlmc : kind == 4 ? DataFormat::kAuto : DataFormat::kFlat;
    o.token_bytes = kind == 1 ? 4 : 2;
  }
  for (bool shuffle : {false, true}) {
    o.shuffle = shuffle;
    o.split = split == 0 ? DataSplit::kAll : split == 1 ? DataSplit::kTrain : DataSplit::kValid;
    o.valid_fraction = split == 0 ? 0 : 0.25;
    auto ds = tessera::formats::data::TokenDataset::Open(o);
    if (!ds.ok()) continue;
    std::vector<int64_t> out;
    const int64_t n = std::min<int64_t>((*ds)->num_windows(), 64);
    for (int64_t g = 0; g < n + 2; ++g) {  // Past the end too: the next epoch.
      out.clear();
      if ((*ds)->Read(g, &out).ok()) {
        if (out.size() != static_cast<size_t>(seq_len + 1)) std::abort();
        for (int64_t t : out) {
          if (t < 0 || t >= o.vocab) std::abort();
        }
      }
    }
  }
  return 0;
}
