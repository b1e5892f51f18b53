// batch_invariant_linear: a row's product is the same bits in any batch, and equals the matmul.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <torch/torch.h>

#include "fbt/infer/batch_gemv.h"

namespace fbt {
namespace {

// Shape classes: K below one block of 16 lanes, a multiple of it, with a tail; N = 1, odd, large
// enough to be split across threads, with every remainder of the kernels' tiles of 4 rows. B = 1..13
// covers the streaming kernel's groups of four and the tiled kernel's groups of six (B ≥ 4, AVX-512),
// with every remainder: a row alone (streamed) and in a batch (tiled) must agree bit for bit.
TEST(BatchGemv, EqualsTheMatmulAndARowIsTheSameInAnyBatch) {
  for (auto [K, N] : {std::pair<int64_t, int64_t>{7, 5}, {16, 1}, {64, 259}, {100, 33}, {576, 1536}, {48, 6}}) {
    torch::manual_seed(K * 1000 + N);
    auto W = torch::randn({N, K});
    auto x = torch::randn({13, K});
    for (int64_t B = 1; B <= 13; ++B) {
      auto y = torch::empty({B, N});
      batch_invariant_linear(x.data_ptr<float>(), B, K, W.data_ptr<float>(), N, y.data_ptr<float>(), N);
      auto expected = torch::mm(x.narrow(0, 0, B).to(torch::kDouble), W.to(torch::kDouble).t());
      const std::string where = "K " + std::to_string(K) + " N " + std::to_string(N) + " B " + std::to_string(B);
      EXPECT_LT((y.to(torch::kDouble) - expected).abs().max().item<double>(), 1e-5 * std::sqrt(double(K)) * 4) << where;
      for (int64_t b = 0; b < B; ++b) {  // row b alone, from a copy at another address
        auto row = x[b].clone();
        auto alone = torch::empty({1, N});
        batch_invariant_linear(row.data_ptr<float>(), 1, K, W.data_ptr<float>(), N, alone.data_ptr<float>(), N);
        ASSERT_TRUE(torch::equal(alone[0], y[b])) << where << " row " << b;
      }
      // Into columns [3, 3 + N) of a wider output (ldy = N + 5): the same bits, the rest untouched.
      auto wide = torch::full({B, N + 5}, -7.0f);
      batch_invariant_linear(x.data_ptr<float>(), B, K, W.data_ptr<float>(), N, wide.data_ptr<float>() + 3, N + 5);
      ASSERT_TRUE(torch::equal(wide.narrow(1, 3, N), y)) << where;
      ASSERT_TRUE((wide.narrow(1, 0, 3) == -7.0f).all().item<bool>()) << where;
      ASSERT_TRUE((wide.narrow(1, 3 + N, 2) == -7.0f).all().item<bool>()) << where;
    }
  }
}

// The kernels' at::parallel_for must reach libtorch's threads: its OpenMP loop is compiled into
// their translation units, so a build without -fopenmp silently runs every product on one thread
// (as fbt did until 2026-12-03: two threads decoded at the speed of one).
TEST(BatchGemv, KernelsRunOnEveryIntraOpThread) {
  const int before = torch::get_num_threads();
  for (int threads : {2, 3, 1}) {
    torch::set_num_threads(threads);
    EXPECT_EQ(decode_kernel_threads(), threads);
  }
  torch::set_num_threads(before);
}

// A weight stacked from parts (sizes with every remainder of 4, one above the grain so the rows are
// split across threads inside a part) is the same bits as one call per part, at B = 1 and in tiles.
TEST(BatchGemv, StackedPartsAreTheSameBitsAsOneCallPerPart) {
  torch::manual_seed(9);
  const int64_t K = 96;
  std::vector<torch::Tensor> weights{torch::randn({5, K}), torch::randn({2, K}), torch::randn({300, K}),
                                     torch::randn({7, K})};
  std::vector<WeightPart> parts;
  int64_t N = 0;
  for (const auto& w : weights) {
    parts.push_back({w.data_ptr<float>(), w.size(0)});
    N += w.size(0);
  }
  for (int64_t B : {1, 7}) {
    auto x = torch::randn({B, K});
    auto stacked = torch::empty({B, N}), separate = torch::empty({B, N});
    batch_invariant_linear(x.data_ptr<float>(), B, K, parts, stacked.data_ptr<float>(), N);
    int64_t row = 0;
    for (const auto& part : parts) {
      batch_invariant_linear(x.data_ptr<float>(), B, K, part.W, part.N, separate.data_ptr<float>() + row, N);
      row += part.N;
    }
    EXPECT_TRUE(torch::equal(stacked, separate)) << "B " << B;
    EXPECT_LT((stacked - torch::mm(x, torch::cat(weights, 0).t())).abs().max().item<float>(), 1e-4) << "B " << B;
  }
}

// dot_products (attention's scores) is batch_invariant_linear at B = 1, bit for bit, for every
// remainder of its four-row tiles and K below, at and past one block of 16 lanes.
TEST(BatchGemv, DotProductsAreTheLinearsRowsBitForBit) {
  for (auto [K, n] : {std::pair<int64_t, int64_t>{5, 3}, {16, 4}, {64, 129}, {100, 7}, {64, 1}}) {
    torch::manual_seed(K + n);
    auto rows = torch::randn({n, K});
    auto x = torch::randn({K});
    auto dots = torch::empty({n}), linear = torch::empty({n});
    dot_products(rows.data_ptr<float>(), n, K, x.data_ptr<float>(), dots.data_ptr<float>());
    batch_invariant_linear(x.data_ptr<float>(), 1, K, rows.data_ptr<float>(), n, linear.data_ptr<float>(), n);
    EXPECT_TRUE(torch::equal(dots, linear)) << "K " << K << " n " << n;
  }
}

// weighted_row_sum: each y[j] is the scalar chain y = fma(w_i, r_i[j], y) over i in order, rows of
// weight 0 skipped even when they hold NaN, added to y's values; two calls over the halves of the
// rows are the same bits as one over all of them (attention calls it once per run of allowed keys).
TEST(BatchGemv, WeightedRowSumIsOneFmaChainPerColumn) {
  for (auto [K, n] : {std::pair<int64_t, int64_t>{5, 3}, {64, 130}, {100, 9}, {16, 1}, {200, 33}}) {
    torch::manual_seed(K * 7 + n);
    auto rows = torch::randn({n, K});
    auto weights = torch::rand({n});
    weights[n / 2] = 0.0f;
    rows[n / 2].fill_(std::numeric_limits<float>::quiet_NaN());
    auto start = torch::randn({K});
    const float* r = rows.data_ptr<float>();
    const float* w = weights.data_ptr<float>();
    auto expected = start.clone();
    float* e = expected.data_ptr<float>();
    for (int64_t j = 0; j < K; ++j)
      for (int64_t i = 0; i < n; ++i)
        if (i != n / 2) e[j] = std::fma(w[i], r[i * K + j], e[j]);
    auto once = start.clone(), halves = start.clone();
    weighted_row_sum(r, n, K, w, once.data_ptr<float>());
    const int64_t half = (n + 1) / 2;
    weighted_row_sum(r, half, K, w, halves.data_ptr<float>());
    weighted_row_sum(r + half * K, n - half, K, w + half, halves.data_ptr<float>());
    const std::string where = "K " + std::to_string(K) + " n " + std::to_string(n);
    EXPECT_TRUE(torch::equal(once, expected)) << where;
    EXPECT_TRUE(torch::equal(halves, expected)) << where;
  }
}

}  // namespace
}  // namespace fbt
