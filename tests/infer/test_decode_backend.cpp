// The decoding backends: make_decode_backend picks the CPU decoder where the model allows it and
// the generic steps elsewhere, and the two compute the same prefill and steps (each equivalence
// in detail: test_cpu_decoder.cpp).
#include <gtest/gtest.h>

#include "fbt/infer/decode_backend.h"
#include "expect_error.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {

TEST(DecodeBackend, FactoryPicksTheCpuDecoderWhereTheModelAllowsIt) {
  auto model = testing::make_test_model();
  EXPECT_NE(make_decode_backend(model)->cpu(), nullptr);
  auto config = ModelConfig::preset("debug");
  config.block = BlockKind::Llama;
  config.attention_bias = true;  // Qwen2's q/k/v biases: the CPU step does not implement them
  auto biased = testing::make_test_model(config);
  EXPECT_EQ(make_decode_backend(biased)->cpu(), nullptr);
  EXPECT_EQ(torch_backend(model)->cpu(), nullptr);
}

// The CPU decoder and the fixed-shape step of the CUDA-graph backend (run eagerly here; replayed
// from graphs with FBT_TEST_DEVICE=cuda in test_graph_decoder.cpp) against the generic steps, over
// prefill and 4 steps in every mode, a left-padded row included. The graph backend is kept across
// two rounds of fresh caches, so each mode's GraphDecoder is rebound to a new cache.
TEST(DecodeBackend, CpuGraphAndGenericBackendsAgree) {
  auto model = testing::make_test_model();
  const auto& config = model->config();
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  auto tokens = torch::randint(4, config.vocab_size, {2, 5}, torch::kLong);
  auto valid = torch::ones({2, 5}, torch::kBool);
  valid[1][0] = false;  // a left-padded row
  const auto graph = graph_backend(model, /*use_graph=*/false);
  for (int round = 0; round < 2; ++round)
    for (const auto& decoding : {Decoding{}, Decoding{DecodeMode::Soft}, Decoding::fused(2)})
      for (const auto& [name, backend] : {std::pair{"cpu", make_decode_backend(model)}, std::pair{"graph", graph}}) {
        SCOPED_TRACE(std::string(name) + " " + decoding.label() + " round " + std::to_string(round));
        const auto generic = torch_backend(model);
        KVCache a(config, 2, 9, torch::dtype(torch::kFloat)), b(config, 2, 9, torch::dtype(torch::kFloat));
        auto x = backend->prefill(tokens, valid, decoding, a), y = generic->prefill(tokens, valid, decoding, b);
        for (int s = 0; s < 4; ++s) {
          EXPECT_LT(testing::max_abs_diff(x, y), 1e-4) << "call " << s;
          const auto next = x.argmax(-1);  // the same tokens into both
          x = backend->step(next, decoding.mode, a);
          y = generic->step(next, decoding.mode, b);
        }
        EXPECT_LT(testing::max_abs_diff(x, y), 1e-4) << "the last step";
        EXPECT_LT(testing::max_abs_diff(a.h_prev(), b.h_prev()), 1e-4);
      }
  testing::expect_error(
      [&] {
        KVCache cpu_cache(config, 1, 4, torch::dtype(torch::kFloat));
        graph_backend(model, /*use_graph=*/true)
            ->step(torch::zeros({1}, torch::kLong), DecodeMode::Standard, cpu_cache);
      },
      {"CUDA"});
}

}  // namespace
}  // namespace fbt
