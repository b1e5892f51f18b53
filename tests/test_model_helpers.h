// Shared helpers for model tests: a seeded debug-sized FBT whose fusion is far from identity.
#pragma once
#include <torch/torch.h>

#include "fbt/model.h"

namespace fbt::testing {

/// A tiny seeded model (optionally windowed); W_U is perturbed away from I so that the fused
/// and plain paths differ clearly.
inline FBT make_test_model(ModelConfig c = ModelConfig::preset("debug"), uint64_t seed = 7) {
  torch::manual_seed(seed);
  FBT model(c);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    if (p.key() == "fusion.w_u.weight") p.value().add_(torch::randn_like(p.value()) * 0.3);
    if (p.key() == "fusion.w_g.weight") p.value().normal_(0, 0.3);
  }
  model->eval();
  return model;
}

/// Max |a - b| as a double.
inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

}  // namespace fbt::testing
