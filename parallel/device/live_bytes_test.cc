#include "parallel/device/live_bytes.h"

#include <ATen/ATen.h>

#include "gtest/gtest.h"

namespace tessera::parallel {
namespace {

TEST(LiveBytesTest, CountsTensorsWhileTheyLiveAndKeepsThePeak) {
  InstallLiveBytesCounter();
  InstallLiveBytesCounter();  // A second call changes nothing.
  ASSERT_TRUE(LiveBytesCounted());
  const int64_t before = LiveBytes();
  ResetPeakLiveBytes();
  {
    at::Tensor a = at::ones({1000}, at::kFloat);   // 4000 bytes
    at::Tensor b = at::zeros({250}, at::kDouble);  // 2000 bytes
    EXPECT_EQ(LiveBytes() - before, 6000);
  }
  EXPECT_EQ(LiveBytes(), before);
  EXPECT_EQ(PeakLiveBytes() - before, 6000) << "the peak stays after the tensors are freed";
  ResetPeakLiveBytes();
  EXPECT_EQ(PeakLiveBytes(), before);
}

}  // namespace
}  // namespace tessera::parallel
