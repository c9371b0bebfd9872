// The one-line progress display: "step 5/10  loss 5.0603  lr 1.5e-04  31.8k tok/s  ETA 0:03", with
// "  val 4.9810" after the loss once the job has evaluated.
#ifndef TESSERA_CLIENT_PROGRESS_LINE_H_
#define TESSERA_CLIENT_PROGRESS_LINE_H_

#include <cstdint>
#include <string>

namespace tessera::client {

struct Progress {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;
  double val_loss = -1;  // < 0: no evaluation yet.
  double lr = 0;
  double tokens_per_s = 0;
  double eta_seconds = -1;  // < 0: unknown.
};

std::string FormatProgress(const Progress& p);

// "0:07", "1:02:03".
std::string FormatDuration(double seconds);

// "950", "31.8k", "2.4M".
std::string FormatCount(double value);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_PROGRESS_LINE_H_
