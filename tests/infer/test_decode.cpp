// Cached decoding vs full forward, K-pass vs sequential recurrence, Soft and Fused(k) (issue #2, tests 1–4),
// on testing::test_device() ($FBT_TEST_DEVICE, default cpu).
#include <gtest/gtest.h>

#include "fbt/infer/decode.h"
#include "fbt/model/passes.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {
using testing::make_test_model;
using testing::max_abs_diff;
using testing::test_device;

constexpr double kDecodeTol = 2e-4;  // fp32: different matmul shapes round differently

ModelConfig windowed_config() {
  auto c = ModelConfig::preset("debug");
  c.n_layers = 3;
  c.window = 4;                // layers 0 and 2 slide over 4 tokens
  c.full_attention_every = 2;  // layer 1 is full attention
  return c;
}

/// The windowed stack with the Llama family's block and every one of its switches on (issue 17):
/// raw-embedding plain inputs, q/k/v/o biases, QK-norm, Dh = 32 != D/H, untied head, llama3 RoPE.
ModelConfig llama_config() {
  auto c = windowed_config();
  c.block = BlockKind::Llama;
  c.attention_bias = c.attention_out_bias = true;
  c.head_dim_override = 32;
  c.tie_embeddings = false;
  c.rope_scaling = RopeScaling::Llama3;
  c.rope_original_context = 16;
  return c;
}

torch::Tensor random_tokens(int64_t B, int64_t T, int64_t V, uint64_t seed) {  // [B,T] on test_device()
  torch::manual_seed(seed);
  return torch::randint(0, V, {B, T}, torch::kLong).to(test_device());
}

torch::TensorOptions on_test_device(torch::Dtype dtype) { return torch::dtype(dtype).device(test_device()); }

// Test 1: prefill + token-by-token standard decode == full-sequence logits, unequal prompts.
TEST(Decode, StandardCachedDecodingMatchesFullForward) {
  for (const auto& config : {ModelConfig::preset("debug"), windowed_config(), llama_config()}) {
    auto model = make_test_model(config, 7, test_device());
    torch::NoGradGuard no_grad;
    const std::vector<int64_t> prompt_len{5, 9, 2};
    const int64_t steps = 6, P = 9, B = 3;
    auto seqs = random_tokens(B, P + steps, config.vocab_size, 1);
    auto tokens = torch::zeros({B, P}, on_test_device(torch::kLong));
    auto valid = torch::zeros({B, P}, on_test_device(torch::kBool));
    for (int64_t b = 0; b < B; ++b) {
      tokens[b].narrow(0, P - prompt_len[b], prompt_len[b]).copy_(seqs[b].narrow(0, 0, prompt_len[b]));
      valid[b].narrow(0, P - prompt_len[b], prompt_len[b]).fill_(true);
    }
    KVCache cache(config, B, P + steps, on_test_device(torch::kFloat));
    auto logits = prefill(model, tokens, valid, Decoding{}, cache);  // [B,V]
    for (int64_t s = 0; s <= steps; ++s) {
      for (int64_t b = 0; b < B; ++b) {
        const int64_t t = prompt_len[b] - 1 + s;  // position whose next-token logits we hold
        auto full = model->forward(seqs[b].narrow(0, 0, t + 1).unsqueeze(0));  // [1,t+1,V]
        EXPECT_LT(max_abs_diff(logits[b], full[0][t]), kDecodeTol) << "row " << b << " step " << s;
      }
      if (s == steps) break;
      std::vector<torch::Tensor> next;
      for (int64_t b = 0; b < B; ++b) next.push_back(seqs[b][prompt_len[b] + s]);
      logits = decode_step(model, torch::stack(next), DecodeMode::Standard, cache);
    }
  }
}

// Test 2: K-pass with K >= T equals the sequential soft recurrence everywhere; with K < T the
// positions t < K match and a later one differs.
TEST(Decode, KPassEqualsSequentialRecurrenceWhereExact) {
  for (const auto& config : {ModelConfig::preset("debug"), windowed_config(), llama_config()}) {
    auto model = make_test_model(config, 7, test_device());
    const int64_t B = 2, T = 10;
    auto tokens = random_tokens(B, T, config.vocab_size, 2);
    auto sequential = sequential_logits(model, tokens);  // [B,T,V]
    torch::NoGradGuard no_grad;
    PassOptions o;
    o.keep_logits = true;
    o.passes = T;
    auto all = forward_passes(model, tokens, {}, o).logits.back();
    EXPECT_LT(max_abs_diff(all, sequential), kDecodeTol);

    o.passes = 3;
    auto partial = forward_passes(model, tokens, {}, o).logits.back();
    EXPECT_LT(max_abs_diff(partial.narrow(1, 0, 3), sequential.narrow(1, 0, 3)), kDecodeTol);
    EXPECT_GT(max_abs_diff(partial.narrow(1, 3, T - 3), sequential.narrow(1, 3, T - 3)), 1e-3);
  }
}

// Test 3: Soft decoding after a plain prefill of P tokens == K-pass forward with plain prefix P.
TEST(Decode, SoftDecodingEqualsKPassWithPlainPrefix) {
  for (const auto& config : {windowed_config(), llama_config()}) {
    auto model = make_test_model(config, 7, test_device());
    torch::NoGradGuard no_grad;
    const int64_t B = 2, P = 5, steps = 6, T = P + steps;
    auto seqs = random_tokens(B, T, config.vocab_size, 3);
    KVCache cache(config, B, T, on_test_device(torch::kFloat));
    std::vector<torch::Tensor> soft;  // next-token logits at positions P-1 .. T-1
    soft.push_back(prefill(model, seqs.narrow(1, 0, P), torch::ones({B, P}, on_test_device(torch::kBool)),
                           Decoding::make(DecodeMode::Soft, 0), cache));
    for (int64_t t = P; t < T; ++t) soft.push_back(decode_step(model, seqs.select(1, t), DecodeMode::Soft, cache));
    PassOptions o;
    o.passes = steps + 1;  // exact for t < P + K - 1
    o.plain_prefix = torch::full({B}, P, on_test_device(torch::kLong));
    o.keep_logits = true;
    auto passes = forward_passes(model, seqs, {}, o).logits.back();  // [B,T,V]
    for (int64_t t = P - 1; t < T; ++t)
      EXPECT_LT(max_abs_diff(soft[t - P + 1], passes.select(1, t)), kDecodeTol) << "position " << t;
    // And soft differs from standard decoding (the feedback is really used).
    auto standard = model->forward(seqs);
    EXPECT_GT(max_abs_diff(soft.back(), standard.select(1, T - 1)), 1e-3);
  }
}

// Test 4: Fused(k) prefill states == pass k+1 of the parallel forward over the prompt, also
// for left-padded rows of different lengths.
TEST(Decode, FusedPrefillEqualsPassKPlusOne) {
  for (const auto& config : {windowed_config(), llama_config()}) {
    auto model = make_test_model(config, 7, test_device());
    torch::NoGradGuard no_grad;
    const std::vector<int64_t> lens{8, 5};
    const int64_t P = 8, B = 2;
    auto seqs = random_tokens(B, P, config.vocab_size, 4);
    auto tokens = torch::zeros({B, P}, on_test_device(torch::kLong));
    auto valid = torch::zeros({B, P}, on_test_device(torch::kBool));
    for (int64_t b = 0; b < B; ++b) {
      tokens[b].narrow(0, P - lens[b], lens[b]).copy_(seqs[b].narrow(0, 0, lens[b]));
      valid[b].narrow(0, P - lens[b], lens[b]).fill_(true);
    }
    for (int64_t k : {1, 2, 3}) {
      KVCache cache(config, B, P + 1, on_test_device(torch::kFloat));
      auto logits = prefill(model, tokens, valid, Decoding::make(DecodeMode::Fused, k), cache);
      for (int64_t b = 0; b < B; ++b) {
        PassOptions o;
        o.passes = k + 1;
        o.keep_logits = o.keep_states = true;
        auto out = forward_passes(model, seqs[b].narrow(0, 0, lens[b]).unsqueeze(0), {}, o);
        EXPECT_LT(max_abs_diff(cache.h_prev()[b], out.states.back()[0][lens[b] - 1]), kDecodeTol) << "k=" << k;
        EXPECT_LT(max_abs_diff(logits[b], out.logits.back()[0][lens[b] - 1]), kDecodeTol) << "k=" << k;
        // The cache was rebuilt from the last pass, not the plain one: differs from pass 1.
        EXPECT_GT(max_abs_diff(logits[b], out.logits.front()[0][lens[b] - 1]), 1e-3);
      }
    }
  }
}

}  // namespace
}  // namespace fbt
