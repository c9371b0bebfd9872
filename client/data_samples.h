// `tessera data samples SPEC [--from G] [--count N]`: what a job reads, sample by sample: for each
// global sample its source (data.blend index, 0 without a blend), the source's sample number, the
// window, and the seq_len + 1 tokens; one JSON object per line. Reads the data as a rank would.
#ifndef TESSERA_CLIENT_DATA_SAMPLES_H_
#define TESSERA_CLIENT_DATA_SAMPLES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::client {

int DataSamplesCommand(const std::string& spec_path, const std::vector<std::string>& overrides, int64_t from,
                       int64_t count);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_DATA_SAMPLES_H_
