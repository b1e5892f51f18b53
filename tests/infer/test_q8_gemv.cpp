// Q8Matrix and q8_linear: ggml's Q8_0 block rule by hand, the product against the double matmul
// of the dequantised weights, and a row's bits in any batch.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "fbt/infer/q8_gemv.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

// One block by hand: max |w| = 2.54 → d = 0.02, q = round(w / 0.02); an all-zero block has d = 0.
// Dequantising and quantising again gives the same blocks (GGUF Q8_0 weights keep their values).
TEST(Q8Gemv, QuantisesAsGgmlQ8_0AndRoundTrips) {
  std::vector<float> w(64, 0.0f);
  w[0] = 2.54f, w[1] = -1.0f, w[2] = 0.011f, w[3] = 0.009f, w[31] = -2.54f;
  const auto m = Q8Matrix::quantize(w.data(), 1, 64);
  ASSERT_EQ(m.blocks.size(), 2u);
  EXPECT_EQ(m.bytes(), 68);
  EXPECT_EQ(float(m.blocks[0].d), float(c10::Half(2.54f / 127.0f)));
  const int expected[] = {127, -50, 1, 0};  // 0.011 / 0.02 = 0.55 → 1; 0.009 / 0.02 = 0.45 → 0
  for (int i = 0; i < 4; ++i) EXPECT_EQ(m.blocks[0].q[i], expected[i]) << i;
  EXPECT_EQ(m.blocks[0].q[31], -127);
  EXPECT_EQ(float(m.blocks[1].d), 0.0f);
  for (int8_t q : m.blocks[1].q) EXPECT_EQ(q, 0);

  torch::manual_seed(3);
  auto W = torch::randn({5, 96});
  const auto q = Q8Matrix::quantize(W.data_ptr<float>(), 5, 96);
  std::vector<float> back(5 * 96);
  for (int64_t n = 0; n < 5; ++n) q.dequantize_row(n, back.data() + n * 96);
  const auto again = Q8Matrix::quantize(back.data(), 5, 96);
  for (size_t i = 0; i < q.blocks.size(); ++i) {
    ASSERT_EQ(float(again.blocks[i].d), float(q.blocks[i].d)) << i;
    for (int j = 0; j < 32; ++j) ASSERT_EQ(again.blocks[i].q[j], q.blocks[i].q[j]) << i << " " << j;
  }
  EXPECT_LT((torch::from_blob(back.data(), {5, 96}) - W).abs().max().item<double>(), W.abs().max().item<double>() / 254 * 1.01);
  EXPECT_THROW(Q8Matrix::quantize(w.data(), 2, 31), Error);
}

/// x [B, K] fp32 with each block of 32 rounded as q8_linear's Int8 activations are, in the same
/// fp32 steps (d = max|x|/127, q = round(x · (1/d))) but by torch's operators; returned in double.
torch::Tensor q8_round_trip(const torch::Tensor& x) {
  auto blocks = x.reshape({-1, 32});
  auto d = blocks.abs().amax(1, true) / 127.0f;
  auto q = (blocks * torch::where(d > 0, 1.0f / d, torch::zeros_like(d))).round();
  return (q.to(torch::kDouble) * d.to(torch::kDouble)).reshape(x.sizes());
}

// Shape classes: one block, several with N odd, N split across threads, B = 1..9 (the groups of
// four and two and every remainder), both activation kinds.
TEST(Q8Gemv, EqualsTheMatmulOfTheDequantisedWeightsAndARowIsTheSameInAnyBatch) {
  for (auto [K, N] : {std::pair<int64_t, int64_t>{32, 3}, {96, 33}, {576, 1536}, {2048, 65}}) {
    torch::manual_seed(K + N);
    auto W = torch::randn({N, K});
    const auto q = Q8Matrix::quantize(W.data_ptr<float>(), N, K);
    auto Wd = torch::empty({N, K});
    for (int64_t n = 0; n < N; ++n) q.dequantize_row(n, Wd.data_ptr<float>() + n * K);
    auto x = torch::randn({9, K});
    for (auto act : {Q8Activations::Fp32, Q8Activations::Int8}) {
      auto xin = act == Q8Activations::Int8 ? q8_round_trip(x) : x;
      for (int64_t B = 1; B <= 9; ++B) {
        const std::string where = "K " + std::to_string(K) + " N " + std::to_string(N) + " B " + std::to_string(B) +
                                  (act == Q8Activations::Int8 ? " int8" : " fp32");
        auto y = torch::empty({B, N});
        q8_linear(x.data_ptr<float>(), B, q, y.data_ptr<float>(), act);
        auto expected = torch::mm(xin.narrow(0, 0, B).to(torch::kDouble), Wd.to(torch::kDouble).t());
        const double tol = 1e-5 * std::sqrt(double(K)) * 4;
        EXPECT_LT((y.to(torch::kDouble) - expected).abs().max().item<double>(), tol) << where;
        for (int64_t b = 0; b < B; ++b) {
          auto row = x[b].clone();
          auto alone = torch::empty({1, N});
          q8_linear(row.data_ptr<float>(), 1, q, alone.data_ptr<float>(), act);
          ASSERT_TRUE(torch::equal(alone[0], y[b])) << where << " row " << b;
        }
      }
    }
  }
}

}  // namespace
}  // namespace fbt
