// The exact McNemar test against values computed by hand and by Python's exact integers
// (math.comb and fractions.Fraction: p = min(1, 2·Σ_{i<=min(b,c)} comb(b+c, i) / 2^(b+c))).
#include <gtest/gtest.h>

#include "fbt/eval/mcnemar.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

TEST(McNemar, HandValues) {
  EXPECT_NEAR(mcnemar_exact_p(1, 6), 0.125, 1e-14);   // 2 · (1 + 7) / 128
  EXPECT_NEAR(mcnemar_exact_p(0, 5), 0.0625, 1e-14);  // 2 · 1 / 32
  EXPECT_NEAR(mcnemar_exact_p(12, 0), 2.0 / 4096, 1e-16);
  EXPECT_EQ(mcnemar_exact_p(10, 10), 1.0);         // 2 · (> 1/2) is capped at 1
  EXPECT_NEAR(mcnemar_exact_p(3, 4), 1.0, 1e-14);  // 2 · (1 + 7 + 21 + 35) / 128
  EXPECT_EQ(mcnemar_exact_p(0, 0), 1.0);           // no discordant item
}

TEST(McNemar, MatchesPythonExactIntegers) {
  // /usr/bin/python3: float(min(1, 2 * Fraction(sum(comb(n, i) for i in range(min(b, c) + 1)), 2**n)))
  EXPECT_NEAR(mcnemar_exact_p(37, 58), 0.03960823767054589, 1e-13);
  EXPECT_NEAR(mcnemar_exact_p(58, 37), 0.03960823767054589, 1e-13);  // symmetric in b, c
  EXPECT_NEAR(mcnemar_exact_p(300, 360), 0.02157234823197102, 1e-12);
}

TEST(McNemar, CountsDiscordantPairs) {
  //            items: 0  1  2  3  4  5  6  7
  const std::vector<bool> a{1, 1, 0, 0, 1, 0, 1, 1};
  const std::vector<bool> b{1, 0, 1, 0, 0, 0, 1, 0};
  const auto r = mcnemar_test(a, b);
  EXPECT_EQ(r.n, 8);
  EXPECT_EQ(r.b, 3);               // items 1, 4, 7
  EXPECT_EQ(r.c, 1);               // item 2
  EXPECT_NEAR(r.p, 0.625, 1e-14);  // 2 · (C(4,0) + C(4,1)) / 16
  const auto swapped = mcnemar_test(b, a);
  EXPECT_EQ(swapped.b, 1);
  EXPECT_EQ(swapped.c, 3);
  EXPECT_NEAR(swapped.p, 0.625, 1e-14);
}

TEST(McNemar, RejectsUnpairedOrNegative) {
  EXPECT_THROW(mcnemar_test({true, false}, {true}), Error);
  EXPECT_THROW(mcnemar_exact_p(-1, 3), Error);
}

}  // namespace
}  // namespace fbt
