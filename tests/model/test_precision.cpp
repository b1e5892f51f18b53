// The bf16 autocast scope (SPEC §6 precision): matmuls in bf16 inside, fp32 weights and loss,
// previous state restored outside. Checked on the CPU, whose autocast shares the mechanism.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "fbt/model/precision.h"
#include "fbt/model/passes.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {

TEST(Precision, AutocastScopeRunsMatmulsInBf16AndRestoresFp32) {
  EXPECT_FALSE(uses_bf16_autocast(Precision::Auto, torch::kCPU));
  EXPECT_TRUE(uses_bf16_autocast(Precision::Auto, torch::Device(torch::kCUDA)));
  EXPECT_TRUE(uses_bf16_autocast(Precision::BF16, torch::kCPU));
  EXPECT_FALSE(uses_bf16_autocast(Precision::FP32, torch::Device(torch::kCUDA)));

  auto a = torch::randn({4, 8}), b = torch::randn({8, 3});
  {
    AutocastScope off(Precision::Auto, torch::kCPU);  // CPU + auto = fp32
    EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat);
  }
  auto model = testing::make_test_model();
  auto tokens = torch::randint(0, 259, {2, 16}, torch::kLong);
  PassOptions o;
  o.passes = 2;
  o.keep_logits = true;
  const auto fp32 = forward_passes(model, tokens, tokens, o);
  {
    AutocastScope amp(Precision::BF16, torch::kCPU);
    EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kBFloat16);
    const auto mixed = forward_passes(model, tokens, tokens, o);
    EXPECT_EQ(mixed.logits[1].scalar_type(), torch::kBFloat16);  // the head matmul ran in bf16
    EXPECT_EQ(mixed.loss.scalar_type(), torch::kFloat);          // the loss did not
    // bf16 has an 8-bit mantissa: the loss agrees to ~1%, not to fp32 precision.
    EXPECT_NEAR(mixed.loss.item<double>(), fp32.loss.item<double>(), 0.02 * fp32.loss.item<double>());
    EXPECT_NE(mixed.loss.item<double>(), fp32.loss.item<double>());
  }
  EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat);  // restored
  for (const auto& p : model->parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat);
}

/// Whether autocast is on for CUDA tensors, through the API of this libtorch (per device type
/// since 2.4; a CUDA-only setter before).
bool cuda_autocast_enabled() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::is_autocast_enabled(at::kCUDA);
#else
  return at::autocast::is_enabled();
#endif
}

// The scope for a CUDA device sets only CUDA's autocast state and dtype (thread-local flags: no
// GPU needed) and leaves the CPU's alone; nested scopes restore what was there before.
TEST(Precision, ScopeOnACudaDeviceTogglesOnlyItsAutocastState) {
  const torch::Device cuda(torch::kCUDA);
  ASSERT_FALSE(cuda_autocast_enabled());
  {
    AutocastScope amp(Precision::Auto, cuda);
    EXPECT_TRUE(cuda_autocast_enabled());
    EXPECT_EQ(torch::mm(torch::randn({2, 3}), torch::randn({3, 2})).scalar_type(), torch::kFloat);  // CPU untouched
    {
      AutocastScope off(Precision::FP32, cuda);  // fp32: leaves the enclosing state as it is
      EXPECT_TRUE(cuda_autocast_enabled());
    }
    EXPECT_TRUE(cuda_autocast_enabled());
  }
  EXPECT_FALSE(cuda_autocast_enabled());
}

}  // namespace
}  // namespace fbt
