// Decoding: the one check, label and pass count of a decoding mode and its fused passes.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "fbt/infer/decoding.h"

namespace fbt {
namespace {

TEST(Decoding, MakeKeepsKOnlyForTheFusedMode) {
  EXPECT_EQ(Decoding::make(DecodeMode::Standard, 3), Decoding{});
  EXPECT_EQ(Decoding::make(DecodeMode::Soft, 3), Decoding{DecodeMode::Soft});
  EXPECT_EQ(Decoding::make(DecodeMode::Fused, 3), (Decoding{DecodeMode::Fused, 3}));
  EXPECT_EQ(Decoding::fused(2), (Decoding{DecodeMode::Fused, 2}));
  testing::expect_error([] { Decoding::fused(0, "--fused-passes"); },
                        {"--fused-passes must be >= 1 for the fused mode (got 0)"});
  testing::expect_error([] { Decoding::make(DecodeMode::Fused, -2); }, {"fused_passes", "got -2"});
}

TEST(Decoding, ProblemLabelAndPasses) {
  EXPECT_EQ(Decoding{}.problem(), "");
  EXPECT_EQ((Decoding{DecodeMode::Fused, 0}).problem(), "must be >= 1 for the fused mode (got 0)");
  EXPECT_EQ((Decoding{DecodeMode::Soft, 2}).problem(), "must be 0 outside the fused mode (got 2)");
  EXPECT_EQ(Decoding{}.label(), "standard");
  EXPECT_EQ(Decoding{DecodeMode::Soft}.label(), "soft");
  EXPECT_EQ(Decoding::fused(3).label(), "fused(3)");
  EXPECT_EQ(Decoding{}.prefill_passes(), 1);
  EXPECT_EQ(Decoding{DecodeMode::Soft}.prefill_passes(), 1);
  EXPECT_EQ(Decoding::fused(3).prefill_passes(), 4);
  EXPECT_FALSE(Decoding{}.feeds_back());
  EXPECT_TRUE(Decoding{DecodeMode::Soft}.feeds_back());
  EXPECT_TRUE(Decoding::fused(1).feeds_back());
}

}  // namespace
}  // namespace fbt
