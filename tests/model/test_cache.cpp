// KVCache's carried state: advance / advance_step write it in place (the tensors keep their
// addresses, as a captured CUDA graph needs), check its shapes, and clone() copies it deeply;
// reserve's slot bookkeeping.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "fbt/model/cache.h"

namespace fbt {
namespace {

TEST(KVCacheCarriedState, AdvanceWritesInPlace) {
  const auto config = ModelConfig::preset("debug");
  KVCache cache(config, 2, 8, torch::dtype(torch::kFloat));
  const auto* h = cache.h_prev().data_ptr<float>();
  const auto* tok = cache.last_token().data_ptr<int64_t>();
  const auto* pos = cache.next_pos().data_ptr<int64_t>();
  EXPECT_TRUE(torch::equal(cache.last_token(), torch::full({2}, -1, torch::kLong)));  // nothing processed yet
  const auto state = torch::arange(2 * config.d_model, torch::kDouble).view({2, config.d_model});  // converted to fp32
  cache.advance(state, torch::tensor({7, 9}), torch::tensor({5, 3}));
  EXPECT_TRUE(torch::equal(cache.h_prev(), state.to(torch::kFloat)));
  EXPECT_TRUE(torch::equal(cache.last_token(), torch::tensor({7, 9})));
  EXPECT_TRUE(torch::equal(cache.next_pos(), torch::tensor({5, 3})));
  cache.advance_step(state * 2, torch::tensor({{1}, {2}}));  // tokens of any shape with one per row
  EXPECT_TRUE(torch::equal(cache.h_prev(), (state * 2).to(torch::kFloat)));
  EXPECT_TRUE(torch::equal(cache.last_token(), torch::tensor({1, 2})));
  EXPECT_TRUE(torch::equal(cache.next_pos(), torch::tensor({6, 4})));
  // fp32 state and int64 tokens, as CpuDecoder passes them: the plain-copy path, the same result.
  const auto state32 = (state * 3).to(torch::kFloat);
  cache.advance_step(state32, torch::tensor({4, 8}));
  EXPECT_TRUE(torch::equal(cache.h_prev(), state32));
  EXPECT_TRUE(torch::equal(cache.last_token(), torch::tensor({4, 8})));
  EXPECT_TRUE(torch::equal(cache.next_pos(), torch::tensor({7, 5})));
  EXPECT_EQ(cache.h_prev().data_ptr<float>(), h);
  EXPECT_EQ(cache.last_token().data_ptr<int64_t>(), tok);
  EXPECT_EQ(cache.next_pos().data_ptr<int64_t>(), pos);
}

TEST(KVCacheCarriedState, ShapesAreChecked) {
  const auto config = ModelConfig::preset("debug");
  KVCache cache(config, 2, 8, torch::dtype(torch::kFloat));
  const auto h = torch::zeros({2, config.d_model});
  testing::expect_error(
      [&] {
        cache.advance(torch::zeros({1, config.d_model}), torch::tensor({1, 2}), torch::tensor({1, 2}));
      },
      {"batch 2", "got [1, " + std::to_string(config.d_model) + "]"});
  testing::expect_error([&] { cache.advance_step(h, torch::tensor({1, 2, 3})); }, {"3 tokens"});
  testing::expect_error(
      [&] {
        cache.advance(h, torch::tensor({1, 2}), torch::tensor({4}));
      },
      {"1 next positions for 2 rows"});
}

// reserve records each claimed slot's position and validity, by plain loops for int64 CPU
// positions (shared [1, T] or per row [B, T]) and by tensor ops otherwise (int32 positions, a
// padded layout): the values written by hand below either way.
TEST(KVCacheSlots, ReserveRecordsPositionsAndValidity) {
  const auto config = ModelConfig::preset("debug");
  KVCache cache(config, 2, 8, torch::dtype(torch::kFloat));
  EXPECT_EQ(cache.reserve(Layout::contiguous(3, torch::kCPU)), 0);            // [1, 3]: 0 1 2 in both rows
  EXPECT_EQ(cache.reserve({torch::tensor({{5}, {7}}), {}}), 3);               // [B, 1], as a decode step
  EXPECT_EQ(cache.reserve({torch::tensor({{9}, {4}}, torch::kInt), {}}), 4);  // int32: tensor ops
  const auto valid = torch::tensor({{false, true}, {true, true}});
  EXPECT_EQ(cache.reserve(Layout::left_padded(valid)), 5);  // a pad in row 0
  EXPECT_TRUE(torch::equal(cache.slot_pos, torch::tensor({{0, 1, 2, 5, 9, 0, 0, 0}, {0, 1, 2, 7, 4, 0, 1, 0}})));
  EXPECT_TRUE(torch::equal(cache.slot_valid, torch::tensor({{true, true, true, true, true, false, true, false},
                                                            {true, true, true, true, true, true, true, false}})));
  EXPECT_EQ(cache.length, 7);
  testing::expect_error([&] { cache.reserve({torch::tensor({{1, 2}}), {}}); }, {"KV cache full", "capacity of 8"});
}

TEST(KVCacheCarriedState, CloneIsDeep) {
  const auto config = ModelConfig::preset("debug");
  KVCache cache(config, 1, 4, torch::dtype(torch::kFloat));
  cache.advance(torch::ones({1, config.d_model}), torch::tensor({3}), torch::tensor({1}));
  auto copy = cache.clone();
  cache.advance_step(torch::zeros({1, config.d_model}), torch::tensor({4}));
  cache.k[0].fill_(1);
  EXPECT_TRUE(torch::equal(copy.h_prev(), torch::ones({1, config.d_model})));
  EXPECT_TRUE(torch::equal(copy.last_token(), torch::tensor({3})));
  EXPECT_TRUE(torch::equal(copy.next_pos(), torch::tensor({1})));
  EXPECT_EQ(copy.k[0].abs().sum().item<float>(), 0.0f);
}

}  // namespace
}  // namespace fbt
