// PromptPrefill (chunked prefill with the feedback carried across chunks) against prefill().
#include <gtest/gtest.h>

#include "fbt/infer/prompt_prefill.h"
#include "fbt/util/error.h"
#include "cpu_prefill.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {
using testing::make_test_model;
using testing::max_abs_diff;

constexpr double kPrefillTol = 1e-4;  // fp32: chunked matrix products round differently

// A prompt of 13 tokens with the separator (3 in this config) at position 4, so position 5 — the
// first of a chunk when chunks hold 5 tokens — is a document start and stays plain in every pass.
TEST(PromptPrefill, ChunksEqualTheWholePromptPrefillInEveryMode) {
  auto config = ModelConfig::preset("debug");
  config.doc_separator_id = 3;
  auto model = make_test_model(config);
  torch::NoGradGuard no_grad;
  torch::manual_seed(11);
  auto tokens = torch::randint(4, config.vocab_size, {1, 13}, torch::kLong);
  tokens[0][4] = 3;
  std::vector<int64_t> prompt(tokens.data_ptr<int64_t>(), tokens.data_ptr<int64_t>() + 13);
  for (auto [mode, k] : {std::pair{DecodeMode::Standard, 0}, std::pair{DecodeMode::Soft, 0},
                         std::pair{DecodeMode::Fused, 1}, std::pair{DecodeMode::Fused, 3}}) {
    KVCache whole(config, 1, 16, torch::dtype(torch::kFloat));
    auto expected = prefill(model, tokens, torch::ones({1, 13}, torch::kBool), Decoding::make(mode, k), whole);
    for (int64_t chunk : {1, 5, 13, 64}) {
      const std::string where = Decoding::make(mode, k).label() + " chunk " + std::to_string(chunk);
      PromptPrefill chunked(model, prompt, Decoding::make(mode, k), 16);
      torch::Tensor logits;
      int64_t calls = 0;
      while (!chunked.done()) {
        ASSERT_FALSE(logits.defined()) << where << ": logits before the last chunk";
        logits = chunked.run(chunk);
        ++calls;
      }
      EXPECT_EQ(calls, (13 + chunk - 1) / chunk) << where;
      ASSERT_TRUE(logits.defined()) << where;
      EXPECT_LT(max_abs_diff(logits, expected), kPrefillTol) << where;
      auto& cache = chunked.cache();
      EXPECT_LT(max_abs_diff(cache.h_prev(), whole.h_prev()), kPrefillTol) << where;
      EXPECT_EQ(cache.length, 13) << where;
      EXPECT_EQ(cache.capacity(), 16) << where;
      EXPECT_EQ(cache.next_pos().item<int64_t>(), 13) << where;
      EXPECT_EQ(cache.last_token().item<int64_t>(), prompt.back()) << where;
      for (int64_t l = 0; l < config.n_layers; ++l) {
        EXPECT_LT(max_abs_diff(cache.k[l].narrow(2, 0, 13), whole.k[l].narrow(2, 0, 13)), kPrefillTol) << where;
        EXPECT_LT(max_abs_diff(cache.v[l].narrow(2, 0, 13), whole.v[l].narrow(2, 0, 13)), kPrefillTol) << where;
      }
      // The next decode step from either cache agrees too.
      auto next = expected.argmax(-1);
      KVCache copy = whole.clone();
      const auto want = decode_step(model, next, mode, copy);
      EXPECT_LT(max_abs_diff(decode_step(model, next, mode, cache), want), kPrefillTol) << where;
    }
  }
}

// On the CPU decoder (batch-invariant, as the engine runs it) a prefill in every mode is the same
// bits in any chunks and as CpuDecoder::prefill of the whole prompt, and equals the generic
// prefill to fp32 rounding (the separator at position 4 keeps position 5 plain in the fused passes).
TEST(PromptPrefill, OnTheCpuDecoderChunksAreTheSameBits) {
  auto config = ModelConfig::preset("debug");
  config.doc_separator_id = 3;
  auto model = make_test_model(config);
  torch::NoGradGuard no_grad;
  torch::manual_seed(13);
  auto tokens = torch::randint(4, config.vocab_size, {1, 13}, torch::kLong);
  tokens[0][4] = 3;
  const auto valid = torch::ones({1, 13}, torch::kBool);
  std::vector<int64_t> prompt(tokens.data_ptr<int64_t>(), tokens.data_ptr<int64_t>() + 13);
  const auto decoder = std::make_shared<CpuDecoder>(model, CpuDecoderOptions{/*batch_invariant=*/true});
  const auto backend = cpu_backend(decoder);
  CpuDecoder& cpu = *decoder;
  for (auto [mode, k] : {std::pair{DecodeMode::Standard, 0}, std::pair{DecodeMode::Soft, 0},
                         std::pair{DecodeMode::Fused, 1}, std::pair{DecodeMode::Fused, 3}}) {
    KVCache generic(config, 1, 16, torch::dtype(torch::kFloat)), direct(config, 1, 16, torch::dtype(torch::kFloat));
    auto expected = prefill(model, tokens, valid, Decoding::make(mode, k), generic);
    PromptPrefill whole(model, prompt, Decoding::make(mode, k), 16, backend);
    auto reference = whole.run(13);
    EXPECT_LT(max_abs_diff(reference, expected), kPrefillTol) << Decoding::make(mode, k).label();
    EXPECT_LT(max_abs_diff(whole.cache().h_prev(), generic.h_prev()), kPrefillTol) << Decoding::make(mode, k).label();
    EXPECT_TRUE(torch::equal(testing::cpu_prefill(cpu, tokens, valid, direct, k), reference))
        << Decoding::make(mode, k).label();
    EXPECT_TRUE(torch::equal(direct.h_prev(), whole.cache().h_prev())) << Decoding::make(mode, k).label();
    for (int64_t chunk : {1, 5}) {
      const std::string where = Decoding::make(mode, k).label() + " chunk " + std::to_string(chunk);
      PromptPrefill chunked(model, prompt, Decoding::make(mode, k), 16, backend);
      torch::Tensor logits;
      while (!chunked.done()) logits = chunked.run(chunk);
      auto& cache = chunked.cache();
      EXPECT_TRUE(torch::equal(logits, reference)) << where;
      EXPECT_TRUE(torch::equal(cache.h_prev(), whole.cache().h_prev())) << where;
      EXPECT_TRUE(torch::equal(cache.slot_pos, generic.slot_pos)) << where;
      EXPECT_EQ(cache.next_pos().item<int64_t>(), 13) << where;
      EXPECT_EQ(cache.last_token().item<int64_t>(), prompt.back()) << where;
      for (int64_t l = 0; l < config.n_layers; ++l)
        EXPECT_TRUE(torch::equal(cache.k[l], whole.cache().k[l]) && torch::equal(cache.v[l], whole.cache().v[l]))
            << where;
    }
  }
}

// Without the carry, a chunk's first position would be fused with a zero state: chunking a
// fused prefill at every token must still differ from the plain prefill (the fusion is live).
TEST(PromptPrefill, FusedPassesChangeTheResult) {
  auto model = make_test_model();
  torch::NoGradGuard no_grad;
  const std::vector<int64_t> prompt{5, 9, 17, 33, 65, 7, 8};
  PromptPrefill plain(model, prompt, Decoding{}, 8), fused(model, prompt, Decoding::fused(2), 8);
  torch::Tensor a, b;
  while (!plain.done()) a = plain.run(2);
  while (!fused.done()) b = fused.run(2);
  EXPECT_GT(max_abs_diff(a, b), 1e-3);
}

TEST(PromptPrefill, BadArgumentsAreRefused) {
  auto model = make_test_model();
  const int64_t context = model->config().context;
  EXPECT_THROW(PromptPrefill(model, {}, Decoding{}, 4), Error);
  EXPECT_THROW(PromptPrefill(model, {1, 2, 3}, Decoding{}, 2), Error);
  EXPECT_THROW(PromptPrefill(model, {1, 2, 3}, Decoding{}, context + 1), Error);
  EXPECT_THROW(PromptPrefill(model, {1, 2, 3}, Decoding{DecodeMode::Fused, 0}, 4), Error);
  torch::NoGradGuard no_grad;
  PromptPrefill p(model, {1, 2, 3}, Decoding::make(DecodeMode::Soft, 0), 4);
  EXPECT_THROW(p.run(0), Error);
  p.run(3);
  EXPECT_THROW(p.run(1), Error);
}

}  // namespace
}  // namespace fbt
