// Code-generation metric: the unbiased pass@k estimator (Chen et al. 2021, "Evaluating Large
// Language Models Trained on Code", the HumanEval paper, section 2.1).
#pragma once
#include <cstdint>

namespace fbt {

/// The probability that at least one of k samples drawn without replacement from n generated
/// samples, c of which are correct, is correct: 1 - C(n-c, k) / C(n, k). Computed as the paper's
/// numerically stable product 1 - prod_{i=n-c+1}^{n} (1 - k/i); 1.0 when n - c < k (every draw of
/// k holds a correct sample). Average it over problems for the benchmark score.
/// Throws fbt::Error unless 1 <= k <= n and 0 <= c <= n.
double pass_at_k(int64_t n, int64_t c, int64_t k);

}  // namespace fbt
