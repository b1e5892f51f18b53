// Shared helpers for model tests: a seeded debug-sized FBT whose fusion is far from identity.
#pragma once
#include <torch/torch.h>

#include <cstdlib>
#include <string>

#include "fbt/model/model.h"
#include "fbt/util/error.h"

namespace fbt::testing {

/// The device of the device-parameterised model tests (test_decode.cpp, test_passes.cpp):
/// $FBT_TEST_DEVICE ("cpu", "cuda", "cuda:N"), default cpu. scripts/gpu_check.sh runs them again
/// with FBT_TEST_DEVICE=cuda. Throws fbt::Error naming the variable when it asks for CUDA and
/// this libtorch has none, so a GPU run cannot silently test the CPU.
inline torch::Device test_device() {
  const char* env = std::getenv("FBT_TEST_DEVICE");
  const std::string name = env && *env ? env : "cpu";
  const torch::Device device(name);
  if (device.is_cuda() && !torch::cuda::is_available())
    throw Error("FBT_TEST_DEVICE=" + name + ": CUDA is not available to this build of libtorch");
  return device;
}

/// A tiny seeded model (optionally windowed) on `device`; W_U is perturbed away from I so that
/// the fused and plain paths differ clearly. Initialised on the CPU, so the weights are the same
/// on every device.
inline FBT make_test_model(ModelConfig c = ModelConfig::preset("debug"), uint64_t seed = 7,
                           torch::Device device = torch::kCPU) {
  torch::manual_seed(seed);
  FBT model(c);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    if (p.key() == "fusion.w_u.weight") p.value().add_(torch::randn_like(p.value()) * 0.3);
    if (p.key() == "fusion.w_g.weight") p.value().normal_(0, 0.3);
  }
  model->to(device);
  model->eval();
  return model;
}

/// Max |a - b| as a double.
inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

}  // namespace fbt::testing
