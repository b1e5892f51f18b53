// Few-shot multiple-choice evaluation: metrics on hand-built tasks with a stub scorer, few-shot
// prompts, the real task files, the model scorer (standard and fused) and `fbt eval` end to end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "cli_test_helpers.h"
#include "fbt/eval/mc.h"
#include "fbt/infer/decode.h"
#include "fbt/model/passes.h"
#include "fbt/util/error.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;
using testing::make_test_model;

/// Answers each request from a fixed table keyed by its continuation as text (byte tokenizer),
/// and records every context it is asked about as text (the leading EOS decodes to nothing).
struct StubScorer : Scorer {
  std::map<std::string, ScoreResult> table;
  std::vector<std::string> contexts;
  ByteTokenizer tokenizer;

  std::vector<ScoreResult> score(const std::vector<ScoreRequest>& requests) override {
    std::vector<ScoreResult> out;
    for (const auto& r : requests) {
      EXPECT_EQ(r.context.front(), ByteTokenizer::kEos);
      contexts.push_back(tokenizer.decode(r.context));
      const std::string continuation = tokenizer.decode(r.continuation);
      const auto it = table.find(continuation);
      if (it == table.end()) throw std::runtime_error("stub scorer has no entry for '" + continuation + "'");
      out.push_back(it->second);
    }
    return out;
  }
};

Doc make_doc(const std::string& context, std::vector<std::string> choices, int64_t gold) {
  Doc d;
  d.contexts.assign(choices.size(), context);
  d.choices = std::move(choices);
  d.gold = gold;
  return d;
}

TaskSpec make_task(std::vector<Metric> metrics, int64_t pool) {
  TaskSpec t;
  t.name = "hand";
  t.metrics = std::move(metrics);
  t.fewshot_pool = pool;
  return t;
}

// Three questions whose log-likelihoods are fixed; acc and acc_norm (loglik / bytes of the
// choice, without the leading space) disagree on question 1:
//   q1 gold "bbbb": " a" −2, " bbbb" −4        acc picks a (wrong);  norm −2/1, −4/4 = −1 → bbbb (right)
//   q2 gold "cc":   " cc" −1, " d" −3          acc picks cc (right); norm −0.5, −3 → cc (right)
//   q3 gold "g":    " eee" −3, " ff" −2.5, " g" −2.8
//                                              acc picks ff (wrong);  norm −1, −1.25, −2.8 → eee (wrong)
// acc = 1/3, acc_norm = 2/3; stderr sqrt(p(1−p)/(n−1)) = sqrt(2/9 / 2) = 1/3 for both.
TEST(EvalMC, AccAndAccNormOnHandBuiltTask) {
  const std::vector<Doc> docs{make_doc("Q1", {"a", "bbbb"}, 1), make_doc("Q2", {"cc", "d"}, 0),
                              make_doc("Q3", {"eee", "ff", "g"}, 2),
                              // the few-shot pool: never scored (the stub has no entry for " p", " q")
                              make_doc("P1", {"p", "q"}, 0), make_doc("P2", {"p", "q"}, 1)};
  StubScorer stub;
  stub.table = {{" a", {-2, false}},   {" bbbb", {-4, false}}, {" cc", {-1, false}}, {" d", {-3, false}},
                {" eee", {-3, false}}, {" ff", {-2.5, false}}, {" g", {-2.8, false}}};
  McEvalOptions o;
  o.shots = 1;
  const auto r = evaluate_task(make_task({Metric::Acc, Metric::AccNorm}, 2), docs, ByteTokenizer(), stub, o);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].metric, "acc");
  EXPECT_NEAR(r[0].value, 1.0 / 3, 1e-12);
  EXPECT_NEAR(r[0].stderr_, 1.0 / 3, 1e-12);
  EXPECT_EQ(r[0].n, 3);
  EXPECT_EQ(r[1].metric, "acc_norm");
  EXPECT_NEAR(r[1].value, 2.0 / 3, 1e-12);
  EXPECT_NEAR(r[1].stderr_, 1.0 / 3, 1e-12);
  EXPECT_EQ(stub.contexts.size(), 7u);  // 2 + 2 + 3 choices
}

// acc_norm divides by characters as lm-evaluation-harness does (len() of the choice), acc_bytes
// by UTF-8 bytes: gold "café" at −5.0 vs "cafe" at −4.4 is −5/4 < −4.4/4 by characters (acc_norm
// 0) but −5/5 > −4.4/4 by bytes (acc_bytes 1).
TEST(EvalMC, AccNormCountsCharactersAndAccBytesCountsBytes) {
  const std::vector<Doc> docs{make_doc("Q", {"caf\xC3\xA9", "cafe"}, 0)};
  StubScorer stub;
  stub.table = {{" caf\xC3\xA9", {-5.0, false}}, {" cafe", {-4.4, false}}};
  McEvalOptions o;
  o.shots = 0;
  const auto r =
      evaluate_task(make_task({Metric::Acc, Metric::AccNorm, Metric::AccBytes}, 0), docs, ByteTokenizer(), stub, o);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].metric, "acc");
  EXPECT_EQ(r[0].value, 0.0);
  EXPECT_EQ(r[1].metric, "acc_norm");
  EXPECT_EQ(r[1].value, 0.0);
  EXPECT_EQ(r[2].metric, "acc_bytes");
  EXPECT_EQ(r[2].value, 1.0);
}

// A BPE tokenizer whose tokens span the context/continuation join at some splits (so that
// encode(context + continuation) does not start with encode(context)): at every split of every
// text the continuation tokens spell exactly the continuation (with the context's trailing spaces
// moved to it), never nothing, and the context tokens exactly the rest. Splitting
// encode(whole) at |encode(context)| alone, the old rule, misspells some of these splits.
TEST(EvalMC, ContinuationTokensSpellExactlyTheContinuationAtEverySplit) {
  std::string corpus;
  for (int i = 0; i < 300; ++i) corpus += "Answer: yes, it is.\nQuestion: is it so?\nAnswer: no, it was not.\n";
  BpeTrainOptions bo;
  bo.vocab_size = 320;
  const auto tok = BpeTokenizer::train({corpus}, bo);
  int64_t old_rule_wrong = 0;
  for (const std::string text : {"Answer", "Question: is it so? Answer: yes", "caf\xC3\xA9 Answer:  no"}) {
    for (size_t i = 1; i < text.size(); ++i) {
      std::string context = text.substr(0, i), continuation = text.substr(i);
      if ((static_cast<unsigned char>(continuation[0]) & 0xC0) == 0x80) continue;  // inside a character
      const auto r = encode_request(*tok, context, continuation);
      const size_t kept = context.find_last_not_of(' ') + 1;
      continuation = context.substr(kept) + continuation;
      context.resize(kept);
      const std::string where = "split " + std::to_string(i) + " of '" + text + "'";
      ASSERT_FALSE(r.continuation.empty()) << where;
      EXPECT_EQ(tok->decode(r.continuation), continuation) << where;
      EXPECT_EQ(r.context.front(), tok->eos_id());
      EXPECT_EQ(tok->decode(std::vector<int64_t>(r.context.begin() + 1, r.context.end())), context) << where;
      const auto whole = tok->encode(context + continuation), ctx = tok->encode(context);
      const std::vector<int64_t> old(whole.begin() + std::min(ctx.size(), whole.size()), whole.end());
      old_rule_wrong += tok->decode(old) != continuation;
    }
  }
  EXPECT_GT(old_rule_wrong, 0) << "no split has a token across the join: the test would not see the bug";
}

// LAMBADA-style cloze: acc is the greedy flag of the single choice; perplexity is
// exp(−mean summed loglik) = exp(2) for logliks −1, −2, −3 (sd 1: stderr exp(2)/sqrt(3)).
TEST(EvalMC, ClozeGreedyAccuracyAndPerplexity) {
  const std::vector<Doc> docs{make_doc("one two", {"x"}, 0), make_doc("three four", {"yy"}, 0),
                              make_doc("five six", {"zzz"}, 0)};
  StubScorer stub;
  stub.table = {{" x", {-1, true}}, {" yy", {-2, false}}, {" zzz", {-3, true}}};
  McEvalOptions o;
  o.shots = 0;
  const auto r = evaluate_task(make_task({Metric::GreedyAcc, Metric::Perplexity}, 0), docs, ByteTokenizer(), stub, o);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].metric, "acc");
  EXPECT_NEAR(r[0].value, 2.0 / 3, 1e-12);
  EXPECT_NEAR(r[0].stderr_, 1.0 / 3, 1e-12);
  EXPECT_EQ(r[1].metric, "perplexity");
  EXPECT_NEAR(r[1].value, std::exp(2.0), 1e-9);
  EXPECT_NEAR(r[1].stderr_, std::exp(2.0) / std::sqrt(3.0), 1e-9);
  EXPECT_EQ(stub.contexts, (std::vector<std::string>{"one two", "three four", "five six"}));
}

// Ten items, the last four the pool: every prompt holds `shots` distinct pool examples (each
// "context choice\n\n"), then the item itself; evaluated items never appear as examples.
TEST(EvalMC, FewShotPoolIsDisjointFromEvaluatedItems) {
  std::vector<Doc> docs;
  for (int i = 0; i < 10; ++i) docs.push_back(make_doc("item" + std::to_string(i) + ":", {"yes", "no"}, i % 2));
  StubScorer stub;
  stub.table = {{" yes", {-1, false}}, {" no", {-2, false}}};
  const auto task = make_task({Metric::Acc}, 4);
  McEvalOptions o;
  o.shots = 3;
  o.seed = 5;
  o.chunk = 4;  // items scored in chunks 0-3, 4-5
  const auto r = evaluate_task(task, docs, ByteTokenizer(), stub, o);
  EXPECT_EQ(r[0].n, 6);
  ASSERT_EQ(stub.contexts.size(), 12u);
  std::set<std::vector<int64_t>> draws;
  for (int i = 0; i < 6; ++i) {
    const auto picks = fewshot_indices(4, 3, 5, i);
    ASSERT_EQ(picks.size(), 3u);
    EXPECT_EQ(std::set<int64_t>(picks.begin(), picks.end()).size(), 3u);
    draws.insert(picks);
    std::string expected;
    for (int64_t e : picks) {
      ASSERT_TRUE(e >= 0 && e < 4);
      const int example = 6 + static_cast<int>(e);
      expected += "item" + std::to_string(example) + ": " + (example % 2 ? "no" : "yes") + "\n\n";
    }
    expected += "item" + std::to_string(i) + ":";
    EXPECT_EQ(stub.contexts[2 * i], expected);
    EXPECT_EQ(stub.contexts[2 * i + 1], expected);
  }
  EXPECT_GT(draws.size(), 1u);  // drawn per item, not one fixed set
  EXPECT_EQ(fewshot_indices(4, 3, 5, 2), fewshot_indices(4, 3, 5, 2));

  o.limit = 2;
  EXPECT_EQ(evaluate_task(task, docs, ByteTokenizer(), stub, o)[0].n, 2);
  o.limit = -1;
  o.shots = 5;
  EXPECT_THROW(evaluate_task(task, docs, ByteTokenizer(), stub, o), Error);
  o.shots = 0;
  stub.contexts.clear();
  evaluate_task(task, docs, ByteTokenizer(), stub, o);
  EXPECT_EQ(stub.contexts[0], "item0:");
  EXPECT_THROW(evaluate_task(make_task({Metric::Acc}, 10), docs, ByteTokenizer(), stub, o), Error);
}

// lm-eval's _encode_pair: trailing context whitespace moves to the continuation; EOS leads.
TEST(EvalMC, EncodeRequestFollowsLmEval) {
  const ByteTokenizer tok;
  auto r = encode_request(tok, "Q: 1+1= ", "2");
  std::vector<int64_t> context{ByteTokenizer::kEos};
  for (char c : std::string("Q: 1+1=")) context.push_back(c);
  EXPECT_EQ(r.context, context);
  EXPECT_EQ(r.continuation, (std::vector<int64_t>{' ', '2'}));
  r = encode_request(tok, "", " end");
  EXPECT_EQ(r.context, std::vector<int64_t>{ByteTokenizer::kEos});
  EXPECT_EQ(tok.decode(r.continuation), " end");
}

// Each built-in task parses its file in shared/data: item count, choices per item, gold in range,
// and the first item's prompt as lm-eval builds it.
TEST(EvalMC, RealTaskFilesParse) {
  struct Expected {
    std::string task;
    size_t items, min_choices, max_choices;
    std::string context0, gold_choice0;
  };
  const std::vector<Expected> expected{
      {"arc_easy", 2376, 3, 5,
       "Question: Which statement best explains why photosynthesis is the foundation of most food webs?\nAnswer:",
       "Sunlight is the source of energy for nearly all ecosystems."},
      {"arc_challenge", 1172, 3, 5,
       "Question: An astronomer observes that a planet rotates faster after a meteorite impact. Which is the most "
       "likely effect of this increase in rotation?\nAnswer:",
       "Planetary days will become shorter."},
      {"piqa", 1838, 2, 2, "Question: How do I ready a guinea pig cage for it's new occupants?\nAnswer:",
       "Provide the guinea pig with a cage full of a few inches of bedding made of ripped paper strips, you will also "
       "need to supply it with a water bottle and a food dish."},
      {"hellaswag", 9037, 4, 4, "Roof shingle removal: A man is sitting on a roof. he",
       "starts pulling up roofing on a roof."},
      {"winogrande", 1267, 2, 2, "Sarah was a much better surgeon than Maria so Maria", "always got the easier cases."},
      {"lambada", 5153, 1, 1, "", "signs"},
  };
  ASSERT_EQ(expected.size(), builtin_tasks().size());
  for (const auto& e : expected) {
    SCOPED_TRACE(e.task);
    const TaskSpec& task = find_task(e.task);
    if (!fs::exists(fs::path(FBT_SHARED_DATA) / task.path)) GTEST_SKIP() << "no " << task.path << " in shared/data";
    const auto docs = load_docs(task, FBT_SHARED_DATA);
    ASSERT_EQ(docs.size(), e.items);
    for (const auto& d : docs) {
      ASSERT_GE(d.choices.size(), e.min_choices);
      ASSERT_LE(d.choices.size(), e.max_choices);
      ASSERT_EQ(d.contexts.size(), d.choices.size());
      ASSERT_TRUE(d.gold >= 0 && d.gold < static_cast<int64_t>(d.choices.size()));
      for (const auto& c : d.choices) ASSERT_FALSE(c.empty());
    }
    const Doc& d = docs[0];
    if (!e.context0.empty()) {  // lambada's is a long text: its end is checked below
      EXPECT_EQ(d.contexts[d.gold], e.context0);
    }
    EXPECT_EQ(d.choices[d.gold], e.gold_choice0);
  }
  const auto wino = load_docs(find_task("winogrande"), FBT_SHARED_DATA);
  EXPECT_EQ(wino[0].contexts[0], "Sarah was a much better surgeon than Maria so Sarah");
  EXPECT_EQ(wino[0].choices[0], wino[0].choices[1]);
  const auto lambada = load_docs(find_task("lambada"), FBT_SHARED_DATA);
  EXPECT_EQ(lambada[0].contexts[0].substr(lambada[0].contexts[0].size() - 18), "I don't care about");
  EXPECT_THROW(find_task("mmlu"), Error);
  EXPECT_THROW(load_docs(find_task("piqa"), "/nonexistent"), Error);
}

/// Model-scorer tests on a tiny seeded model with a 16-token context.
struct EvalMCModel : ::testing::Test {
  static constexpr int64_t kContext = 16;
  FBT model = make_test_model([] {
    auto c = ModelConfig::preset("debug");
    c.context = kContext;
    c.doc_separator_id = ByteTokenizer::kEos;
    return c;
  }());

  /// Requests of assorted lengths, all starting with EOS like encode_request's: short ones, one
  /// to truncate from the left, one whose continuation fills the whole context.
  std::vector<ScoreRequest> requests() const {
    std::mt19937 rng(11);
    auto random_tokens = [&](int n) {
      std::vector<int64_t> t;
      for (int i = 0; i < n; ++i) t.push_back(rng() % 256);
      return t;
    };
    std::vector<ScoreRequest> out;
    for (auto [ctx, cont] : std::vector<std::pair<int, int>>{{3, 2}, {10, 4}, {25, 3}, {1, 1}, {5, 16}, {7, 1}}) {
      ScoreRequest r{random_tokens(ctx), random_tokens(cont)};
      r.context.insert(r.context.begin(), ByteTokenizer::kEos);
      out.push_back(r);
    }
    return out;
  }

  /// The scored row of a request: the last ≤ T+1 tokens of context + continuation minus the last.
  static std::pair<torch::Tensor, std::vector<int64_t>> row(const ScoreRequest& r) {
    std::vector<int64_t> s = r.context;
    s.insert(s.end(), r.continuation.begin(), r.continuation.end());
    if (static_cast<int64_t>(s.size()) > kContext + 1) s.erase(s.begin(), s.end() - (kContext + 1));
    std::vector<int64_t> input(s.begin(), s.end() - 1);
    return {torch::tensor(input, torch::kLong).unsqueeze(0), s};
  }

  /// Summed continuation log-likelihood and greedy flag of logits [1,L,V] for the sequence s.
  static ScoreResult score_logits(const torch::Tensor& logits, const std::vector<int64_t>& s, size_t C) {
    const auto logp = torch::log_softmax(logits[0].to(torch::kDouble), -1);
    const int64_t L = logits.size(1);
    ScoreResult r{0.0, true};
    for (int64_t p = L - static_cast<int64_t>(C); p < L; ++p) {
      r.loglik += logp[p][s[p + 1]].item<double>();
      r.greedy = r.greedy && logp[p].argmax().item<int64_t>() == s[p + 1];
    }
    return r;
  }
};

// Standard mode = log-softmax of one plain forward per request, batched with right padding; a
// continuation that is the model's own greedy output is reported as greedy.
TEST_F(EvalMCModel, StandardScorerEqualsPlainForward) {
  torch::NoGradGuard no_grad;
  auto reqs = requests();
  ScoreRequest greedy{{ByteTokenizer::kEos, 'a', 'b'}, {}};
  for (int i = 0; i < 3; ++i) {
    std::vector<int64_t> s = greedy.context;
    s.insert(s.end(), greedy.continuation.begin(), greedy.continuation.end());
    const auto logits = model->forward(torch::tensor(s, torch::kLong).unsqueeze(0));
    greedy.continuation.push_back(logits[0][-1].argmax().item<int64_t>());
  }
  reqs.push_back(greedy);

  ModelScorer scorer(model, Decoding{}, 3);
  EXPECT_EQ(scorer.mode_name(), "standard");
  const auto got = scorer.score(reqs);
  ASSERT_EQ(got.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE(i);
    const auto [input, s] = row(reqs[i]);
    const auto want = score_logits(model->forward(input), s, reqs[i].continuation.size());
    EXPECT_NEAR(got[i].loglik, want.loglik, 1e-4);
    EXPECT_EQ(got[i].greedy, want.greedy);
  }
  EXPECT_TRUE(got.back().greedy);
  EXPECT_LT(got.back().loglik, 0);
}

// fused(k) = the last of k+1 passes of forward_passes per (unpadded) request; k = 0 is the
// standard scorer; with k+1 ≥ the row length it equals the exact sequential soft recurrence.
TEST_F(EvalMCModel, FusedScorerMatchesPassesAndSequentialRecurrence) {
  torch::NoGradGuard no_grad;
  const auto reqs = requests();
  const auto standard = ModelScorer(model, Decoding{}, 2).score(reqs);
  for (int64_t k : {1, 2}) {
    ModelScorer scorer(model, k == 0 ? Decoding{} : Decoding::fused(k), 4);
    EXPECT_EQ(scorer.mode_name(), "fused(" + std::to_string(k) + ")");
    const auto got = scorer.score(reqs);
    PassOptions o;
    o.passes = k + 1;
    o.keep_logits = true;
    for (size_t i = 0; i < reqs.size(); ++i) {
      SCOPED_TRACE(std::to_string(k) + "/" + std::to_string(i));
      const auto [input, s] = row(reqs[i]);
      const auto want = score_logits(forward_passes(model, input, {}, o).logits.back(), s, reqs[i].continuation.size());
      EXPECT_NEAR(got[i].loglik, want.loglik, 1e-4);
      EXPECT_EQ(got[i].greedy, want.greedy);
      if (input.size(1) > 2)  // the feedback changes the scores
        EXPECT_GT(std::abs(got[i].loglik - standard[i].loglik), 1e-4);
      else  // [EOS, t]: position 0 and the document start after EOS stay plain
        EXPECT_NEAR(got[i].loglik, standard[i].loglik, 1e-5);
    }
  }
  const auto plain = ModelScorer(model, Decoding{}, 1).score(reqs);  // other batching: same numbers
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_NEAR(plain[i].loglik, standard[i].loglik, 1e-4);

  const ScoreRequest short_request = reqs[0];  // 4 context + 2 continuation tokens: row length 5
  const auto [input, s] = row(short_request);
  const auto exact = score_logits(sequential_logits(model, input), s, 2);
  EXPECT_NEAR(ModelScorer(model, Decoding::fused(4), 1).score({short_request})[0].loglik, exact.loglik, 1e-4);

  EXPECT_THROW(ModelScorer(model, Decoding{DecodeMode::Fused, 0}, 1), Error);
  EXPECT_THROW(ModelScorer(model, Decoding{DecodeMode::Soft, 0}, 1), Error);  // soft has no teacher-forced scoring
  EXPECT_THROW(ModelScorer(model, Decoding{}, 0), Error);
  EXPECT_THROW(ModelScorer(model, Decoding{}, 1).score({ScoreRequest{{1}, std::vector<int64_t>(kContext + 1, 2)}}),
               Error);
  EXPECT_THROW(ModelScorer(model, Decoding{}, 1).score({ScoreRequest{{}, {2}}}), Error);
}

/// `fbt eval` on a tiny checkpoint and a 104-item ARC-Easy file in the LLM-Adapters layout.
struct EvalMCCli : ::testing::Test {
  testing::TempDir tmp;
  fs::path run = tmp.path / "run", data = tmp.path / "data";
  FBT model = testing::make_run_dir(run, ByteTokenizer::kVocab);

  void SetUp() override {
    nlohmann::json records = nlohmann::json::array();
    for (int i = 0; i < 104; ++i) {
      const auto n = [&](int d) { return std::to_string(i + d); };
      records.push_back(
          {{"instruction", "Please choose the correct answer to the question: What is " + n(0) +
                               " plus one?\n\nAnswer1: " + n(1) + " Answer2: " + n(2) + " Answer3: " + n(0) +
                               " Answer4: " + n(3) + "\n\nAnswer format: answer1/answer2/answer3/answer4"},
           {"input", ""},
           {"output", "the correct answer is answer1"},
           {"answer", "answer1"}});
    }
    testing::write_file(data / "arc" / "ARC-Easy-test.json", records.dump());
  }
  testing::CliRun fbt_cli(const std::string& args, const std::string& prefix = "env -u FBT_DATA_DIR") const {
    return testing::run_cli(tmp.path, args, prefix);
  }
};

TEST_F(EvalMCCli, PrintsTableAndWritesJsonMatchingInProcessScores) {
  const fs::path out = tmp.path / "results.json";
  const auto r = fbt_cli("eval arc_easy --checkpoint " + run.string() + " --data-dir " + data.string() +
                         " --mode all --fused-passes 1 --shots 2 --limit 3 --batch 4 --out " + out.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("| task | mode | metric | value | stderr | n |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| arc_easy | standard | acc |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| arc_easy | fused(1) | acc_norm |"), std::string::npos) << r.out;

  const auto json = nlohmann::json::parse(testing::slurp(out));
  EXPECT_EQ(json.at("config").at("vocab_size"), ByteTokenizer::kVocab);
  EXPECT_NE(json.at("checkpoint").get<std::string>().find("step-0000001"), std::string::npos);
  const auto& rows = json.at("results");
  ASSERT_EQ(rows.size(), 6u);  // 2 modes x acc, acc_norm, acc_bytes
  const auto docs = load_docs(find_task("arc_easy"), data.string());
  McEvalOptions o;
  o.shots = 2;
  o.limit = 3;
  size_t row = 0;
  for (int64_t k : {0, 1}) {
    ModelScorer scorer(model, k == 0 ? Decoding{} : Decoding::fused(k), 4);
    for (const auto& want : evaluate_task(find_task("arc_easy"), docs, ByteTokenizer(), scorer, o)) {
      const auto& got = rows[row++];
      EXPECT_EQ(got.at("task"), "arc_easy");
      EXPECT_EQ(got.at("mode"), scorer.mode_name());
      EXPECT_EQ(got.at("metric"), want.metric);
      EXPECT_NEAR(got.at("value").get<double>(), want.value, 1e-12);
      EXPECT_EQ(got.at("n"), 3);
      EXPECT_EQ(got.at("shots"), 2);
      EXPECT_EQ(got.at("seed"), 1234);
    }
  }
}

TEST_F(EvalMCCli, DataDirFromEnvironmentHelpAndErrors) {
  auto r =
      fbt_cli("eval arc_easy --checkpoint " + run.string() + " --shots 0 --limit 2", "FBT_DATA_DIR=" + data.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("| arc_easy | standard | acc | "), std::string::npos) << r.out;

  r = fbt_cli("eval --help");
  EXPECT_EQ(r.rc, 0);
  for (const auto& t : builtin_tasks()) {
    EXPECT_NE(r.out.find(t.name), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(t.path), std::string::npos) << r.out;
  }

  r = fbt_cli("eval arc_easy --checkpoint " + run.string());
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--data-dir"), std::string::npos) << r.err;

  r = fbt_cli("eval arc_challenge --checkpoint " + run.string() + " --data-dir " + data.string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("arc/ARC-Challenge-test.json"), std::string::npos) << r.err;

  r = fbt_cli("eval mmlu --checkpoint " + run.string() + " --data-dir " + data.string());
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("mmlu"), std::string::npos) << r.err;

  r = fbt_cli("eval arc_easy --checkpoint " + run.string() + " --data-dir " + data.string() + " --shots 101");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--shots 101"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fbt
