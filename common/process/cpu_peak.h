// The nominal peak FP32 FLOP/s of `threads` cores of this machine, for MFU where no device peak is
// given: 32 FLOP per cycle per core (two 8-wide FMA units) at the clock /proc/cpuinfo reports
// (2.5 GHz when it reports none). A yardstick for comparing runs, not a measured ceiling.
#ifndef TESSERA_COMMON_PROCESS_CPU_PEAK_H_
#define TESSERA_COMMON_PROCESS_CPU_PEAK_H_

namespace tessera::process {

double CpuPeakFlops(int threads);

}  // namespace tessera::process

#endif  // TESSERA_COMMON_PROCESS_CPU_PEAK_H_
