// The paired exact McNemar test (see include/fbt/eval/mcnemar.h).
#include "fbt/eval/mcnemar.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "fbt/util/error.h"

namespace fbt {

double mcnemar_exact_p(int64_t b, int64_t c) {
  if (b < 0 || c < 0)
    throw Error("mcnemar_exact_p: counts must be >= 0, got b=" + std::to_string(b) + " c=" + std::to_string(c));
  const int64_t n = b + c;
  if (n == 0) return 1.0;
  const double log_half_n = static_cast<double>(n) * std::log(0.5);
  const double lg_n1 = std::lgamma(static_cast<double>(n) + 1);
  double tail = 0;  // P(X <= min(b, c)), X ~ Binomial(n, 1/2)
  for (int64_t i = 0; i <= std::min(b, c); ++i)
    tail += std::exp(lg_n1 - std::lgamma(static_cast<double>(i) + 1) - std::lgamma(static_cast<double>(n - i) + 1) +
                     log_half_n);
  return std::min(1.0, 2 * tail);
}

McNemarResult mcnemar_test(const std::vector<bool>& a_correct, const std::vector<bool>& b_correct) {
  if (a_correct.size() != b_correct.size())
    throw Error("mcnemar_test: the two modes were judged on " + std::to_string(a_correct.size()) + " and " +
                std::to_string(b_correct.size()) + " items; a paired test needs the same items");
  McNemarResult r;
  r.n = static_cast<int64_t>(a_correct.size());
  for (size_t i = 0; i < a_correct.size(); ++i) {
    r.b += a_correct[i] && !b_correct[i];
    r.c += !a_correct[i] && b_correct[i];
  }
  r.p = mcnemar_exact_p(r.b, r.c);
  return r;
}

}  // namespace fbt
