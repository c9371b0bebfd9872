#include "common/process/cpu_peak.h"

#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"

namespace tessera::process {
namespace {

double CpuHz() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu MHz", 0) == 0) {
      double mhz = 0;
      if (absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(line.find(':') + 1)), &mhz) && mhz > 0) {
        return mhz * 1e6;
      }
    }
  }
  return 2.5e9;
}

}  // namespace

double CpuPeakFlops(int threads) { return (threads > 0 ? threads : 1) * 32.0 * CpuHz(); }

}  // namespace tessera::process
