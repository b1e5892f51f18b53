// pass@k against the closed form 1 - C(n-c, k) / C(n, k) with independently computed binomials.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "fbt/eval/pass_at_k.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

/// C(n, k) exactly, for n small enough that it fits (n <= 60): the multiplicative formula, where
/// each partial product C(n-k+i, i) is an integer.
uint64_t binomial(uint64_t n, uint64_t k) {
  if (k > n) return 0;
  uint64_t b = 1;
  for (uint64_t i = 1; i <= k; ++i) b = b * (n - k + i) / i;
  return b;
}

/// log C(n, k) via lgamma, for large n.
double log_binomial(double n, double k) { return std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1); }

TEST(PassAtK, MatchesExactBinomialsForSmallN) {
  for (int64_t n : {1, 2, 5, 10, 20, 37, 60})
    for (int64_t c = 0; c <= n; ++c)
      for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{3}, n / 2, n}) {
        if (k < 1 || k > n) continue;
        const double expected = 1.0 - static_cast<double>(binomial(n - c, k)) / static_cast<double>(binomial(n, k));
        EXPECT_NEAR(pass_at_k(n, c, k), expected, 1e-12) << "n=" << n << " c=" << c << " k=" << k;
      }
}

TEST(PassAtK, MatchesLgammaClosedFormForLargeN) {
  struct Case {
    int64_t n, c, k;
  };
  for (const Case& t : {Case{200, 1, 1}, Case{200, 13, 10}, Case{200, 50, 100}, Case{1000, 3, 100}, Case{1000, 999, 1},
                        Case{500, 20, 400}}) {
    const double expected =
        t.n - t.c < t.k ? 1.0 : 1.0 - std::exp(log_binomial(t.n - t.c, t.k) - log_binomial(t.n, t.k));
    EXPECT_NEAR(pass_at_k(t.n, t.c, t.k), expected, 1e-9) << "n=" << t.n << " c=" << t.c << " k=" << t.k;
  }
}

TEST(PassAtK, HandValuesAndEdgeCases) {
  EXPECT_DOUBLE_EQ(pass_at_k(2, 1, 1), 0.5);
  EXPECT_NEAR(pass_at_k(10, 3, 3), 1.0 - 35.0 / 120.0, 1e-15);  // C(7,3) = 35, C(10,3) = 120
  EXPECT_NEAR(pass_at_k(10, 4, 1), 0.4, 1e-15);                 // pass@1 = c / n
  EXPECT_EQ(pass_at_k(10, 0, 3), 0.0);                          // no correct sample
  EXPECT_EQ(pass_at_k(10, 10, 3), 1.0);                         // all correct
  EXPECT_EQ(pass_at_k(10, 8, 3), 1.0);                          // n - c = 2 < k: any 3 include one
  EXPECT_EQ(pass_at_k(1, 1, 1), 1.0);
  EXPECT_EQ(pass_at_k(1, 0, 1), 0.0);
}

TEST(PassAtK, RejectsImpossibleCounts) {
  EXPECT_THROW(pass_at_k(5, 1, 6), Error);   // k > n
  EXPECT_THROW(pass_at_k(5, 6, 1), Error);   // c > n
  EXPECT_THROW(pass_at_k(5, -1, 1), Error);  // negative c
  EXPECT_THROW(pass_at_k(5, 1, 0), Error);   // k < 1
  EXPECT_THROW(pass_at_k(-1, 0, 1), Error);  // negative n
  try {
    pass_at_k(3, 1, 4);
    ADD_FAILURE() << "expected fbt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n=3 c=1 k=4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fbt
