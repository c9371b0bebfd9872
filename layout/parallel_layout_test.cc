#include "layout/parallel_layout.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "layout/modes.h"
#include "layout/tp_grid.h"

namespace tessera::layout {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ModesTest, NamesParseBack) {
  for (TpMode m : {TpMode::k1D, TpMode::k2D, TpMode::k2p5D, TpMode::k3D}) EXPECT_EQ(*ParseTpMode(Name(m)), m);
  for (SpMode m : {SpMode::kRing, SpMode::kAllToAll}) EXPECT_EQ(*ParseSpMode(Name(m)), m);
  for (PipeSchedule s : {PipeSchedule::kOneFOneB, PipeSchedule::kInterleaved}) EXPECT_EQ(*ParsePipeSchedule(Name(s)), s);
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) EXPECT_EQ(*ParsePrecision(Name(p)), p);
  EXPECT_STREQ(Name(TpMode::k2p5D), "2.5d");
  EXPECT_STREQ(Name(SpMode::kAllToAll), "all_to_all");
}

TEST(ModesTest, UnknownNamesAreErrorsNamingThem) {
  EXPECT_EQ(ParseTpMode("4d").status().message(), "tp_mode \"4d\" is not one of 1d, 2d, 2.5d, 3d");
  EXPECT_THAT(ParsePrecision("fp8").status().message(), HasSubstr("\"fp8\" is not one of fp32, bf16, fp16"));
  EXPECT_FALSE(ParseSpMode("").ok());
  EXPECT_FALSE(ZeroStageOf(4).ok());
  EXPECT_EQ(*ZeroStageOf(2), ZeroStage::kGradients);
}

TEST(ParallelLayoutTest, SizesAndWorld) {
  ParallelLayout l;
  l.dp = 2, l.pp = 3, l.tp = 4, l.sp = 5;
  EXPECT_EQ(l.Size(Axis::kTp), 4);
  EXPECT_EQ(l.WorldSize(), 120);
  l.dp = 1 << 30, l.pp = 1 << 30, l.tp = 1 << 30, l.sp = 1 << 30;
  EXPECT_EQ(l.WorldSize(), INT64_MAX);  // 2^120 does not fit: saturated, never wrapped.
  l.sp = 0;
  EXPECT_EQ(l.WorldSize(), 0);
}

TEST(ParallelLayoutTest, ToStringNamesTheAxesAboveOne) {
  ParallelLayout l;
  EXPECT_EQ(l.ToString(), "single");
  l.dp = 2, l.pp = 2, l.tp = 8, l.sp = 2;
  l.pp_schedule = PipeSchedule::kInterleaved, l.pp_chunks = 2;
  l.tp_mode = TpMode::k2p5D, l.tp_depth = 2;
  l.sp_mode = SpMode::kAllToAll;
  EXPECT_EQ(l.ToString(), "dp2 pp2(interleaved×2) tp8(2.5d,d=2) sp2(all_to_all)");
  l.pp_schedule = PipeSchedule::kZeroBubbleH1, l.pp_chunks = 1;
  EXPECT_EQ(l.ToString(), "dp2 pp2(zb1p) tp8(2.5d,d=2) sp2(all_to_all)");
}

TEST(TpGridTest, ShapesAndSplits) {
  const TpGrid one = TpGridOf(TpMode::k1D, 4);
  EXPECT_TRUE(one.Formed());
  EXPECT_THAT(one.Axes(), ElementsAre());
  EXPECT_EQ(one.HeadSplit(), 4);
  EXPECT_EQ(one.SampleSplit(), 1);
  const TpGrid two = TpGridOf(TpMode::k2D, 9);
  EXPECT_TRUE(two.Formed());
  EXPECT_THAT(two.Axes(), ElementsAre(3, 3));
  EXPECT_EQ(two.WeightSplit(), 9);
  EXPECT_EQ(two.SampleSplit(), 3);
  const TpGrid tess = TpGridOf(TpMode::k2p5D, 8, 2);
  EXPECT_TRUE(tess.Formed());
  EXPECT_THAT(tess.Axes(), ElementsAre(2, 2, 2));
  EXPECT_EQ(tess.SampleSplit(), 4);
  EXPECT_EQ(tess.HiddenSplit(), 2);
  const TpGrid cube = TpGridOf(TpMode::k3D, 27);
  EXPECT_TRUE(cube.Formed());
  EXPECT_EQ(cube.HiddenSplit(), 9);
  EXPECT_EQ(cube.WeightSplit(), 27);
  EXPECT_FALSE(TpGridOf(TpMode::k2D, 8).Formed());
  EXPECT_FALSE(TpGridOf(TpMode::k3D, 1).Formed());  // q = 1 is no grid.
  EXPECT_EQ(SquareSide(2147483647), 46340);
  EXPECT_EQ(CubeSide(2147483647), 1290);
}

}  // namespace
}  // namespace tessera::layout
