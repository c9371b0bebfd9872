#include "parallel/device/device.h"

#include <ATen/Context.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::parallel {
namespace {

TEST(DeviceTest, CpuAlwaysAndCudaOnlyWithAGpu) {
  auto cpu = SelectDevice({DeviceKind::kCpu, 3});
  ASSERT_TRUE(cpu.ok());
  EXPECT_TRUE(cpu->is_cpu());
  auto cuda = SelectDevice({DeviceKind::kCuda, 1});
  if (at::hasCUDA()) {
    ASSERT_TRUE(cuda.ok());
    EXPECT_EQ(cuda->index(), 1);
  } else {
    EXPECT_THAT(cuda.status().message(), ::testing::HasSubstr("device cuda:1 requested"));
  }
}

}  // namespace
}  // namespace tessera::parallel
