// Sampling (greedy, temperature, top-k, top-p, seeds) and batched generation invariants.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include "fbt/infer/generate.h"
#include "fbt/util/error.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {

TEST(Sampling, GreedyTopKTopPAndTemperatureFrequencies) {
  // Probabilities 0.5, 0.25, 0.125, 0.125 over 4 tokens (logits = log p).
  auto logits = torch::log(torch::tensor({0.5, 0.25, 0.125, 0.125}, torch::kFloat)).unsqueeze(0);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  SamplingOptions greedy;
  EXPECT_EQ(sample_tokens(logits, greedy, gen).item<int64_t>(), 0);

  SamplingOptions t1;
  t1.temperature = 1.0;
  const int n = 20000;
  std::vector<int> counts(4, 0);
  for (int i = 0; i < n; ++i) counts[sample_tokens(logits, t1, gen).item<int64_t>()]++;
  const double expected[] = {0.5, 0.25, 0.125, 0.125};
  for (int v = 0; v < 4; ++v)  // binomial sd <= sqrt(n/4) ≈ 71; allow 5 sd
    EXPECT_NEAR(counts[v], expected[v] * n, 360) << "token " << v;

  SamplingOptions k2 = t1;
  k2.top_k = 2;  // renormalised over {0, 1}: 2/3, 1/3
  std::vector<int> c2(4, 0);
  for (int i = 0; i < n; ++i) c2[sample_tokens(logits, k2, gen).item<int64_t>()]++;
  EXPECT_EQ(c2[2] + c2[3], 0);
  EXPECT_NEAR(c2[0], n * 2.0 / 3.0, 340);

  SamplingOptions p06 = t1;
  p06.top_p = 0.6;  // mass before token 1 is 0.5 < 0.6, before token 2 is 0.75 ≥ 0.6: keep {0, 1}
  std::vector<int> c3(4, 0);
  for (int i = 0; i < n; ++i) c3[sample_tokens(logits, p06, gen).item<int64_t>()]++;
  EXPECT_EQ(c3[2] + c3[3], 0);
  EXPECT_GT(c3[1], 0);

  SamplingOptions cold = t1;
  cold.temperature = 0.05;  // p ∝ p^(20): token 0 has 1 - ~1e-6
  for (int i = 0; i < 200; ++i) EXPECT_EQ(sample_tokens(logits, cold, gen).item<int64_t>(), 0);

  SamplingOptions bad = t1;
  bad.top_p = 0;
  EXPECT_THROW(sample_tokens(logits, bad, gen), Error);
}

// Generating a batch of prompts of different lengths gives each row what generating it alone
// gives (left padding is invisible), in every decoding mode; the same seed repeats a sample.
// Temperatures must keep logits / T finite in fp32: NaN, negative, below 1e-6 or above 1e6 are
// refused naming the flag (issue: NaN reached torch::multinomial).
TEST(Sampling, OptionsOutOfRangeAreRefusedBeforeSampling) {
  auto message = [](SamplingOptions o) {
    try {
      o.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  for (double t : {std::nan(""), -1.0, 1e-7, 2e6, double(INFINITY)})
    EXPECT_NE(message({t}).find("--temperature must be 0 (greedy) or in [1e-06, 1e+06]"), std::string::npos) << t;
  for (double t : {0.0, 1e-6, 0.8, 1e6}) EXPECT_EQ(message({t}), "no error") << t;
  // top_k: one rule for `fbt generate --top-k` and serve's top_k (issue 36): 0 and -1 (vLLM's
  // "off") keep every token, below -1 is refused.
  EXPECT_NE(message({1.0, -2}).find("--top-k must be >= 1, or 0 or -1 for all tokens (got -2)"), std::string::npos)
      << message({1.0, -2});
  EXPECT_EQ(message({1.0, -1}), "no error");
  EXPECT_EQ(message({1.0, 0}), "no error");
  EXPECT_NE(message({1.0, 0, std::nan("")}).find("--top-p"), std::string::npos);
  EXPECT_NE(message({1.0, 0, 0.0}).find("--top-p"), std::string::npos);
  EXPECT_THROW(check_temperature(std::nan(""), "--temperatures"), Error);
  auto logits = torch::zeros({1, 4});
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(1);
  EXPECT_THROW(sample_tokens(logits, {std::nan("")}, g), Error);
}

TEST(Generate, BatchedEqualsOneByOneInEveryMode) {
  auto c = ModelConfig::preset("debug");
  auto model = testing::make_test_model(c);
  const std::vector<std::vector<int64_t>> prompts{{5, 6, 7, 8, 9, 10}, {11, 12}, {13, 14, 15, 16}};
  for (auto mode : {DecodeMode::Standard, DecodeMode::Soft, DecodeMode::Fused}) {
    GenerationOptions o;
    o.decoding = Decoding::make(mode, 2);
    o.max_new_tokens = 8;
    std::vector<std::pair<int64_t, int64_t>> streamed;
    o.on_token = [&](int64_t row, int64_t tok) { streamed.emplace_back(row, tok); };
    const auto batched = generate(model, prompts, o);
    o.on_token = nullptr;
    for (size_t b = 0; b < prompts.size(); ++b) {
      EXPECT_EQ(batched[b], generate(model, {prompts[b]}, o)[0]) << enum_to_string(mode) << " row " << b;
      EXPECT_EQ(batched[b].size(), 8u);
    }
    EXPECT_EQ(streamed.size(), 24u);
    o.sampling.temperature = 1.0;
    o.sampling.seed = 42;
    EXPECT_EQ(generate(model, prompts, o), generate(model, prompts, o));
  }
}

// A row stops at EOS: make EOS the greedy choice after one step by reading the model's own
// greedy output and declaring its second token the EOS.
TEST(Generate, StopsAtEos) {
  auto model = testing::make_test_model();
  GenerationOptions o;
  o.max_new_tokens = 6;
  const auto free_run = generate(model, {{3, 4, 5}}, o)[0];
  ASSERT_EQ(free_run.size(), 6u);
  o.eos_id = free_run[1];
  const auto stopped = generate(model, {{3, 4, 5}}, o)[0];
  const auto first_eos = std::find(free_run.begin(), free_run.end(), o.eos_id) - free_run.begin();
  EXPECT_EQ(stopped, std::vector<int64_t>(free_run.begin(), free_run.begin() + first_eos));
}

// ignore_eos: declare EOS the greedy free run's first token, so that generation with EOS as a
// stop token ends at once; with EOS suppressed the row runs its max_new_tokens and EOS never
// appears.
TEST(Generate, IgnoreEosNeverSamplesEosAndRunsToTheLimit) {
  auto model = testing::make_test_model();
  GenerationOptions o;
  o.max_new_tokens = 6;
  const auto free_run = generate(model, {{3, 4, 5}}, o)[0];
  ASSERT_EQ(free_run.size(), 6u);
  o.eos_id = free_run[0];
  EXPECT_TRUE(generate(model, {{3, 4, 5}}, o)[0].empty());
  o.ignore_eos = true;
  const auto run = generate(model, {{3, 4, 5}}, o)[0];
  ASSERT_EQ(run.size(), 6u);
  EXPECT_EQ(std::count(run.begin(), run.end(), o.eos_id), 0);
}

// The stop hook ends generation after the step on which it first returns true: here after 3
// tokens of a 10-token run, with those 3 tokens the free run's first 3, in every mode.
TEST(Generate, StopHookEndsGenerationBetweenTokens) {
  auto model = testing::make_test_model();
  for (auto mode : {DecodeMode::Standard, DecodeMode::Soft, DecodeMode::Fused}) {
    GenerationOptions o;
    o.decoding = Decoding::make(mode, 1);
    o.max_new_tokens = 10;
    const auto free_run = generate(model, {{3, 4, 5}}, o)[0];
    ASSERT_EQ(free_run.size(), 10u);
    int64_t emitted = 0, asked = 0;
    o.on_token = [&](int64_t, int64_t) { ++emitted; };
    o.should_stop = [&] { return ++asked, emitted >= 3; };
    const auto stopped = generate(model, {{3, 4, 5}}, o)[0];
    EXPECT_EQ(stopped, std::vector<int64_t>(free_run.begin(), free_run.begin() + 3)) << enum_to_string(mode);
    EXPECT_EQ(asked, 3);  // once per emitted token, no further decode step after it said stop
  }
}

}  // namespace
}  // namespace fbt
