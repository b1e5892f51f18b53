// Multinomial logistic probes (libtorch L-BFGS) and grouped k-fold cross-validation.
#include "fbt/eval/linear_probe.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include <torch/torch.h>

#include "fbt/util/error.h"

namespace fbt {

torch::Tensor LinearProbe::predict(const torch::Tensor& x) const {
  torch::NoGradGuard no_grad;
  auto z = (x.to(torch::kCPU, torch::kDouble) - mean) / std;  // [N,D]
  return torch::addmm(bias, z, weight).argmax(1);             // [N]
}

LinearProbe fit_probe(const torch::Tensor& x, const torch::Tensor& y, int64_t classes, const ProbeOptions& o) {
  if (x.dim() != 2 || y.dim() != 1 || x.size(0) != y.size(0) || x.size(0) == 0)
    throw Error("probe: features must be [N,D] and labels [N] with N > 0 (got " + std::to_string(x.dim()) +
                "-d features and " + std::to_string(y.numel()) + " labels)");
  if (y.min().item<int64_t>() < 0 || y.max().item<int64_t>() >= classes)
    throw Error("probe: labels must lie in [0, " + std::to_string(classes) + ")");
  auto xd = x.detach().to(torch::kCPU, torch::kDouble);  // [N,D]
  const auto yc = y.to(torch::kCPU, torch::kLong);
  LinearProbe p;
  p.mean = xd.mean(0);
  p.std = xd.std(0, /*unbiased=*/false).clamp_min(1e-8);
  const auto z = (xd - p.mean) / p.std;  // [N,D]
  p.weight = torch::zeros({x.size(1), classes}, torch::kDouble).requires_grad_(true);
  p.bias = torch::zeros({classes}, torch::kDouble).requires_grad_(true);
  torch::optim::LBFGS lbfgs({p.weight, p.bias},
                            torch::optim::LBFGSOptions(1).max_iter(o.max_iter).line_search_fn("strong_wolfe"));
  lbfgs.step([&] {
    lbfgs.zero_grad();
    auto loss =
        torch::nn::functional::cross_entropy(torch::addmm(p.bias, z, p.weight), yc) + o.l2 * p.weight.pow(2).sum();
    loss.backward();
    return loss;
  });
  p.weight = p.weight.detach();
  p.bias = p.bias.detach();
  return p;
}

void ProbeOptions::validate() const {
  if (!std::isfinite(l2) || l2 < 0)
    throw Error("probe: --l2 must be a finite number >= 0 (got " + std::to_string(l2) + ")");
  if (max_iter < 1) throw Error("probe: --max-iter must be >= 1 (got " + std::to_string(max_iter) + ")");
  if (folds < 2) throw Error("probe: --folds must be >= 2 (got " + std::to_string(folds) + ")");
}

std::vector<int64_t> grouped_folds(const std::vector<std::string>& groups, int64_t folds, uint64_t seed) {
  if (folds < 2) throw Error("probe: --folds must be >= 2 (got " + std::to_string(folds) + ")");
  std::map<std::string, int64_t> sizes;
  for (const auto& g : groups) ++sizes[g];
  if (static_cast<int64_t>(sizes.size()) < folds)
    throw Error("probe: " + std::to_string(sizes.size()) + " distinct groups cannot fill " + std::to_string(folds) +
                " folds without splitting a group");
  std::vector<std::pair<std::string, int64_t>> order(sizes.begin(), sizes.end());
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<int64_t> fill(folds, 0);
  std::map<std::string, int64_t> fold_of;
  for (const auto& [g, n] : order) {
    const int64_t f = std::min_element(fill.begin(), fill.end()) - fill.begin();
    fold_of[g] = f;
    fill[f] += n;
  }
  std::vector<int64_t> out;
  for (const auto& g : groups) out.push_back(fold_of[g]);
  return out;
}

ProbeScore cross_validate_probe(const torch::Tensor& x, const torch::Tensor& y, int64_t classes,
                                const std::vector<std::string>& groups, const ProbeOptions& o) {
  if (static_cast<int64_t>(groups.size()) != y.size(0))
    throw Error("probe: " + std::to_string(groups.size()) + " groups for " + std::to_string(y.size(0)) + " labels");
  const auto fold = torch::tensor(grouped_folds(groups, o.folds, o.seed), torch::kLong);  // [N]
  const auto yc = y.to(torch::kCPU, torch::kLong);
  std::vector<double> acc;
  ProbeScore s;
  for (int64_t f = 0; f < o.folds; ++f) {
    const auto test = (fold == f).nonzero().squeeze(1), train = (fold != f).nonzero().squeeze(1);
    const auto probe = fit_probe(x.index_select(0, train), yc.index_select(0, train), classes, o);
    const auto truth = yc.index_select(0, test);
    acc.push_back((probe.predict(x.index_select(0, test)) == truth).to(torch::kDouble).mean().item<double>());
    const int64_t majority = torch::bincount(yc.index_select(0, train), {}, classes).argmax().item<int64_t>();
    s.majority += (truth == majority).to(torch::kDouble).mean().item<double>() / o.folds;
  }
  const auto a = torch::tensor(acc, torch::kDouble);
  s.accuracy = a.mean().item<double>();
  s.stderr_ = a.std(/*unbiased=*/true).item<double>() / std::sqrt(static_cast<double>(o.folds));
  return s;
}

}  // namespace fbt
