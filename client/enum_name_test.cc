#include "client/enum_name.h"

#include "gtest/gtest.h"
#include "tessera/v1/cluster.pb.h"

namespace tessera::client {
namespace {

TEST(EnumNameTest, KnownValuesLoseTheirPrefix) {
  EXPECT_EQ(EnumName(v1::JobState_Name(v1::JOB_STATE_RUNNING), "JOB_STATE_", v1::JOB_STATE_RUNNING), "RUNNING");
  EXPECT_EQ(EnumName(v1::Worker::State_Name(v1::Worker::STATE_LOST), "STATE_", v1::Worker::STATE_LOST), "LOST");
}

// Before EnumName the CLI took substr(10) of JobState_Name(): "" for a number it does not know,
// and std::out_of_range ended `tessera jobs`.
TEST(EnumNameTest, UnknownNumbersDoNotThrow) {
  const auto unknown = static_cast<v1::JobState>(99);
  ASSERT_EQ(v1::JobState_Name(unknown), "");
  EXPECT_EQ(EnumName(v1::JobState_Name(unknown), "JOB_STATE_", unknown), "UNKNOWN(99)");
  EXPECT_EQ(EnumName("OTHER", "JOB_STATE_", 7), "UNKNOWN(7)");
  EXPECT_EQ(EnumName("JOB_STATE_", "JOB_STATE_", 8), "UNKNOWN(8)");
}

}  // namespace
}  // namespace tessera::client
