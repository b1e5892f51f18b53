// NorMuon: Newton–Schulz orthogonalisation and the per-row normalised update (SPEC §6).
#include "fbt/train/normuon.h"

#include <cmath>
#include <algorithm>
#include <map>
#include <numeric>

#include "fbt/dist/communicator.h"
#include "fbt/util/error.h"

namespace fbt {

torch::Tensor newton_schulz5(const torch::Tensor& G, int64_t steps) {
  if (G.dim() != 2) throw Error("newton_schulz5: expected a 2-D matrix, got " + std::to_string(G.dim()) + "-D");
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  const bool transpose = G.size(0) > G.size(1);
  auto X = G.to(G.is_cuda() ? torch::kBFloat16 : torch::kFloat);
  if (transpose) X = X.t();
  X = X / (X.norm() + 1e-7);  // spectral norm ≤ Frobenius norm ≤ 1: inside the iteration's basin
  for (int64_t i = 0; i < steps; ++i) {
    auto A = torch::mm(X, X.t());          // [r,r], r = min(m,n)
    auto B = b * A + c * torch::mm(A, A);  // [r,r]
    X = a * X + torch::mm(B, X);           // [r,max(m,n)]
  }
  if (transpose) X = X.t();
  return X.to(G.scalar_type());
}

NorMuon::NorMuon(std::vector<std::pair<std::string, torch::Tensor>> params, NorMuonOptions options)
    : params_(std::move(params)),
      options_(options),
      orthogonalize_([](const std::vector<torch::Tensor>& U, int64_t steps) {
        std::vector<torch::Tensor> O;
        for (const auto& u : U) O.push_back(newton_schulz5(u, steps));
        return O;
      }),
      momentum_(params_.size()),
      second_moment_(params_.size()) {
  for (const auto& [name, p] : params_)
    if (p.dim() != 2)
      throw Error("NorMuon: parameter '" + name + "' is " + std::to_string(p.dim()) + "-D, not a matrix");
}

void NorMuon::step() {
  torch::NoGradGuard no_grad;
  const auto& o = options_;
  std::vector<size_t> active;  // parameters with a gradient this step
  std::vector<torch::Tensor> U;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& W = params_[i].second;
    const auto& G = W.grad();
    if (!G.defined()) continue;
    auto& M = momentum_[i];
    if (!M.defined()) {
      M = torch::zeros_like(W);
      second_moment_[i] = torch::zeros({W.size(0), 1}, W.options());
    }
    M.lerp_(G, 1.0 - o.momentum);                // M ← β1 M + (1−β1) G
    U.push_back(torch::lerp(G, M, o.momentum));  // Nesterov: (1−β1) G + β1 M
    active.push_back(i);
  }
  const auto orthogonal = orthogonalize_(U, o.ns_steps);
  for (size_t j = 0; j < active.size(); ++j) {
    auto& W = params_[active[j]].second;
    auto& v = second_moment_[active[j]];
    const auto& O = orthogonal[j];  // [m,n]
    v.lerp_(O.square().mean(1, /*keepdim=*/true), 1.0 - o.beta2);
    auto O_hat = O / (v.sqrt() + o.eps);
    O_hat.mul_(O.norm() / (O_hat.norm() + o.eps));  // keep ‖Ô‖_F = ‖O‖_F
    const double shape_scale = std::sqrt(std::max(1.0, double(W.size(0)) / double(W.size(1))));
    W.mul_(1.0 - o.lr * o.weight_decay);
    W.add_(O_hat, -o.lr * shape_scale);
  }
}

NamedTensors NorMuon::state() const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!momentum_[i].defined()) continue;
    out.emplace_back(params_[i].first + ".momentum", momentum_[i]);
    out.emplace_back(params_[i].first + ".row_second_moment", second_moment_[i]);
  }
  return out;
}

void NorMuon::load_state(const NamedTensors& tensors, const std::string& path) {
  std::map<std::string, torch::Tensor> byname(tensors.begin(), tensors.end());
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& [name, W] = params_[i];
    const bool has_m = byname.count(name + ".momentum"), has_v = byname.count(name + ".row_second_moment");
    if (!has_m && !has_v) continue;  // no step taken for this parameter
    auto get = [&, &name = name, &W = W](const std::string& suffix, torch::IntArrayRef shape) {
      auto it = byname.find(name + suffix);
      if (it == byname.end()) throw Error(path + ": missing optimiser tensor '" + name + suffix + "'");
      if (it->second.sizes() != shape)
        throw Error(path + ": optimiser tensor '" + name + suffix + "' has the wrong shape");
      return it->second.to(W.device(), W.scalar_type()).clone();
    };
    momentum_[i] = get(".momentum", W.sizes());
    second_moment_[i] = get(".row_second_moment", {W.size(0), 1});
  }
}

std::vector<torch::Tensor> orthogonalize_sharded(Communicator& comm, const std::vector<torch::Tensor>& U,
                                                 int64_t ns_steps) {
  // Greedy balance: largest cost first, to the least-loaded rank (deterministic on every rank).
  std::vector<size_t> order(U.size());
  std::iota(order.begin(), order.end(), 0);
  auto cost = [&](size_t i) {
    const double m = double(U[i].size(0)), n = double(U[i].size(1));
    return m * n * std::min(m, n);
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost(a) > cost(b); });
  std::vector<double> load(comm.size(), 0.0);
  std::vector<std::vector<size_t>> owned(comm.size());  // matrices per rank
  for (size_t i : order) {
    const auto r = size_t(std::min_element(load.begin(), load.end()) - load.begin());
    load[r] += cost(i);
    owned[r].push_back(i);
  }
  std::vector<torch::Tensor> O(U.size());
  for (int64_t r = 0; r < comm.size(); ++r) {
    if (owned[r].empty()) continue;
    for (size_t i : owned[r]) O[i] = r == comm.rank() ? newton_schulz5(U[i], ns_steps) : torch::empty_like(U[i]);
    std::vector<torch::Tensor> mine;
    for (size_t i : owned[r]) mine.push_back(O[i]);
    comm.broadcast(mine, r);
  }
  return O;
}

}  // namespace fbt
