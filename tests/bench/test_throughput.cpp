// fbt bench's arithmetic: the FLOP count behind MFU and the median/min/max summary (issue #8).
#include <gtest/gtest.h>

#include <cmath>

#include "fbt/bench/throughput.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

// N must be every 2-D weight of the model (the tied embedding counted once, as the head);
// the plain pass leaves out the fusion's two D×D matrices.
TEST(Bench, MatmulWeightsAreTheModelsTwoDimensionalParameters) {
  for (const char* preset : {"debug", "small"}) {
    auto config = ModelConfig::preset(preset);
    FBT model(config);
    int64_t two_d = 0;
    for (const auto& p : model->parameters())
      if (p.dim() == 2) two_d += p.numel();
    EXPECT_EQ(matmul_weights_per_token(config, /*fused=*/true), two_d) << preset;
    EXPECT_EQ(matmul_weights_per_token(config, /*fused=*/false), two_d - 2 * config.d_model * config.d_model) << preset;
  }
}

// By hand for `debug` (D 64, L 2, H 4, Hkv 2, Dh 16, F 176, V 259), T = 32, K = 2:
// per layer 64·64 + 2·64·32 + 64·64 + 64·4 + 3·64·176 = 46,336; N = 2·46,336 + 259·64 = 109,248,
// fused N = 109,248 + 2·64² = 117,440; attention 12·(2·64·32) = 49,152 per pass.
// 6·109,248 + 49,152 + 6·117,440 + 49,152 = 1,458,432. With a window of 8 on layer 0 only
// (full_attention_every = 2), attention per pass is 12·64·(8 + 32) = 30,720.
TEST(Bench, TrainingFlopsFollowThePalmFormula) {
  auto config = ModelConfig::preset("debug");
  EXPECT_DOUBLE_EQ(training_flops_per_token(config, 32, 1), 6.0 * 109248 + 49152);
  EXPECT_DOUBLE_EQ(training_flops_per_token(config, 32, 2), 1458432.0);
  config.window = 8;
  config.full_attention_every = 2;
  EXPECT_DOUBLE_EQ(training_flops_per_token(config, 32, 1), 6.0 * 109248 + 30720);
}

TEST(Bench, StatsAreMedianMinMaxAndInvertToRates) {
  const auto odd = Stats::of({3, 1, 2});
  EXPECT_DOUBLE_EQ(odd.median, 2);
  EXPECT_DOUBLE_EQ(odd.min, 1);
  EXPECT_DOUBLE_EQ(odd.max, 3);
  const auto even = Stats::of({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(even.median, 2.5);
  const auto rate = even.inverse(10);  // 10 tokens in {1,2,3,4} seconds
  EXPECT_DOUBLE_EQ(rate.median, 4);
  EXPECT_DOUBLE_EQ(rate.min, 2.5);
  EXPECT_DOUBLE_EQ(rate.max, 10);
  EXPECT_THROW(Stats::of({}), Error);
}

// Both modes decode on their own cache, step by step in turn: every repetition is timed for both,
// the soft overhead is a finite median, and the KV bytes are one cache's, by hand for `debug`
// (L 2, Hkv 2, Dh 16): 2 layers · (k, v) · batch 2 · 2 heads · (8 + 4) slots · 16 · 4 bytes.
// The weight bytes are the matrices' fp32 bytes, with and without the fusion's two D×D.
TEST(Bench, DecodeModesAlternateOnTwoCachesAndCountOne) {
  torch::manual_seed(3);
  FBT model(ModelConfig::preset("debug"));
  for (auto decoder : {BenchDecoder::Generic, BenchDecoder::Cpu}) {
    const auto r = bench_decode_modes(model, decoder, 2, 8, 4, 0, 3, 7);
    for (const auto* mode : {&r.standard, &r.soft}) {
      EXPECT_GT(mode->seconds.min, 0);
      EXPECT_LE(mode->seconds.min, mode->seconds.median);
      EXPECT_LE(mode->seconds.median, mode->seconds.max);
    }
    EXPECT_TRUE(std::isfinite(r.soft_overhead.median));
    EXPECT_GT(r.soft_overhead.min, -1.0);
    EXPECT_EQ(r.kv_cache_bytes, 2 * 2 * 2 * 2 * 12 * 16 * 4);
  }
  const auto cpu = bench_decode_modes(model, BenchDecoder::Cpu, 1, 8, 4, 0, 1, 7);
  const int64_t d = model->config().d_model;
  EXPECT_EQ(cpu.soft_weight_bytes - cpu.standard_weight_bytes, 2 * d * d * 4);
  EXPECT_EQ(cpu.standard_weight_bytes, matmul_weights_per_token(model->config(), false) * 4);
}

}  // namespace
}  // namespace fbt
