// NorMuon: Muon's orthogonalised momentum with per-row second-moment normalisation
// (SPEC §6; paper §4; Li et al., arXiv 2510.05491, reference code zichongli5/NorMuon).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "fbt/io/safetensors.h"

namespace fbt {

/// Quintic Newton–Schulz iteration towards the orthogonal polar factor of G [m,n]:
/// X ← X / (‖X‖_F + 1e-7), transposed so that rows ≤ cols; then `steps` times
/// A = X Xᵀ, X ← a X + (b A + c A²) X with (a, b, c) = (3.4445, −4.7750, 2.0315);
/// transposed back. Returns [m,n] in G's dtype. The coefficients trade exactness for speed: the
/// singular values of the result lie in roughly [0.7, 1.2], not at 1 (Keller Jordan's Muon).
/// Runs in bfloat16 on CUDA, in float32 elsewhere. Throws fbt::Error unless G is 2-D.
torch::Tensor newton_schulz5(const torch::Tensor& G, int64_t steps = 5);

/// Hyper-parameters of NorMuon (paper defaults).
struct NorMuonOptions {
  double lr = 1e-2;            ///< learning rate (scaled by the schedule each step)
  double weight_decay = 0.01;  ///< decoupled: W ← W·(1 − lr·wd) before the update
  double momentum = 0.95;      ///< β1, with Nesterov lookahead
  double beta2 = 0.95;         ///< per-row second-moment decay
  double eps = 1e-10;          ///< in O / (sqrt(v) + eps)
  int64_t ns_steps = 5;        ///< Newton–Schulz iterations
};

/// NorMuon over a list of named 2-D parameters W [m,n] (m output rows, n input columns).
/// One step, with G = W.grad, per matrix (SPEC §6):
///   M ← β1 M + (1−β1) G                      momentum
///   U = (1−β1) G + β1 M                      Nesterov
///   O = newton_schulz5(U)                    [m,n]
///   v ← β2 v + (1−β2) mean_cols(O²)          [m,1], per output row
///   Ô = O / (sqrt(v) + eps),  Ô ← Ô · ‖O‖_F / (‖Ô‖_F + eps)
///   Ô ← Ô · sqrt(max(1, m/n))
///   W ← W (1 − lr·wd) − lr Ô
/// Parameters whose grad is undefined are skipped (their state is not touched).
class NorMuon {
 public:
  /// Maps the list of U [m,n] of one step to their O = newton_schulz5(U, ns_steps), in order.
  using Orthogonalizer =
      std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>& U, int64_t ns_steps)>;

  /// Throws fbt::Error naming the parameter if one is not 2-D.
  NorMuon(std::vector<std::pair<std::string, torch::Tensor>> params, NorMuonOptions options);

  /// Applies one update to every parameter with a gradient, under NoGradGuard.
  void step();

  NorMuonOptions& options() { return options_; }
  /// Replaces the default (newton_schulz5 on each matrix in turn), e.g. by one that shares the
  /// matrices across data-parallel ranks (orthogonalize_sharded, below).
  void set_orthogonalizer(Orthogonalizer orthogonalize) { orthogonalize_ = std::move(orthogonalize); }
  const std::vector<std::pair<std::string, torch::Tensor>>& params() const { return params_; }

  /// State as named tensors "<param>.momentum" [m,n] and "<param>.row_second_moment" [m,1]
  /// (parameters without a step so far are omitted), for checkpoints.
  NamedTensors state() const;
  /// Restores what state() returned; throws fbt::Error naming `path` and the tensor if one
  /// is missing for a parameter that has the other, or has the wrong shape.
  void load_state(const NamedTensors& tensors, const std::string& path);

 private:
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  NorMuonOptions options_;
  Orthogonalizer orthogonalize_;
  std::vector<torch::Tensor> momentum_, second_moment_;  // per parameter; undefined before step 1
};

class Communicator;  // fbt/dist/communicator.h

/// NorMuon orthogonalisation shared across ranks (modded-nanogpt style): matrix i of `U`
/// (same list, same shapes, on every rank) goes to one rank by a greedy balance of the
/// Newton–Schulz cost m·n·min(m,n); each rank runs newton_schulz5 on its own matrices, then
/// every rank broadcasts its results (one flat buffer per rank) so all ranks return the same
/// list of [m,n] tensors.
std::vector<torch::Tensor> orthogonalize_sharded(Communicator& comm, const std::vector<torch::Tensor>& U,
                                                 int64_t ns_steps);

}  // namespace fbt
