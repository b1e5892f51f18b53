// Engine (continuous batching, engine.h): a sequence's output does not depend on its batch.
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <sstream>

#include "expect_error.h"
#include "fbt/infer/decode_backend.h"
#include "fbt/infer/engine.h"
#include "fbt/serve/openai_request.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {
using testing::make_test_model;

/// What the callbacks of one sequence saw.
struct Outcome {
  std::vector<int64_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<int64_t, float>>> top;
  std::optional<FinishReason> reason;
  int64_t stop_events = 0;                   ///< events with TokenEvent::stop (must be the last one)
  bool operator==(const Outcome& o) const {  // bitwise: the logprobs are compared with ==
    return tokens == o.tokens && logprobs == o.logprobs && top == o.top && reason == o.reason;
  }
};

std::string describe(const Outcome& o) {
  std::ostringstream s;
  s.precision(9);
  s << "tokens";
  for (size_t i = 0; i < o.tokens.size(); ++i) s << " " << o.tokens[i] << "(" << o.logprobs[i] << ")";
  s << " finish " << (o.reason ? finish_reason_name(*o.reason) : "none");
  return s.str();
}

/// Collects the outcomes of submitted sequences and waits for them.
class Collector {
 public:
  uint64_t submit(Engine& engine, const SequenceRequest& request, size_t slot) {
    {
      std::lock_guard lock(mu_);
      if (outcomes_.size() <= slot) outcomes_.resize(slot + 1);
    }
    SequenceCallbacks callbacks;
    callbacks.on_token = [this, slot](const TokenEvent& e) {
      record(slot, e);
      if (hook) hook(slot, e);
    };
    callbacks.on_finish = [this, slot](FinishReason r) {
      std::lock_guard lock(mu_);
      EXPECT_FALSE(outcomes_[slot].reason.has_value()) << "on_finish twice";
      outcomes_[slot].reason = r;
      ++finished_;
      changed_.notify_all();
    };
    return engine.submit(request, callbacks);
  }
  void record(size_t slot, const TokenEvent& e) {
    std::lock_guard lock(mu_);
    auto& o = outcomes_[slot];
    EXPECT_EQ(e.index, int64_t(o.tokens.size()));
    EXPECT_EQ(o.stop_events, 0) << "an event after the stop token";
    o.stop_events += e.stop;
    o.tokens.push_back(e.token);
    o.logprobs.push_back(e.logprob);
    o.top.push_back(e.top);
    ++tokens_;
    changed_.notify_all();
  }
  /// Blocks until `n` sequences finished (or `tokens` tokens arrived, if given).
  void wait_finished(size_t n) {
    std::unique_lock lock(mu_);
    ASSERT_TRUE(changed_.wait_for(lock, std::chrono::seconds(120), [&] { return finished_ >= n; }));
  }
  void wait_tokens(size_t n) {
    std::unique_lock lock(mu_);
    ASSERT_TRUE(changed_.wait_for(lock, std::chrono::seconds(120), [&] { return tokens_ >= n; }));
  }
  /// Called on the engine thread after each token is recorded (outside the collector's lock).
  std::function<void(size_t, const TokenEvent&)> hook;

  std::vector<Outcome> outcomes() {
    std::lock_guard lock(mu_);
    return outcomes_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<Outcome> outcomes_;
  size_t finished_ = 0, tokens_ = 0;
};

/// 16 requests of prompt lengths 1..43 (chunked at 8), 3..18 new tokens, greedy and sampled
/// (temperature, top-k, top-p, each its own seed), with log-probabilities.
std::vector<SequenceRequest> requests(const ModelConfig& config, DecodeMode mode, int64_t fused_passes) {
  torch::manual_seed(3);
  std::vector<SequenceRequest> out;
  for (int64_t i = 0; i < 16; ++i) {
    SequenceRequest r;
    const int64_t n = 1 + (i * 29) % 43;
    auto ids = torch::randint(0, config.vocab_size, {n}, torch::kLong);
    r.prompt.assign(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + n);
    r.decoding = Decoding::make(mode, fused_passes);
    r.max_new_tokens = 3 + i;
    if (i % 2) r.sampling = SamplingOptions{0.9, i % 4 == 1 ? 20 : 0, i % 4 == 3 ? 0.9 : 1.0, uint64_t(100 + i)};
    r.top_logprobs = i % 3;
    out.push_back(r);
  }
  return out;
}

ModelConfig engine_llama_config() {  // decoded by the generic step, one sequence at a time
  auto c = ModelConfig::preset("debug");
  c.block = BlockKind::Llama;
  c.tie_embeddings = false;
  return c;
}

// Item 2 of issue 19: each of 16 sequences alone, then all 16 in one engine, half of them joining
// while the first half decodes. Tokens, log-probabilities and finish reasons are identical bit for
// bit, in every mode, on the packed CPU step (batch_invariant_linear) and on the generic step.
TEST(Engine, ASequenceDecodesTheSameAloneAndAmongFifteenOthers) {
  for (const auto& config : {ModelConfig::preset("debug"), engine_llama_config()}) {
    auto model = make_test_model(config);
    for (auto [mode, k] :
         {std::pair{DecodeMode::Standard, 1}, std::pair{DecodeMode::Soft, 1}, std::pair{DecodeMode::Fused, 2}}) {
      const auto reqs = requests(config, mode, k);
      const std::string where = enum_to_string(config.block) + " " + Decoding::make(mode, k).label();
      std::vector<Outcome> alone;
      for (const auto& r : reqs) {
        Engine engine(model, EngineOptions{16, 64, 8});
        Collector c;
        c.submit(engine, r, 0);
        c.wait_finished(1);
        alone.push_back(c.outcomes()[0]);
      }
      Engine engine(model, EngineOptions{16, 64, 8});
      Collector c;
      for (size_t i = 0; i < 8; ++i) c.submit(engine, reqs[i], i);
      c.wait_tokens(4);  // the first sequences are decoding when the others join
      for (size_t i = 8; i < reqs.size(); ++i) c.submit(engine, reqs[i], i);
      c.wait_finished(reqs.size());
      const auto together = c.outcomes();
      for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(alone[i].tokens.size(), size_t(reqs[i].max_new_tokens)) << where << " sequence " << i;
        EXPECT_TRUE(alone[i] == together[i]) << where << " sequence " << i << ": " << describe(alone[i]) << " alone, "
                                             << describe(together[i]) << " among others";
        EXPECT_EQ(alone[i].top.front().size(), size_t(reqs[i].top_logprobs)) << where;
      }
      const auto stats = engine.stats();
      EXPECT_EQ(stats.submitted, 16);
      EXPECT_EQ(stats.finished, 16);
      EXPECT_EQ(stats.active, 0);
    }
  }
}

// Greedy decoding alone equals generate() on the same prompt (tokens; the products round
// differently), and the reported log-probability is log_softmax of the first step's logits.
TEST(Engine, GreedyEqualsGenerateAndLogprobsAreLogSoftmax) {
  auto model = make_test_model();
  const std::vector<int64_t> prompt{1, 5, 9, 200, 17, 33};
  for (auto [mode, k] :
       {std::pair{DecodeMode::Standard, 1}, std::pair{DecodeMode::Soft, 1}, std::pair{DecodeMode::Fused, 2}}) {
    GenerationOptions g;
    g.decoding = Decoding::make(mode, k);
    g.max_new_tokens = 12;
    const auto expected = generate(model, {prompt}, g)[0];
    Engine engine(model, EngineOptions{});
    Collector c;
    SequenceRequest r{prompt, Decoding::make(mode, k), {}, 12, {}, 0};
    c.submit(engine, r, 0);
    c.wait_finished(1);
    const auto got = c.outcomes()[0];
    EXPECT_EQ(got.tokens, expected) << Decoding::make(mode, k).label();
    EXPECT_EQ(got.reason, FinishReason::Length);
    torch::NoGradGuard no_grad;
    KVCache cache(model->config(), 1, 8, torch::dtype(torch::kFloat));
    auto logits = prefill(model, torch::tensor(prompt).view({1, -1}), torch::ones({1, 6}, torch::kBool),
                          Decoding::make(mode, k), cache);
    const float want = torch::log_softmax(logits, -1)[0][got.tokens[0]].item<float>();
    EXPECT_NEAR(got.logprobs[0], want, 1e-4) << Decoding::make(mode, k).label();
  }
}

TEST(Engine, StopTokensLengthContextCancelQueueAndDrain) {
  auto model = make_test_model();
  const int64_t context = model->config().context;
  Engine engine(model, EngineOptions{1, 1, 8});
  Collector c;
  SequenceRequest base{{4, 8, 15, 16, 23, 42}, Decoding{DecodeMode::Soft}, {}, 6, {}, -1};
  c.submit(engine, base, 0);
  c.wait_finished(1);
  const auto free_run = c.outcomes()[0];
  ASSERT_EQ(free_run.tokens.size(), 6u);
  EXPECT_EQ(free_run.reason, FinishReason::Length);
  EXPECT_TRUE(free_run.logprobs == std::vector<float>(6, 0.0f));  // not asked for

  auto stop = base;  // a stop token ends the sequence and is not reported
  stop.stop_tokens = {free_run.tokens[2]};
  const auto first = std::find(free_run.tokens.begin(), free_run.tokens.end(), free_run.tokens[2]);
  c.submit(engine, stop, 1);
  c.wait_finished(2);
  EXPECT_EQ(c.outcomes()[1].tokens, std::vector<int64_t>(free_run.tokens.begin(), first));
  EXPECT_EQ(c.outcomes()[1].reason, FinishReason::Stop);

  auto reported = stop;  // reported with its log-probability, as the last event
  reported.report_stop_token = true;
  reported.top_logprobs = 0;
  c.submit(engine, reported, 7);
  c.wait_finished(3);
  auto with_stop = std::vector<int64_t>(free_run.tokens.begin(), first);
  with_stop.push_back(*first);
  EXPECT_EQ(c.outcomes()[7].tokens, with_stop);
  EXPECT_EQ(c.outcomes()[7].stop_events, 1);
  EXPECT_LT(c.outcomes()[7].logprobs.back(), 0.0f);
  EXPECT_EQ(c.outcomes()[7].reason, FinishReason::Stop);

  auto edge = base;  // the model context ends generation: 3 tokens fit after context − 3
  edge.prompt.assign(context - 3, 7);
  edge.max_new_tokens = 10;
  c.submit(engine, edge, 2);
  c.wait_finished(4);
  EXPECT_EQ(c.outcomes()[2].tokens.size(), 3u);
  EXPECT_EQ(c.outcomes()[2].reason, FinishReason::Length);

  // One slot, one queue place: a long sequence, a waiting one, then the queue is full. The long
  // one's 3rd token cancels both (callbacks may call cancel): the queued one never starts, the
  // long one stops before its next step.
  auto long_run = base;
  long_run.max_new_tokens = context - 10;
  uint64_t running = 0, waiting = 0;
  std::promise<void> submitted;  // the long one's first token waits until all three were submitted
  std::shared_future<void> ready = submitted.get_future().share();
  c.hook = [&](size_t slot, const TokenEvent& e) {
    if (slot != 3) return;
    if (e.index == 0) ready.wait();
    if (e.index == 2) {
      engine.cancel(waiting);
      engine.cancel(running);
    }
  };
  running = c.submit(engine, long_run, 3);
  waiting = c.submit(engine, base, 4);
  EXPECT_THROW(c.submit(engine, base, 5), QueueFull);
  submitted.set_value();
  c.wait_finished(6);
  EXPECT_EQ(c.outcomes()[3].reason, FinishReason::Cancelled);
  EXPECT_EQ(c.outcomes()[3].tokens.size(), 3u);
  EXPECT_EQ(c.outcomes()[4].reason, FinishReason::Cancelled);
  EXPECT_TRUE(c.outcomes()[4].tokens.empty());

  c.submit(engine, base, 6);
  engine.drain();  // waits for it
  EXPECT_EQ(c.outcomes()[6].tokens.size(), 6u);
  EXPECT_THROW(c.submit(engine, base, 8), ShuttingDown);
  const auto stats = engine.stats();
  EXPECT_EQ(stats.active + stats.queued, 0);
  EXPECT_EQ(stats.submitted, 7);
  EXPECT_EQ(stats.finished, 7);
}

TEST(Engine, BadRequestsNameTheField) {
  auto model = make_test_model();
  Engine engine(model, EngineOptions{});
  const SequenceRequest ok{{1, 2, 3}, Decoding{}, {}, 4, {}, -1};
  auto with = [&](auto edit) {
    auto r = ok;
    edit(r);
    return r;
  };
  const int64_t context = model->config().context, V = model->config().vocab_size;
  auto refused = [&](auto edit, const std::string& part) {
    testing::expect_error([&] { engine.submit(with(edit), {}); }, {part});
  };
  refused([](auto& r) { r.prompt.clear(); }, "prompt: it is empty");
  refused([&](auto& r) { r.prompt.assign(context, 1); }, "prompt: " + std::to_string(context) + " tokens");
  refused([&](auto& r) { r.prompt[1] = V; }, "prompt: token id " + std::to_string(V));
  refused([](auto& r) { r.max_new_tokens = 0; }, "max_new_tokens: must be >= 1 (got 0)");
  refused(
      [](auto& r) {
        r.decoding = Decoding{DecodeMode::Fused, 0};
      },
      "fused_passes: must be >= 1 for the fused mode (got 0)");
  refused(
      [](auto& r) {
        r.decoding = Decoding{DecodeMode::Soft, 2};
      },
      "fused_passes: must be 0 outside the fused mode (got 2)");
  refused([](auto& r) { r.sampling.temperature = -1; }, "sampling.temperature: must be 0 (greedy)");
  refused([](auto& r) { r.sampling.top_k = -2; }, "sampling.top_k: must be >= 1, or 0 or -1");
  refused([](auto& r) { r.sampling.top_p = 0; }, "sampling.top_p: must be in (0, 1] (got 0)");
  // The field as a value, for a server to map to its API's name (serve/openai_request.h).
  try {
    engine.submit(with([](auto& r) { r.max_new_tokens = 0; }), {});
    ADD_FAILURE() << "max_new_tokens 0 was accepted";
  } catch (const BadRequest& e) {
    EXPECT_EQ(e.field, RequestField::MaxNewTokens);
    EXPECT_EQ(e.problem, "must be >= 1 (got 0)");
    EXPECT_EQ(openai_param(e.field), "max_tokens");
  }
  testing::expect_error([&] { Engine(model, EngineOptions{0, 1, 1}); }, {"max_batch must be >= 1 (got 0)"});
  EXPECT_EQ(engine.stats().submitted, 0);
}

// Echo scoring as an engine task: on the engine's fp32 CPU step it equals prompt_logprobs through the
// generic libtorch path (2e-4: other matmul shapes), in every mode; with int8 weights it is the
// quantised decoder's own scoring (bit for bit) and close to fp32's; a sequence decoding beside the
// scoring tasks comes out as it does alone; scoring is queued, counted and refused by field.
TEST(Engine, ScoringTasksEqualPromptLogprobsBesideDecoding) {
  auto model = make_test_model();
  const auto& config = model->config();
  torch::manual_seed(9);
  const auto ids = torch::randint(0, config.vocab_size, {20}, torch::kLong);
  const std::vector<int64_t> prompt(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + 20);
  auto score = [](Engine& engine, const ScoringRequest& r) {
    auto got = std::make_shared<std::promise<std::pair<PromptLogprobs, FinishReason>>>();
    auto scored = std::make_shared<PromptLogprobs>();
    engine.submit_scoring(r, {[scored](const PromptLogprobs& p) { *scored = p; },
                              [got, scored](FinishReason reason) {
                                got->set_value({*scored, reason});
                              }});
    return got->get_future();
  };
  const SequenceRequest sequence{{3, 1, 4, 1, 5}, Decoding{DecodeMode::Soft}, {0.8, 0, 1.0, 7}, 12, {}, 1};
  Outcome alone;
  {
    Engine engine(model, EngineOptions{4, 8, 8});
    Collector c;
    c.submit(engine, sequence, 0);
    c.wait_finished(1);
    alone = c.outcomes()[0];
  }
  for (auto weights : {DecodeWeights::Fp32, DecodeWeights::Int8}) {
    Engine engine(model, EngineOptions{4, 8, 8, weights});
    auto int8 = cpu_backend(std::make_shared<CpuDecoder>(model, CpuDecoderOptions{true, DecodeWeights::Int8}));
    Collector c;
    c.submit(engine, sequence, 0);
    for (auto [mode, k] :
         {std::pair{DecodeMode::Standard, 0}, std::pair{DecodeMode::Soft, 0}, std::pair{DecodeMode::Fused, 2}}) {
      const ScoringRequest r{prompt, Decoding::make(mode, k), 3};
      const auto [got, reason] = score(engine, r).get();
      const auto where = Decoding::make(mode, k).label() + (weights == DecodeWeights::Int8 ? " int8" : " fp32");
      EXPECT_EQ(reason, FinishReason::Length) << where;
      ASSERT_EQ(got.logprob.size(), prompt.size()) << where;
      const auto want = prompt_logprobs(model, prompt, r.decoding, 3);
      const double tol = weights == DecodeWeights::Int8 ? 0.05 : 2e-4;
      for (size_t t = 1; t < prompt.size(); ++t) {
        EXPECT_NEAR(got.logprob[t], want.logprob[t], tol) << where << " t=" << t;
        EXPECT_EQ(got.top[t].size(), 3u);
      }
      if (weights == DecodeWeights::Int8) {
        const auto own = prompt_logprobs(*int8, prompt, r.decoding, 3);
        EXPECT_EQ(std::vector<float>(got.logprob.begin() + 1, got.logprob.end()),
                  std::vector<float>(own.logprob.begin() + 1, own.logprob.end()))
            << where;
      }
    }
    c.wait_finished(1);
    if (weights == DecodeWeights::Fp32) {
      EXPECT_TRUE(c.outcomes()[0] == alone) << describe(c.outcomes()[0]) << " beside scoring, " << describe(alone);
    }
    const auto stats = engine.stats();
    EXPECT_EQ(stats.submitted, 4);
    EXPECT_EQ(stats.finished, 4);
  }
  Engine engine(model, EngineOptions{});
  const ScoringRequest ok{prompt, Decoding{}, 0};
  auto refused = [&](auto edit, RequestField field, const std::string& part) {
    auto r = ok;
    edit(r);
    try {
      engine.submit_scoring(r, {});
      ADD_FAILURE() << part << " was accepted";
    } catch (const BadRequest& e) {
      EXPECT_EQ(e.field, field);
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  refused([](auto& r) { r.prompt.clear(); }, RequestField::Prompt, "prompt: it is empty");
  refused([&](auto& r) { r.prompt.assign(config.context + 1, 1); }, RequestField::Prompt, "exceed the model context");
  refused([&](auto& r) { r.top_n = config.vocab_size + 1; }, RequestField::TopN, "top_n: must lie in [0, ");
  refused([](auto& r) { r.top_n = -1; }, RequestField::TopN, "(got -1)");
  refused([](auto& r) { r.decoding = Decoding{DecodeMode::Fused, 0}; }, RequestField::FusedPasses, "fused_passes");
  EXPECT_EQ(openai_param(RequestField::TopN), "logprobs");
  const auto full = score(engine, ScoringRequest{std::vector<int64_t>(config.context, 2), Decoding{}, 0}).get();
  EXPECT_EQ(full.second, FinishReason::Length) << "a prompt of the whole context can be scored";
}

}  // namespace
}  // namespace fbt
