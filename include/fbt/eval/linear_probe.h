// L2-regularised multinomial logistic probes with grouped k-fold cross-validation (SPEC §8,
// paper App. F). The fit is libtorch's L-BFGS (strong Wolfe line search) on the mean softmax
// cross-entropy + λ‖W‖² over standardised features (mean 0, std 1 per feature, statistics of
// the training fold); the bias is not penalised.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

namespace fbt {

/// Settings of one probe fit and of the cross-validation around it.
struct ProbeOptions {
  double l2 = 1e-3;        ///< λ of λ‖W‖²
  int64_t max_iter = 200;  ///< L-BFGS iterations
  int64_t folds = 4;       ///< k of grouped k-fold cross-validation (≥ 2)
  uint64_t seed = 0;       ///< assignment of groups to folds

  /// Throws fbt::Error naming the flag (--l2, --max-iter, --folds) unless l2 is finite and ≥ 0,
  /// max_iter ≥ 1 and folds ≥ 2.
  void validate() const;
};

/// A fitted probe: logits = ((x - mean) / std) · W + b.
struct LinearProbe {
  torch::Tensor mean, std;  ///< [D] feature standardisation
  torch::Tensor weight;     ///< [D,C]
  torch::Tensor bias;       ///< [C]

  /// Predicted class per row of x [N,D] -> int64 [N].
  torch::Tensor predict(const torch::Tensor& x) const;
};

/// Fits a probe on features x [N,D] (any float dtype; fitted in float64 on the CPU) and labels
/// y [N] int64 in [0, classes). Throws fbt::Error if N = 0, shapes disagree or a label is out
/// of range.
LinearProbe fit_probe(const torch::Tensor& x, const torch::Tensor& y, int64_t classes, const ProbeOptions& options);

/// Fold of each example (0..folds-1): whole groups are assigned, shuffled with `seed`, each to
/// the fold with the fewest examples so far (largest groups first), so no group is split and
/// the folds are about equal in size. Throws fbt::Error if there are fewer distinct groups
/// than folds or folds < 2.
std::vector<int64_t> grouped_folds(const std::vector<std::string>& groups, int64_t folds, uint64_t seed);

/// Cross-validated accuracy of a probe and of the majority-class baseline.
struct ProbeScore {
  double accuracy = 0;  ///< mean over folds of the held-out accuracy
  double stderr_ = 0;   ///< standard deviation of the fold accuracies / sqrt(folds)
  double majority = 0;  ///< mean over folds of the held-out accuracy of the training fold's most frequent class
};

/// Grouped k-fold cross-validation (grouped_folds) of fit_probe on x [N,D], y [N] (classes as in
/// fit_probe) with groups[i] the group of example i. Throws fbt::Error as fit_probe and
/// grouped_folds, or if groups.size() != N.
ProbeScore cross_validate_probe(const torch::Tensor& x, const torch::Tensor& y, int64_t classes,
                                const std::vector<std::string>& groups, const ProbeOptions& options);

}  // namespace fbt
