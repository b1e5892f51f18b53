// attend(): the explicit-softmax kernel and PyTorch 2.x's scaled_dot_product_attention against a
// direct per-head computation in float64 (causal, padded/windowed masks, GQA and MHA).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <torch/version.h>

#include "fbt/model/model.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {
using testing::max_abs_diff;
using testing::test_device;

/// softmax(q_h k_{h/G}ᵀ / sqrt(Dh) + mask) v_{h/G}, one head at a time, in float64: [B,H,T,Dh].
torch::Tensor per_head_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& mask) {
  const int64_t H = q.size(1), G = H / k.size(1), Dh = q.size(3);
  auto m = mask.to(torch::kDouble).select(1, 0);  // [B|1,T,S]
  std::vector<torch::Tensor> heads;
  for (int64_t h = 0; h < H; ++h) {
    auto qh = q.select(1, h).to(torch::kDouble), kh = k.select(1, h / G).to(torch::kDouble);
    auto scores = torch::matmul(qh, kh.transpose(-2, -1)) / std::sqrt(double(Dh)) + m;  // [B,T,S]
    heads.push_back(torch::matmul(torch::softmax(scores, -1), v.select(1, h / G).to(torch::kDouble)));
  }
  return torch::stack(heads, 1);
}

torch::Tensor additive_mask(const torch::Tensor& allowed) {  // bool [B,T,S] -> [B,1,T,S] 0 / -inf
  return torch::zeros(allowed.sizes(), allowed.options().dtype(torch::kFloat))
      .masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity())
      .unsqueeze(1);
}

struct AttentionCase {
  const char* name;
  int64_t H, Hkv, T, S;
  bool causal_only;
};

/// Runs attend() with `kernel` on every case and compares it with the per-head reference.
void expect_kernel_matches_reference(AttentionKernel kernel) {
  const auto dev = test_device();
  const auto f32 = torch::dtype(torch::kFloat).device(dev);
  for (const AttentionCase c :
       {AttentionCase{"causal GQA", 4, 2, 7, 7, true}, AttentionCase{"causal MHA", 4, 4, 7, 7, true},
        AttentionCase{"padded+window GQA", 6, 2, 5, 9, false}, AttentionCase{"decode GQA", 4, 1, 1, 12, false}}) {
    torch::manual_seed(3);
    const int64_t B = 2, Dh = 8;
    auto q = torch::randn({B, c.H, c.T, Dh}, f32), k = torch::randn({B, c.Hkv, c.S, Dh}, f32),
         v = torch::randn({B, c.Hkv, c.S, Dh}, f32);
    // Causal over key slots aligned to the queries' ends; the masked case also drops the first two
    // slots of row 1 (left padding) and keys more than 3 slots back (a sliding window), but always
    // keeps each query's own slot so that every row stays finite.
    auto qslot = torch::arange(c.S - c.T, c.S, f32.dtype(torch::kLong)).view({1, c.T, 1});
    auto kslot = torch::arange(c.S, f32.dtype(torch::kLong)).view({1, 1, c.S});
    auto allowed = (kslot <= qslot).expand({B, c.T, c.S}).clone();
    if (!c.causal_only) {
      allowed.logical_and_(qslot - kslot < 4);
      allowed[1].narrow(-1, 0, 2).fill_(false);
      allowed.logical_or_(kslot == qslot);
    }
    const auto mask = additive_mask(allowed);
    EXPECT_LT(max_abs_diff(attend(q, k, v, mask, c.causal_only, kernel), per_head_reference(q, k, v, mask)), 1e-5)
        << c.name;
  }
}

TEST(Attention, ExplicitKernelMatchesAPerHeadReference) { expect_kernel_matches_reference(AttentionKernel::Explicit); }

// The kernel training and decoding use: PyTorch 2.x's scaled_dot_product_attention (with
// is_causal for the plain causal case, the additive mask otherwise).
TEST(Attention, SdpaKernelMatchesAPerHeadReference) {
#if TORCH_VERSION_MAJOR < 2
  GTEST_SKIP() << "libtorch " << TORCH_VERSION_MAJOR << "." << TORCH_VERSION_MINOR
               << " has no scaled_dot_product_attention (its Auto kernel is the explicit one); runs in the 2.x build";
#endif
  expect_kernel_matches_reference(AttentionKernel::Auto);
}

}  // namespace
}  // namespace fbt
