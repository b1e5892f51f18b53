// GraphDecoder (paper App. D): the fixed-shape decode step equals decode_step in every mode, on
// the CPU eagerly and, with FBT_TEST_DEVICE=cuda, replayed from a captured CUDA graph (fp32, bf16).
#include <gtest/gtest.h>

#include <string>

#include "fbt/infer/decode.h"
#include "fbt/infer/graph_decoder.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {
using testing::make_test_model;
using testing::max_abs_diff;
using testing::test_device;

struct Run {
  std::vector<torch::Tensor> logits;  // per step [B,V], float
  torch::Tensor tokens;               // [B,steps] greedy tokens
};

/// Left-padded prompts (3 rows of lengths 6, 3, 6; row 2 holds a document separator so that a
/// plain position appears mid-prompt), prefilled in `mode`, then `steps` greedy steps with
/// decode_step (graph == nullptr) or through `graph` on the same cache. With `forced` [B,steps]
/// those tokens are fed instead of the greedy ones (teacher forcing).
Run greedy(FBT& model, DecodeMode mode, KVCache& cache, GraphDecoder* graph, int64_t steps, uint64_t seed,
           const torch::Tensor& forced = {}) {
  const auto& c = model->config();
  const auto dev = cache.slot_pos.device();
  torch::manual_seed(seed);
  auto tokens = torch::randint(1, c.vocab_size, {3, 6}, torch::kLong);
  tokens[2][2] = c.doc_separator_id;
  auto valid = torch::ones({3, 6}, torch::kBool);
  valid[1].narrow(0, 0, 3).fill_(false);
  cache.clear();
  auto logits = prefill(model, tokens.to(dev), valid.to(dev), Decoding::make(mode, 1), cache);
  Run r;
  std::vector<torch::Tensor> picked;
  for (int64_t s = 0; s < steps; ++s) {
    auto next = forced.defined() ? forced.select(1, s).clone() : logits.argmax(-1);  // [B]
    // Every third step row 0 is fed the separator instead: the next input is then plain.
    if (s % 3 == 1) next[0] = c.doc_separator_id;
    picked.push_back(next);
    logits = graph ? graph->step(next) : decode_step(model, next, mode, cache);
    r.logits.push_back(logits.to(torch::kFloat).clone());
  }
  r.tokens = torch::stack(picked, 1);
  return r;
}

void expect_same(const Run& a, const Run& b, double tol, const std::string& what) {
  ASSERT_EQ(a.logits.size(), b.logits.size());
  EXPECT_TRUE(torch::equal(a.tokens, b.tokens)) << what;
  for (size_t s = 0; s < a.logits.size(); ++s)
    EXPECT_LT(max_abs_diff(a.logits[s], b.logits[s]), tol) << what << " step " << s;
}

ModelConfig test_config() {
  auto c = ModelConfig::preset("debug");
  c.n_layers = 3;
  c.window = 4;  // layers 0 and 2 slide over 4 tokens: the windowed mask over all slots too
  c.full_attention_every = 2;
  c.doc_separator_id = 0;
  return c;
}

// On the CPU (or FBT_TEST_DEVICE) without a graph: attending over every slot of a fixed-capacity
// cache with device-side slot indices gives decode_step's logits and tokens; a second prefill into
// the same cache and decoder works as the first (the serving loop reuses both).
TEST(GraphDecoder, FixedShapeStepMatchesDecodeStepInEveryMode) {
  const auto c = test_config();
  auto model = make_test_model(c, 7, test_device());
  torch::NoGradGuard no_grad;
  const auto opts = torch::dtype(torch::kFloat).device(test_device());
  for (const auto mode : {DecodeMode::Standard, DecodeMode::Soft, DecodeMode::Fused}) {
    KVCache eager_cache(c, 3, 20, opts), fixed_cache(c, 3, 20, opts);
    GraphDecoder fixed(model, mode, fixed_cache, /*use_graph=*/false);
    for (uint64_t seed : {1, 2}) {
      const auto want = greedy(model, mode, eager_cache, nullptr, 10, seed);
      const auto got = greedy(model, mode, fixed_cache, &fixed, 10, seed);
      expect_same(want, got, 1e-4, Decoding::make(mode, 1).label() + " seed " + std::to_string(seed));
      EXPECT_EQ(fixed_cache.length, eager_cache.length);
      EXPECT_TRUE(torch::equal(fixed_cache.next_pos(), eager_cache.next_pos()));
    }
    EXPECT_FALSE(fixed.captured());
  }
}

TEST(GraphDecoder, BadInputFailsWithAClearMessage) {
  const auto c = test_config();
  auto model = make_test_model(c);
  torch::NoGradGuard no_grad;
  KVCache cache(c, 3, 7, torch::dtype(torch::kFloat));
  EXPECT_THROW(GraphDecoder(model, DecodeMode::Soft, cache, /*use_graph=*/true), Error);  // a CPU cache
  GraphDecoder fixed(model, DecodeMode::Soft, cache, false);
  prefill(model, torch::ones({3, 6}, torch::kLong), torch::ones({3, 6}, torch::kBool),
          Decoding::make(DecodeMode::Soft, 1), cache);
  try {
    fixed.step(torch::full({3}, c.vocab_size, torch::kLong));
    FAIL() << "an out-of-vocabulary id was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the model vocabulary"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fixed.step(torch::ones({2}, torch::kLong)), Error);  // 2 tokens for 3 rows
  fixed.step(torch::ones({3}, torch::kLong));                       // slot 6 of 7: the last
  EXPECT_THROW(fixed.step(torch::ones({3}, torch::kLong)), Error);  // full
}

// With FBT_TEST_DEVICE=cuda: the captured graph, replayed per token, gives eager decoding's tokens
// and logits, in fp32 and bf16 weights, for every mode, across two prompts in the same cache.
TEST(GraphDecoder, CudaGraphReplayMatchesEagerDecoding) {
  if (!test_device().is_cuda()) GTEST_SKIP() << "needs FBT_TEST_DEVICE=cuda (scripts/gpu_check.sh)";
  const auto c = test_config();
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    auto model = make_test_model(c, 7, test_device());
    model->to(dtype);
    torch::NoGradGuard no_grad;
    const auto opts = torch::dtype(dtype).device(test_device());
    const std::string name = dtype == torch::kFloat ? "fp32" : "bf16";
    for (const auto mode : {DecodeMode::Standard, DecodeMode::Soft, DecodeMode::Fused}) {
      KVCache eager_cache(c, 3, 24, opts), fixed_cache(c, 3, 24, opts), graph_cache(c, 3, 24, opts);
      GraphDecoder fixed(model, mode, fixed_cache, false), graph(model, mode, graph_cache, true);
      for (uint64_t seed : {1, 2}) {
        const auto what = name + " " + Decoding::make(mode, 1).label() + " seed " + std::to_string(seed);
        const auto replayed = greedy(model, mode, graph_cache, &graph, 12, seed);
        const auto same_shapes = greedy(model, mode, fixed_cache, &fixed, 12, seed);
        // bf16: near-ties may pick other tokens after differently rounded logits, so decode_step
        // is teacher-forced with the replayed tokens there; fp32 must pick the same tokens itself.
        const auto eager = greedy(model, mode, eager_cache, nullptr, 12, seed,
                                  dtype == torch::kFloat ? torch::Tensor() : replayed.tokens);
        EXPECT_TRUE(graph.captured()) << what;
        // Replay runs the very kernels of the eager fixed-shape step: equal to rounding.
        expect_same(same_shapes, replayed, dtype == torch::kFloat ? 1e-5 : 1e-2, what + " graph vs fixed eager");
        // Against decode_step (keys over `length` slots, not `capacity`): fp32 to 1e-4; bf16 rounds
        // differently with the longer reductions: logits to 0.1.
        expect_same(eager, replayed, dtype == torch::kFloat ? 1e-4 : 1e-1, what + " graph vs decode_step");
      }
    }
  }
}

}  // namespace
}  // namespace fbt
