#include "client/progress_line.h"

#include "gtest/gtest.h"

namespace tessera::client {
namespace {

TEST(ProgressLineTest, FormatsStepLossThroughputAndEta) {
  Progress p{.step = 5, .total_steps = 10, .loss = 5.06027, .lr = 1.46e-4, .tokens_per_s = 31773, .eta_seconds = 3.2};
  EXPECT_EQ(FormatProgress(p), "step 5/10  loss 5.0603  lr 1.46e-04  31.8k tok/s  ETA 0:03");
  p.eta_seconds = -1;
  EXPECT_EQ(FormatProgress(p), "step 5/10  loss 5.0603  lr 1.46e-04  31.8k tok/s");
  p.val_loss = 4.98104;
  EXPECT_EQ(FormatProgress(p), "step 5/10  loss 5.0603  val 4.9810  lr 1.46e-04  31.8k tok/s");
}

TEST(ProgressLineTest, DurationsAndCounts) {
  EXPECT_EQ(FormatDuration(3723), "1:02:03");
  EXPECT_EQ(FormatDuration(59.6), "1:00");
  EXPECT_EQ(FormatCount(950), "950");
  EXPECT_EQ(FormatCount(2.4e6), "2.4M");
}

}  // namespace
}  // namespace tessera::client
