// The unbiased pass@k estimator (see include/fbt/eval/pass_at_k.h).
#include "fbt/eval/pass_at_k.h"

#include <string>

#include "fbt/util/error.h"

namespace fbt {

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  if (k < 1 || k > n || c < 0 || c > n)
    throw Error("pass_at_k: need 1 <= k <= n and 0 <= c <= n, got n=" + std::to_string(n) + " c=" + std::to_string(c) +
                " k=" + std::to_string(k));
  if (n - c < k) return 1.0;
  // C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (i - k) / i
  double none_correct = 1.0;
  for (int64_t i = n - c + 1; i <= n; ++i) none_correct *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  return 1.0 - none_correct;
}

}  // namespace fbt
