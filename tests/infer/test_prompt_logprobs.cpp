// prompt_logprobs (the echo + logprobs of /v1/completions) against each mode's logits computed
// independently, ModelScorer's log-likelihoods, the K-pass exactness, top-n order and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "expect_error.h"
#include "fbt/eval/scorer.h"
#include "fbt/infer/prompt_logprobs.h"
#include "fbt/model/passes.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {
using testing::expect_error;
using testing::make_test_model;

constexpr double kLogprobsTol = 2e-4;  // fp32: different matmul shapes round differently

std::vector<int64_t> random_prompt(int64_t T, int64_t V, uint64_t seed) {
  torch::manual_seed(seed);
  const auto t = torch::randint(0, V, {T}, torch::kLong);
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + T);
}

/// Next-token logits [T,V] of `prompt` in `mode`, by the cached decoding path of `fbt generate`
/// (prefill of the first token, then one decode_step per token: the soft recurrence by
/// construction) for Standard and Soft, and by forward_passes with k+1 passes for Fused(k).
torch::Tensor reference_logits(FBT& model, const std::vector<int64_t>& prompt, DecodeMode mode, int64_t k) {
  torch::NoGradGuard no_grad;
  const int64_t T = static_cast<int64_t>(prompt.size());
  const auto ids = torch::tensor(prompt, torch::kLong).view({1, T});
  if (mode == DecodeMode::Fused) {
    PassOptions o;
    o.passes = k + 1;
    o.keep_logits = true;
    return forward_passes(model, ids, {}, o).logits.back()[0];
  }
  KVCache cache(model->config(), 1, T, torch::dtype(torch::kFloat));
  std::vector<torch::Tensor> rows{
      prefill(model, ids.narrow(1, 0, 1), torch::ones({1, 1}, torch::kBool), Decoding::make(mode, 0), cache)};  // [1,V]
  for (int64_t t = 1; t < T; ++t) rows.push_back(decode_step(model, ids.select(1, t), mode, cache));
  return torch::cat(rows, 0);  // [T,V]
}

const std::vector<std::pair<DecodeMode, int64_t>> kModes{
    {DecodeMode::Standard, 0}, {DecodeMode::Soft, 0}, {DecodeMode::Fused, 1}, {DecodeMode::Fused, 3}};

TEST(PromptLogprobs, EqualsLogSoftmaxOfEachModesLogits) {
  auto model = make_test_model();
  const auto prompt = random_prompt(12, model->config().vocab_size, 1);
  for (const auto& [mode, k] : kModes) {
    const auto lp = prompt_logprobs(model, prompt, Decoding::make(mode, k), 0);
    const auto ref = torch::log_softmax(reference_logits(model, prompt, mode, k).to(torch::kDouble), -1);  // [T,V]
    ASSERT_EQ(lp.logprob.size(), prompt.size());
    ASSERT_EQ(lp.top.size(), prompt.size());
    EXPECT_TRUE(std::isnan(lp.logprob[0])) << Decoding::make(mode, k).label();
    for (size_t t = 1; t < prompt.size(); ++t) {
      EXPECT_NEAR(lp.logprob[t], ref[t - 1][prompt[t]].item<double>(), kLogprobsTol)
          << Decoding::make(mode, k).label() << " t=" << t;
      EXPECT_TRUE(lp.top[t].empty());
    }
  }
}

// The modes really differ: soft and fused(1) move the log-probabilities away from standard's.
TEST(PromptLogprobs, ModesDiffer) {
  auto model = make_test_model();
  const auto prompt = random_prompt(12, model->config().vocab_size, 2);
  const auto standard = prompt_logprobs(model, prompt, Decoding{}, 0).logprob;
  for (const auto& [mode, k] : {std::pair{DecodeMode::Soft, int64_t{0}}, std::pair{DecodeMode::Fused, int64_t{1}}}) {
    const auto other = prompt_logprobs(model, prompt, Decoding::make(mode, k), 0).logprob;
    double diff = 0;
    for (size_t t = 1; t < prompt.size(); ++t) diff = std::max(diff, std::abs(double(other[t]) - standard[t]));
    EXPECT_GT(diff, 1e-3) << Decoding::make(mode, k).label();
  }
}

// `fbt eval`'s scores from the echoed prompt: the continuation's summed log-probabilities are
// ModelScorer's loglik, and "every continuation token is the top-1" is its greedy flag.
TEST(PromptLogprobs, ContinuationSumEqualsModelScorer) {
  auto model = make_test_model();
  const int64_t V = model->config().vocab_size;
  std::vector<ScoreRequest> requests;
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t i = 0; i < 4; ++i) {
    auto prompt = random_prompt(6 + 3 * i, V, 10 + i);
    const int64_t C = 1 + i;  // continuation length
    requests.push_back({{prompt.begin(), prompt.end() - C}, {prompt.end() - C, prompt.end()}});
    prompts.push_back(prompt);
  }
  // A greedy request: its continuation is the standard mode's argmax token.
  auto greedy_prompt = random_prompt(7, V, 20);
  greedy_prompt.push_back(model->forward(torch::tensor(greedy_prompt).view({1, -1}))[0][-1].argmax().item<int64_t>());
  requests.push_back({{greedy_prompt.begin(), greedy_prompt.end() - 1}, {greedy_prompt.back()}});
  prompts.push_back(greedy_prompt);

  for (int64_t k : {0, 1, 2}) {
    const auto mode = k == 0 ? DecodeMode::Standard : DecodeMode::Fused;
    const auto scores = ModelScorer(model, Decoding::make(mode, k), 3).score(requests);
    for (size_t i = 0; i < requests.size(); ++i) {
      const auto lp = prompt_logprobs(model, prompts[i], Decoding::make(mode, k), 1);
      double sum = 0;
      bool greedy = true;
      for (size_t t = requests[i].context.size(); t < prompts[i].size(); ++t) {
        sum += lp.logprob[t];
        greedy = greedy && lp.top[t][0].first == prompts[i][t];
      }
      EXPECT_NEAR(sum, scores[i].loglik, 1e-4) << Decoding::make(mode, k).label() << " request " << i;
      EXPECT_EQ(greedy, scores[i].greedy) << Decoding::make(mode, k).label() << " request " << i;
    }
    if (k == 0) {
      EXPECT_TRUE(scores.back().greedy);  // the greedy request's argmax came from the standard mode
    }
  }
}

// fused(k) runs k+1 passes, exact for positions p < k+1 (passes.h), and position p's logits
// score token p+1: soft's and fused(k)'s logprob[t] agree for t ≤ k+1 and differ later.
TEST(PromptLogprobs, SoftEqualsFusedWhereThePassesAreExact) {
  auto model = make_test_model();
  const auto prompt = random_prompt(12, model->config().vocab_size, 3);
  const auto soft = prompt_logprobs(model, prompt, Decoding::make(DecodeMode::Soft, 0), 0).logprob;
  for (int64_t k : {1, 2, 4}) {
    const auto fused = prompt_logprobs(model, prompt, Decoding::make(DecodeMode::Fused, k), 0).logprob;
    double later = 0;
    for (size_t t = 1; t < prompt.size(); ++t) {
      if (static_cast<int64_t>(t) <= k + 1)
        EXPECT_NEAR(fused[t], soft[t], kLogprobsTol) << "k=" << k << " t=" << t;
      else
        later = std::max(later, std::abs(double(fused[t]) - soft[t]));
    }
    EXPECT_GT(later, 1e-4) << "k=" << k;
  }
  // With as many passes as positions the Jacobi iteration is the recurrence everywhere.
  const auto all =
      prompt_logprobs(model, prompt, Decoding::make(DecodeMode::Fused, static_cast<int64_t>(prompt.size())), 0).logprob;
  for (size_t t = 1; t < prompt.size(); ++t) EXPECT_NEAR(all[t], soft[t], kLogprobsTol) << "t=" << t;
}

// top[t] is the first top_n of the whole distribution sorted by (log-probability descending, id
// ascending). The head's rows for ids ≥ 10 are zero, so those ids tie exactly (logit 0) and the
// cut at top_n falls inside the tie.
TEST(PromptLogprobs, TopNOrderAndTies) {
  auto config = ModelConfig::preset("debug");
  config.tie_embeddings = false;
  auto model = make_test_model(config);
  const int64_t V = config.vocab_size, kDistinct = 10;
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters())
      if (p.key() == "lm_head.weight") p.value().narrow(0, kDistinct, V - kDistinct).zero_();
  }
  const auto prompt = random_prompt(9, V, 4);
  const auto ref = torch::log_softmax(model->forward(torch::tensor(prompt).view({1, -1}))[0].detach(), -1);  // [T,V]
  for (int64_t top_n : {int64_t{1}, int64_t{3}, int64_t{14}, V}) {
    const auto lp = prompt_logprobs(model, prompt, Decoding{}, top_n);
    EXPECT_TRUE(lp.top[0].empty());
    for (size_t t = 1; t < prompt.size(); ++t) {
      const auto row = ref[t - 1];
      std::vector<int64_t> order(static_cast<size_t>(V));
      std::iota(order.begin(), order.end(), int64_t{0});
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        const float la = row[a].item<float>(), lb = row[b].item<float>();
        return la != lb ? la > lb : a < b;
      });
      ASSERT_EQ(lp.top[t].size(), static_cast<size_t>(top_n)) << "top_n=" << top_n;
      for (int64_t i = 0; i < top_n; ++i) {
        EXPECT_EQ(lp.top[t][i].first, order[i]) << "top_n=" << top_n << " t=" << t << " rank " << i;
        EXPECT_NEAR(lp.top[t][i].second, row[order[i]].item<float>(), kLogprobsTol);
      }
      // The tie is real: with top_n = 14 at least the last entry is a zero-logit id, the
      // smallest ones first.
      if (top_n == 14) {
        EXPECT_GE(lp.top[t].back().first, kDistinct);
        EXPECT_EQ(lp.top[t][13].second, lp.top[t][12].second);
        EXPECT_LT(lp.top[t][12].first, lp.top[t][13].first);
      }
    }
  }
}

TEST(PromptLogprobs, BadInputIsAnError) {
  auto model = make_test_model();
  const int64_t V = model->config().vocab_size, T = model->config().context;
  expect_error([&] { prompt_logprobs(model, {}, Decoding{}, 0); }, {"no tokens"});
  expect_error([&] { prompt_logprobs(model, std::vector<int64_t>(T + 1, 1), Decoding{}, 0); },
               {std::to_string(T + 1), "model context " + std::to_string(T)});
  expect_error(
      [&] {
        prompt_logprobs(model, {1, -1}, Decoding::make(DecodeMode::Soft, 0), 0);
      },
      {"token -1", "position 1"});
  expect_error(
      [&] {
        prompt_logprobs(model, {V, 1}, Decoding{}, 0);
      },
      {"token " + std::to_string(V), "position 0", "[0, " + std::to_string(V) + ")"});
  expect_error([&] { prompt_logprobs(model, {1, 2}, Decoding{}, -1); }, {"top_n", "-1"});
  expect_error([&] { prompt_logprobs(model, {1, 2}, Decoding{}, V + 1); }, {"top_n", "vocabulary"});
  expect_error(
      [&] {
        prompt_logprobs(model, {1, 2}, Decoding{DecodeMode::Fused, 0}, 0);
      },
      {"fused_passes must be >= 1", "got 0"});
  // The longest prompt and a one-token prompt are fine; fused_passes is ignored outside fused.
  EXPECT_EQ(prompt_logprobs(model, std::vector<int64_t>(T, 1), Decoding::make(DecodeMode::Soft, 0), 2).top.size(),
            size_t(T));
  const auto one = prompt_logprobs(model, {5}, Decoding{}, 3);
  EXPECT_TRUE(std::isnan(one.logprob.at(0)));
  EXPECT_TRUE(one.top.at(0).empty());
}

}  // namespace
}  // namespace fbt
