// The paired exact McNemar test: do two decoding modes differ in accuracy on the same items?
// (McNemar 1947; the exact binomial form, as the first author's reproduction reports, SPEC §11.)
#pragma once
#include <cstdint>
#include <vector>

namespace fbt {

/// The discordant pairs of two classifiers judged on the same n items, and the test's p-value.
struct McNemarResult {
  int64_t n = 0;   ///< items compared
  int64_t b = 0;   ///< items A got right and B wrong
  int64_t c = 0;   ///< items B got right and A wrong
  double p = 1.0;  ///< two-sided exact p-value, mcnemar_exact_p(b, c)
};

/// The two-sided exact McNemar p-value: under the null hypothesis each of the b + c discordant
/// items is equally likely to favour A or B, so min(b, c) is Binomial(b + c, 1/2)-tailed:
///   p = min(1, 2 · Σ_{i=0}^{min(b,c)} C(b+c, i) / 2^(b+c)),   p = 1 when b + c = 0.
/// Terms are summed in log space (lgamma), so counts in the thousands neither overflow nor
/// underflow; relative error about 1e-13. Throws fbt::Error if b or c is negative.
double mcnemar_exact_p(int64_t b, int64_t c);

/// Counts b and c over items i where a_correct[i] != b_correct[i] and returns them with n and
/// mcnemar_exact_p. Throws fbt::Error if the two vectors differ in length (not the same items).
McNemarResult mcnemar_test(const std::vector<bool>& a_correct, const std::vector<bool>& b_correct);

}  // namespace fbt
