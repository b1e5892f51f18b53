// gemm_linear: every output is the sequential fused multiply-add chain over k, worked out here in
// scalar code, bit for bit, whatever the batch, the tiles, the parts and the threads.
#include <gtest/gtest.h>

#include <cmath>

#include <torch/torch.h>

#include "fbt/infer/gemm_linear.h"

namespace fbt {
namespace {

/// y[b,n] = fma(W[n,K−1], x[b,K−1], … fma(W[n,0], x[b,0], 0)): the definition in gemm_linear.h.
torch::Tensor fma_chains(const torch::Tensor& x, const torch::Tensor& W) {
  const int64_t B = x.size(0), K = x.size(1), N = W.size(0);
  auto y = torch::empty({B, N});
  const float *xs = x.data_ptr<float>(), *ws = W.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc = std::fma(ws[n * K + k], xs[b * K + k], acc);
      y[b][n] = acc;
    }
  return y;
}

// Shapes: K = 0, below and across the packed block of 16, long; N with every remainder of the
// AVX-512 tile of 12 rows (and of AVX2's 6, the tiles of 4 and single rows), as parts of unequal
// sizes; B with every remainder of the blocks of 16 and 32 inputs. On 1 and 3 threads.
TEST(GemmLinear, EveryOutputIsItsFmaChainInAnyBatchAndParts) {
  const int before = torch::get_num_threads();
  for (int threads : {1, 3}) {
    torch::set_num_threads(threads);
    for (int64_t K : {0, 1, 15, 16, 37, 300}) {
      torch::manual_seed(K + 100 * threads);
      std::vector<torch::Tensor> weights{torch::randn({13, K}), torch::randn({1, K}), torch::randn({12, K}),
                                         torch::randn({29, K})};
      std::vector<WeightPart> parts;
      for (const auto& w : weights) parts.push_back({w.data_ptr<float>(), w.size(0)});
      const auto W = torch::cat(weights, 0);
      const int64_t N = W.size(0);
      const auto x = torch::randn({70, K});
      const auto expected = fma_chains(x, W);
      for (int64_t B : {1, 5, 16, 17, 31, 32, 33, 48, 70}) {
        const std::string where =
            "threads " + std::to_string(threads) + " K " + std::to_string(K) + " B " + std::to_string(B);
        // Into columns [2, 2 + N) of a wider output (ldy = N + 3): the rest stays untouched.
        auto wide = torch::full({B, N + 3}, -7.0f);
        gemm_linear(x.data_ptr<float>(), B, K, parts, wide.data_ptr<float>() + 2, N + 3);
        ASSERT_TRUE(torch::equal(wide.narrow(1, 2, N), expected.narrow(0, 0, B))) << where;
        ASSERT_TRUE((wide.narrow(1, 0, 2) == -7.0f).all().item<bool>()) << where;
        ASSERT_TRUE((wide.narrow(1, 2 + N, 1) == -7.0f).all().item<bool>()) << where;
      }
      // And the chains are the product: against a double-precision matmul.
      const auto exact = torch::mm(x.to(torch::kDouble), W.to(torch::kDouble).t());
      EXPECT_LT((expected.to(torch::kDouble) - exact).abs().max().item<double>(), 1e-5 * std::sqrt(double(K) + 1) * 4)
          << "K " << K;
    }
  }
  torch::set_num_threads(before);
}

}  // namespace
}  // namespace fbt
