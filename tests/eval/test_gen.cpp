// Generation evaluation: prompts of the real task files, the sandboxed code harness, pass@k and
// Pass@1 / length aggregation on hand-made outcomes, and `fbt eval` generation tasks end to end.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "cli_test_helpers.h"
#include "expect_error.h"
#include "fbt/data/hf_tokenizer.h"
#include "fbt/eval/gen.h"
#include "fbt/util/error.h"
#include "sandbox_helpers.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

/// Loads a built-in task from shared/data, or skips the test when its files are missing.
#define LOAD_OR_SKIP(data, name)                                                              \
  const GenTaskSpec& task = *find_gen_task(name);                                             \
  if (!fs::exists(fs::path(FBT_SHARED_DATA) / task.path)) GTEST_SKIP() << "no " << task.path; \
  const GenTaskData data = load_gen_task(task, FBT_SHARED_DATA)

/// The first JSON line of a shared/data file.
nlohmann::json first_record(const std::string& relative) {
  std::ifstream in(fs::path(FBT_SHARED_DATA) / relative);
  std::string line;
  std::getline(in, line);
  return nlohmann::json::parse(line);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(EvalGen, Gsm8kPromptIsEightShotFromTrain) {
  LOAD_OR_SKIP(data, "gsm8k");
  EXPECT_EQ(data.problems.size(), 1187u);
  EXPECT_EQ(data.pool.size(), 7473u);
  const std::string prompt = build_gen_prompt(task, data, 0, task.default_shots, 1234);
  EXPECT_EQ(task.default_shots, 8);
  EXPECT_EQ(count(prompt, "Question: "), 9u);
  EXPECT_EQ(count(prompt, "####"), 8u);  // each shot ends in its reference answer
  const auto raw = first_record("gsm8k/test.jsonl");
  const std::string own = "Question: " + raw.at("question").get<std::string>() + "\nAnswer:";
  ASSERT_GE(prompt.size(), own.size());
  EXPECT_EQ(prompt.substr(prompt.size() - own.size()), own);
  EXPECT_EQ(prompt.substr(prompt.size() - own.size() - 2, 2), "\n\n");
  EXPECT_EQ(data.problems[0].reference, "18");
  // The shots are train questions: none is the evaluated one.
  for (int64_t e : fewshot_indices(7473, 8, 1234, 0)) {
    EXPECT_EQ(prompt.find(data.pool[e].solved + "\n\n"), prompt.find(data.pool[e].solved));
    EXPECT_NE(data.pool[e].prompt, own);
  }
}

TEST(EvalGen, Math500PromptIsFourShotFromDisjointPool) {
  LOAD_OR_SKIP(data, "math500");
  EXPECT_EQ(data.problems.size(), 400u);
  EXPECT_EQ(data.pool.size(), 100u);
  std::set<std::string> evaluated;
  for (const auto& p : data.problems) evaluated.insert(p.id);
  for (const auto& p : data.pool) EXPECT_EQ(evaluated.count(p.id), 0u) << p.id;
  const std::string prompt = build_gen_prompt(task, data, 0, task.default_shots, 1234);
  EXPECT_EQ(count(prompt, "Problem:\n"), 5u);
  const auto raw = first_record("math500/test.jsonl");
  const std::string own = "Problem:\n" + raw.at("problem").get<std::string>() + "\n\nSolution:";
  EXPECT_EQ(prompt.substr(prompt.size() - own.size()), own);
  EXPECT_EQ(data.problems[0].reference, raw.at("answer").get<std::string>());
}

TEST(EvalGen, HumanEvalPromptIsTheRecordPrompt) {
  LOAD_OR_SKIP(data, "humaneval");
  EXPECT_EQ(data.problems.size(), 164u);
  EXPECT_TRUE(data.pool.empty());
  const auto& p = data.problems[0];
  EXPECT_EQ(p.id, "HumanEval/0");
  EXPECT_EQ(build_gen_prompt(task, data, 0, task.default_shots, 1234), p.prompt);
  EXPECT_EQ(p.prompt.find("def has_close_elements(numbers: List[float], threshold: float) -> bool:"), 26u);
  EXPECT_EQ(p.program_prefix, p.prompt);
  EXPECT_EQ(p.tests.substr(p.tests.size() - 26), "check(has_close_elements)\n");
  EXPECT_THROW(build_gen_prompt(task, data, 0, 1, 1234), Error);  // no pool to draw from
}

TEST(EvalGen, MbppPromptIsThreeFixedShotsWithTestsShown) {
  LOAD_OR_SKIP(data, "mbpp");
  ASSERT_EQ(data.problems.size(), 500u);
  EXPECT_EQ(data.problems.front().id, "11");
  EXPECT_EQ(data.problems.back().id, "510");
  ASSERT_EQ(data.pool.size(), 3u);
  EXPECT_EQ(data.pool[0].id, "2");
  EXPECT_EQ(data.pool[2].id, "4");
  const std::string prompt = build_gen_prompt(task, data, 0, task.default_shots, 1234);
  EXPECT_EQ(count(prompt, "You are an expert Python programmer"), 4u);
  EXPECT_EQ(count(prompt, "[DONE]"), 3u);
  EXPECT_EQ(prompt.find('\r'), std::string::npos);
  EXPECT_EQ(prompt.find(data.pool[0].solved + "\n\n" + data.pool[1].solved + "\n\n" + data.pool[2].solved), 0u);
  const std::string own =
      "You are an expert Python programmer, and here is your task: Write a python function to remove first and "
      "last occurrence of a given character from the string. Your code should pass these tests:\n\n"
      "assert remove_Occ(\"hello\",\"l\") == \"heo\"\nassert remove_Occ(\"abcda\",\"a\") == \"bcd\"\n"
      "assert remove_Occ(\"PHP\",\"P\") == \"H\"\n[BEGIN]\n";
  EXPECT_EQ(prompt.substr(prompt.size() - own.size()), own);
  EXPECT_EQ(data.problems[0].tests,
            "\n\nassert remove_Occ(\"hello\",\"l\") == \"heo\"\nassert remove_Occ(\"abcda\",\"a\") == \"bcd\"\n"
            "assert remove_Occ(\"PHP\",\"P\") == \"H\"\n");
}

TEST(EvalGen, HumanEvalHarnessPassesFailsAndTimesOut) {
  LOAD_OR_SKIP(data, "humaneval");
  REQUIRE_SANDBOX();
  const std::string right =
      "    for i, a in enumerate(numbers):\n"
      "        for b in numbers[i + 1:]:\n"
      "            if abs(a - b) < threshold:\n"
      "                return True\n"
      "    return False\n";
  const std::string wrong = "    return False\n";
  const std::string endless = "    while True:\n        pass\n";
  // What the model would write after the body is cut at "\ndef " (HumanEval's stop sequences).
  EXPECT_EQ(cut_at_stop(right + "\ndef helper():\n    pass\n", task.stop), right);
  std::vector<GenSample> samples(3);
  samples[0].completion = right;
  samples[1].completion = wrong;
  samples[2].completion = endless;
  SandboxLimits limits;
  limits.timeout_seconds = 2;
  limits.cpu_seconds = 2;
  const auto start = std::chrono::steady_clock::now();
  run_programs(data.problems, samples, limits, 3);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  EXPECT_TRUE(samples[0].correct);
  EXPECT_EQ(samples[0].status, "passed");
  EXPECT_FALSE(samples[1].correct);
  EXPECT_EQ(samples[1].status, "failed");
  EXPECT_FALSE(samples[2].correct);
  EXPECT_EQ(samples[2].status, "timeout");
}

/// `correct` outcomes of problem `problem`, one sample each.
void add_outcomes(std::vector<GenSample>& samples, int64_t problem, std::vector<bool> correct) {
  for (size_t j = 0; j < correct.size(); ++j) {
    GenSample s;
    s.problem = problem;
    s.sample = static_cast<int64_t>(j);
    s.correct = correct[j];
    samples.push_back(s);
  }
}

// Three problems of n = 3 samples with c = 1, 0, 3 correct:
//   pass@1 = mean(1/3, 0, 1) = 4/9
//   pass@2 = mean(1 − C(2,2)/C(3,2), 0, 1) = mean(2/3, 0, 1) = 5/9
//   pass@3 = mean(1, 0, 1) = 2/3
TEST(EvalGen, PassAtKAggregatesHandMadeOutcomes) {
  std::vector<GenSample> samples;
  add_outcomes(samples, 0, {false, true, false});
  add_outcomes(samples, 1, {false, false, false});
  add_outcomes(samples, 2, {true, true, true});
  const auto r = pass_at_k_metrics(samples, {1, 2, 3});
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].metric, "pass@1");
  EXPECT_NEAR(r[0].value, 4.0 / 9, 1e-12);
  EXPECT_NEAR(r[1].value, 5.0 / 9, 1e-12);
  EXPECT_NEAR(r[2].value, 2.0 / 3, 1e-12);
  EXPECT_EQ(r[2].n, 3);
  // stderr of pass@3 = sd(1, 0, 1)/sqrt(3) = sqrt(1/3)/sqrt(3) = 1/3
  EXPECT_NEAR(r[2].stderr_, 1.0 / 3, 1e-12);
  EXPECT_THROW(pass_at_k_metrics(samples, {4}), Error);
}

TEST(EvalGen, StopSequencesAndTokenCounts) {
  const ByteTokenizer bytes;
  const std::vector<std::string> stops{"Question:", "\n\n"};
  EXPECT_EQ(cut_at_stop("a\nb\n\nQuestion: c", stops), "a\nb");
  EXPECT_EQ(cut_at_stop("abc", stops), "abc");
  EXPECT_EQ(tokens_until_stop(bytes, bytes.encode("a\nb\n\nQuestion: c"), stops), 5);  // "a\nb\n\n"
  EXPECT_EQ(tokens_until_stop(bytes, bytes.encode("abc"), stops), 3);
}

// GSM8K scoring through evaluate_generation with a stub generator returning hand-written
// completions (byte tokenizer, so tokens = bytes up to and including the stop sequence):
//   "The answer is 18.\n\nQuestion: x"  -> "18" (reference 18): correct, 17 + 2 = 19 tokens
//   "#### 5\n\n"                       -> "5" (reference 3): wrong, 6 + 2 = 8 tokens
//   "no number here"                   -> none: no_answer, 14 tokens (no stop)
// pass@1 = 1/3 (stderr sqrt(1/3·2/3/2) = 1/3), median tokens 14, mean (19 + 8 + 14)/3 = 41/3.
TEST(EvalGen, Gsm8kPassAt1AndLengthsFromStubCompletions) {
  const GenTaskSpec& task = *find_gen_task("gsm8k");
  GenTaskData data;
  for (const char* reference : {"18", "3", "7"}) {
    GenProblem p;
    p.prompt = std::string("Question: q") + reference + "\nAnswer:";
    p.reference = reference;
    data.problems.push_back(p);
  }
  const ByteTokenizer bytes;
  const std::vector<std::string> completions{"The answer is 18.\n\nQuestion: x", "#### 5\n\n", "no number here"};
  std::vector<std::string> seen;
  bool whole_prompts = true;  // not truncated: they start with EOS
  const GenerateFn stub = [&](const std::vector<std::vector<int64_t>>& prompts, const GenerationOptions& g) {
    EXPECT_EQ(g.sampling.temperature, 0.0);
    EXPECT_EQ(g.eos_id, ByteTokenizer::kEos);
    std::vector<std::vector<int64_t>> out;
    for (const auto& p : prompts) {
      EXPECT_EQ(p.front() == ByteTokenizer::kEos, whole_prompts);
      seen.push_back(bytes.decode(p));
      out.push_back(bytes.encode(completions[seen.size() - 1]));
    }
    return out;
  };
  GenEvalOptions o;
  o.shots = 0;
  o.context = 1000;
  o.max_new_tokens = 64;
  o.batch = 2;
  const auto r = evaluate_generation(task, data, bytes, stub, o);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[1], "Question: q3\nAnswer:");
  ASSERT_EQ(r.samples.size(), 3u);
  EXPECT_EQ(r.samples[0].completion, "The answer is 18.");
  EXPECT_EQ(r.samples[0].status, "correct");
  EXPECT_EQ(r.samples[1].extracted, "5");
  EXPECT_EQ(r.samples[1].status, "wrong");
  EXPECT_EQ(r.samples[2].status, "no_answer");
  EXPECT_EQ(r.samples[0].tokens, 19);
  EXPECT_EQ(r.samples[1].tokens, 8);
  EXPECT_EQ(r.samples[2].tokens, 14);
  ASSERT_EQ(r.metrics.size(), 3u);
  EXPECT_EQ(r.metrics[0].result.metric, "pass@1");
  EXPECT_NEAR(r.metrics[0].result.value, 1.0 / 3, 1e-12);
  EXPECT_NEAR(r.metrics[0].result.stderr_, 1.0 / 3, 1e-12);
  EXPECT_EQ(r.metrics[1].result.metric, "median_tokens");
  EXPECT_EQ(r.metrics[1].result.value, 14.0);
  EXPECT_EQ(r.metrics[2].result.metric, "mean_tokens");
  EXPECT_NEAR(r.metrics[2].result.value, 41.0 / 3, 1e-12);

  o.context = 20;  // prompts keep their last 20 − 16 tokens
  o.max_new_tokens = 16;
  seen.clear();
  whole_prompts = false;
  const auto cut = evaluate_generation(task, data, bytes, stub, o);
  EXPECT_EQ(seen[0], "wer:");
  EXPECT_TRUE(cut.samples[0].prompt_truncated);
  EXPECT_EQ(cut.samples[0].prompt_tokens, 4);
}

/// A tokenizer that is another one except for its EOS: shows that chat evaluation stops at the
/// template's end-of-turn token, not at the tokenizer's EOS.
class OtherEos : public Tokenizer {
 public:
  OtherEos(const Tokenizer& base, int64_t eos) : base_(base), eos_(eos) {}
  std::vector<int64_t> encode(std::string_view text) const override { return base_.encode(text); }
  std::string decode(const std::vector<int64_t>& ids) const override { return base_.decode(ids); }
  int64_t vocab_size() const override { return base_.vocab_size(); }
  int64_t bos_id() const override { return base_.bos_id(); }
  int64_t eos_id() const override { return eos_; }
  int64_t pad_id() const override { return base_.pad_id(); }
  std::string type() const override { return base_.type(); }

 private:
  const Tokenizer& base_;
  int64_t eos_;
};

// --prompt-format chat: the prompt is the problem's question as one ChatML user turn (the text
// written out here by hand, tokenized whole), shots come first as user/assistant turns, the
// generator is told to stop at <|im_end|> (id 2 in the fixture; the tokenizer's EOS is made 0),
// and the task's stop sequences ("\n\n", "Question:") do not cut the reply.
TEST(EvalGen, ChatPromptsAreUserTurnsStoppingAtEndOfTurn) {
  const auto hf = HfBpeTokenizer::from_file(
      (fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "chat_templates" / "chatml" / "tokenizer.json").string());
  const OtherEos tokenizer(*hf, 0);
  const GenTaskSpec& task = *find_gen_task("gsm8k");
  GenTaskData data;
  data.problems.push_back(task.to_problem({{"question", "What is 2+3?"}, {"answer", "2+3=5\n#### 5"}}));
  data.pool.push_back(task.to_problem({{"question", "What is 1+1?"}, {"answer", "1+1=2\n#### 2"}}));
  EXPECT_EQ(data.problems[0].user, "What is 2+3?");
  const std::string reply = "Let me think.\n\nQuestion: what is 2+3? It is 5.\n#### 5";
  std::vector<std::vector<int64_t>> seen;
  const GenerateFn stub = [&](const std::vector<std::vector<int64_t>>& prompts, const GenerationOptions& g) {
    EXPECT_EQ(g.eos_id, 2);
    seen.insert(seen.end(), prompts.begin(), prompts.end());
    return std::vector<std::vector<int64_t>>(prompts.size(), tokenizer.encode(reply));
  };
  GenEvalOptions o;
  o.shots = 0;
  o.context = 1000;
  o.max_new_tokens = 64;
  o.chat = ChatTemplate::for_tokenizer(tokenizer, "chatml", "fixture");
  ASSERT_EQ(o.chat->end_of_turn_id(), 2);
  const auto r = evaluate_generation(task, data, tokenizer, stub, o);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], hf->encode("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n"));
  EXPECT_EQ(r.samples[0].completion, reply);  // not cut at "\n\n"
  EXPECT_EQ(r.samples[0].tokens, static_cast<int64_t>(hf->encode(reply).size()));
  EXPECT_EQ(r.samples[0].status, "correct");

  o.shots = 1;
  seen.clear();
  evaluate_generation(task, data, tokenizer, stub, o);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], hf->encode("<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n1+1=2\n#### 2"
                                "<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n"));

  // Code tasks have no chat prompt: refused before anything runs, naming the flag.
  o.allow_code_execution = true;
  testing::expect_error([&] { check_gen_options(*find_gen_task("humaneval"), o); }, {"--prompt-format", "humaneval"});
}

// MATH-500's chat user message is the problem text itself.
TEST(EvalGen, Math500ChatMessageIsTheProblem) {
  const GenTaskSpec& task = *find_gen_task("math500");
  GenTaskData data;
  data.problems.push_back(task.to_problem(
      {{"problem", "Compute $1+1$."}, {"solution", "It is $\\boxed{2}$."}, {"answer", "2"}, {"unique_id", "x"}}));
  const auto messages = build_gen_chat(task, data, 0, 0, 1);
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].role, "user");
  EXPECT_EQ(messages[0].content, "Compute $1+1$.");
}

// MATH: "\boxed{\dfrac{1}{2}}" equals the reference "\frac12"; "\boxed{3}" is not "4"; a
// completion without \boxed has no answer. Pass@1 = 1/3; lengths 5, 7, 9 -> median 7, mean 7.
TEST(EvalGen, MathScoringOfHandWrittenCompletions) {
  const GenTaskSpec& task = *find_gen_task("math500");
  GenProblem half, four;
  half.reference = "\\frac12";
  four.reference = "4";
  std::vector<GenSample> samples(3);
  samples[0].completion = "so $x = \\boxed{\\dfrac{1}{2}}$.";
  samples[1].completion = "The answer is $\\boxed{3}$.";
  samples[2].completion = "I give up.";
  score_answer(task, half, samples[0]);
  score_answer(task, four, samples[1]);
  score_answer(task, four, samples[2]);
  EXPECT_TRUE(samples[0].correct);
  EXPECT_EQ(samples[0].extracted, "\\dfrac{1}{2}");
  EXPECT_EQ(samples[1].status, "wrong");
  EXPECT_EQ(samples[2].status, "no_answer");
  samples[0].tokens = 5;
  samples[1].tokens = 9;
  samples[2].tokens = 7;
  const auto m = greedy_metrics(samples);
  EXPECT_NEAR(m[0].value, 1.0 / 3, 1e-12);
  EXPECT_EQ(m[1].value, 7.0);
  EXPECT_EQ(m[2].value, 7.0);
  EXPECT_THROW(score_answer(*find_gen_task("mbpp"), half, samples[0]), Error);
}

TEST(EvalGen, CliRunsMathAndCodeTasksInAllModes) {
  if (!fs::exists(fs::path(FBT_SHARED_DATA) / "gsm8k" / "test.jsonl") ||
      !fs::exists(fs::path(FBT_SHARED_DATA) / "humaneval" / "HumanEval.jsonl.gz"))
    GTEST_SKIP() << "no GSM8K / HumanEval in shared/data";
  REQUIRE_SANDBOX();
  testing::TempDir tmp;
  const fs::path run = tmp.path / "run", out = tmp.path / "results.json";
  testing::make_run_dir(run, ByteTokenizer::kVocab);
  const auto r = testing::run_cli(
      tmp.path, "eval gsm8k humaneval --checkpoint " + run.string() + " --data-dir " + FBT_SHARED_DATA +
                    " --modes all --limit 2 --max-new-tokens 16 --samples-per-problem 3 --temperatures 0.5"
                    " --pass-k 1,3 --sandbox-timeout 5 --allow-code-execution --out " +
                    out.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("| task | mode | metric | temperature | value | stderr | n |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| gsm8k | soft | pass@1 | 0 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| humaneval | fused(1) | best_pass@3 | 0.5 |"), std::string::npos) << r.out;

  const auto json = nlohmann::json::parse(testing::slurp(out));
  const auto& rows = json.at("results");
  ASSERT_EQ(rows.size(), 3u * 3 + 3u * 4);  // gsm8k: 3 metrics; humaneval: 2 pass@k + 2 best
  std::set<std::string> modes;
  for (const auto& row : rows) {
    modes.insert(row.at("mode").get<std::string>());
    for (const char* field : {"task", "metric", "value", "stderr", "n", "seed", "temperature", "shots"})
      EXPECT_TRUE(row.contains(field)) << field << " in " << row.dump();
    EXPECT_EQ(row.at("n"), 2);
  }
  EXPECT_EQ(modes, (std::set<std::string>{"standard", "soft", "fused(1)"}));
  EXPECT_EQ(rows[0].at("shots"), 8);
  EXPECT_NE(json.at("checkpoint").get<std::string>().find("step-0000001"), std::string::npos);
  EXPECT_TRUE(json.at("config").contains("vocab_size"));

  const fs::path samples = tmp.path / "results.samples.jsonl";
  EXPECT_EQ(json.at("samples"), samples.string());
  std::ifstream in(samples);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 3u * 2 + 3u * 2 * 3);
  for (const auto& s : lines) {
    for (const char* field : {"task", "mode", "problem", "id", "temperature", "sample", "completion", "tokens",
                              "extracted", "correct", "status", "prompt_tokens", "prompt_truncated"})
      EXPECT_TRUE(s.contains(field)) << field << " in " << s.dump();
    EXPECT_LE(s.at("tokens").get<int64_t>(), 16);
    EXPECT_EQ(s.at("prompt_tokens"), 64 - 16);  // 8-shot / HumanEval prompts exceed the debug context
  }
  EXPECT_EQ(lines[0].at("id"), "1");
  EXPECT_EQ(lines[6].at("id"), "HumanEval/0");

  const auto help = testing::run_cli(tmp.path, "eval --help");
  for (const auto& t : builtin_gen_tasks()) EXPECT_NE(help.out.find(t.name), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--allow-code-execution"), std::string::npos) << help.out;
}

/// The lines of a JSONL file.
std::vector<nlohmann::json> jsonl(const fs::path& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// `fbt eval gsm8k --prompt-format chat --shots 0 --mode all` on a byte-tokenizer checkpoint (fbt's
// native template): each prompt is [EOS] "User: {question}\n\n" "Assistant: " (its length from the
// raw test file, one token per byte), and every pair of modes gets a McNemar row whose b and c are
// the counts of the samples' own verdicts.
TEST(EvalGen, CliChatPromptsZeroShotWithMcNemarPerModePair) {
  if (!fs::exists(fs::path(FBT_SHARED_DATA) / "gsm8k" / "test.jsonl")) GTEST_SKIP() << "no GSM8K in shared/data";
  testing::TempDir tmp;
  const fs::path run = tmp.path / "run", out = tmp.path / "chat.json";
  testing::make_run_dir(run, ByteTokenizer::kVocab, /*context=*/1024);
  const auto r =
      testing::run_cli(tmp.path, "eval gsm8k --checkpoint " + run.string() + " --data-dir " + FBT_SHARED_DATA +
                                     " --prompt-format chat --shots 0 --mode all "
                                     "--limit 4 --max-new-tokens 12 --out " +
                                     out.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("chat prompts (fbt template)"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("lost their beginning"), std::string::npos) << r.err;
  const auto json = nlohmann::json::parse(testing::slurp(out));
  EXPECT_EQ(json.at("prompt_format"), "chat");
  EXPECT_EQ(json.at("chat_template"), "fbt");
  for (const auto& row : json.at("results")) EXPECT_EQ(row.at("shots"), 0);

  const auto samples = jsonl(tmp.path / "chat.samples.jsonl");
  ASSERT_EQ(samples.size(), 3u * 4);
  std::ifstream test(fs::path(FBT_SHARED_DATA) / "gsm8k" / "test.jsonl");
  std::map<std::string, std::vector<bool>> correct;  // per mode, by problem
  for (int64_t i = 0; i < 4; ++i) {
    std::string line;
    std::getline(test, line);
    const std::string question = nlohmann::json::parse(line).at("question");
    const auto expected =
        static_cast<int64_t>(1 + ("User: " + question + "\n\n").size() + std::string("Assistant: ").size());
    for (int64_t m = 0; m < 3; ++m) {
      const auto& s = samples[m * 4 + i];
      EXPECT_EQ(s.at("problem"), i);
      EXPECT_EQ(s.at("prompt_tokens"), expected) << question;
      EXPECT_FALSE(s.at("prompt_truncated").get<bool>());
    }
  }
  for (const auto& s : samples) correct[s.at("mode").get<std::string>()].push_back(s.at("correct").get<bool>());

  const std::vector<std::pair<std::string, std::string>> pairs{
      {"standard", "soft"}, {"standard", "fused(1)"}, {"soft", "fused(1)"}};
  EXPECT_NE(r.out.find("| task | mode A | mode B | n | pass@1 A | pass@1 B | b | c | p |"), std::string::npos) << r.out;
  const auto& rows = json.at("mcnemar");
  ASSERT_EQ(rows.size(), pairs.size());
  for (size_t k = 0; k < pairs.size(); ++k) {
    const auto& [a, b] = pairs[k];
    EXPECT_NE(r.out.find("| gsm8k | " + a + " | " + b + " | 4 |"), std::string::npos) << r.out;
    EXPECT_EQ(rows[k].at("mode_a"), a);
    EXPECT_EQ(rows[k].at("mode_b"), b);
    int64_t only_a = 0, only_b = 0;
    for (size_t i = 0; i < 4; ++i) {
      only_a += correct[a][i] && !correct[b][i];
      only_b += !correct[a][i] && correct[b][i];
    }
    EXPECT_EQ(rows[k].at("b"), only_a);
    EXPECT_EQ(rows[k].at("c"), only_b);
    if (only_a + only_b == 0) {
      EXPECT_EQ(rows[k].at("p"), 1.0);
    }
  }

  // Chat prompts are for the math tasks only; --chat-template without them is a mistake.
  const auto mc = testing::run_cli(tmp.path, "eval arc_easy --checkpoint " + run.string() + " --data-dir " +
                                                 FBT_SHARED_DATA + " --prompt-format chat");
  EXPECT_EQ(mc.rc, 1);
  EXPECT_NE(mc.err.find("--prompt-format chat: task arc_easy"), std::string::npos) << mc.err;
  const auto stray = testing::run_cli(tmp.path, "eval gsm8k --checkpoint " + run.string() + " --data-dir " +
                                                    FBT_SHARED_DATA + " --chat-template chatml");
  EXPECT_EQ(stray.rc, 1);
  EXPECT_NE(stray.err.find("needs --prompt-format chat"), std::string::npos) << stray.err;
}

// A code task runs only with GenEvalOptions::allow_code_execution: without it evaluate_generation
// throws before generating anything; with it the stub's right answer passes in the sandbox.
TEST(EvalGen, HumanEvalNeedsAllowCodeExecution) {
  const GenTaskSpec& task = *find_gen_task("humaneval");
  GenTaskData data;
  GenProblem p;
  p.id = "Test/0";
  p.prompt = "def f():\n";
  p.program_prefix = p.prompt;
  p.tests = "\nassert f() == 1\n";
  data.problems.push_back(p);
  const ByteTokenizer bytes;
  int calls = 0;
  const GenerateFn stub = [&](const std::vector<std::vector<int64_t>>& prompts, const GenerationOptions&) {
    ++calls;
    return std::vector<std::vector<int64_t>>(prompts.size(), bytes.encode("    return 1\n"));
  };
  GenEvalOptions o;
  o.context = 1000;
  o.max_new_tokens = 32;
  o.samples = 2;
  o.temperatures = {0.5};
  o.ks = {1};
  try {
    evaluate_generation(task, data, bytes, stub, o);
    ADD_FAILURE() << "ran code without allow_code_execution";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("allow_code_execution"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bubblewrap"), std::string::npos) << e.what();
  }
  EXPECT_EQ(calls, 0);
  REQUIRE_SANDBOX();
  o.allow_code_execution = true;
  const auto r = evaluate_generation(task, data, bytes, stub, o);
  EXPECT_EQ(calls, 2);
  ASSERT_EQ(r.samples.size(), 2u);
  for (const auto& s : r.samples) EXPECT_EQ(s.status, "passed");
  ASSERT_FALSE(r.metrics.empty());
  EXPECT_EQ(r.metrics[0].result.value, 1.0);
}

// `fbt eval` with a code task and without --allow-code-execution stops before it looks at the
// checkpoint (which does not exist here); math tasks need no such flag.
TEST(EvalGen, CliRefusesCodeTasksWithoutAllowCodeExecution) {
  testing::TempDir tmp;
  const std::string where =
      " --checkpoint " + (tmp.path / "no-such-run").string() + " --data-dir " + (tmp.path / "no-such-data").string();
  for (const std::string tasks : {"humaneval", "gsm8k mbpp"}) {
    const auto r = testing::run_cli(tmp.path, "eval " + tasks + where);
    EXPECT_EQ(r.rc, 1) << tasks;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("--allow-code-execution"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("bubblewrap sandbox"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("no-such-run"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "") << tasks;
  }
  const auto math = testing::run_cli(tmp.path, "eval gsm8k" + where);
  EXPECT_EQ(math.rc, 1);
  EXPECT_EQ(math.err.find("--allow-code-execution"), std::string::npos) << math.err;
}

// Every process a code task's program starts is gone when `fbt eval` exits: the task's own
// prompt starts a setsid'd `sh` under a unique name (the model's completion lands in a string
// literal, so that any completion leaves the program valid Python).
TEST(EvalGen, CliCodeTasksLeaveNoProcessBehind) {
  REQUIRE_SANDBOX();
  testing::TempDir tmp;
  const std::string marker = "fbt-escape-" + std::to_string(::getpid()) + "-cli";
  const nlohmann::json record{{"task_id", "Escape/0"},
                              {"prompt",
                               "# -*- coding: latin-1 -*-\nimport os\nif os.fork() == 0:\n    os.setsid()\n"
                               "    os.execv('/bin/sh', ['" +
                                   marker +
                                   "', '-c', 'sleep 30'])\n"
                                   "def f():\n    return 1\nx = \"\"\""},
                              {"canonical_solution", ""},
                              {"test", "\"\"\"\ndef check(candidate):\n    assert candidate() == 1\n"},
                              {"entry_point", "f"}};
  const fs::path data = tmp.path / "data", run = tmp.path / "run";
  testing::write_file(data / "humaneval" / "HumanEval.jsonl", record.dump() + "\n");
  ASSERT_EQ(std::system(("gzip " + (data / "humaneval" / "HumanEval.jsonl").string()).c_str()), 0);
  testing::make_run_dir(run, ByteTokenizer::kVocab);
  const auto r =
      testing::run_cli(tmp.path, "eval humaneval --checkpoint " + run.string() + " --data-dir " + data.string() +
                                     " --max-new-tokens 4 --samples-per-problem 3 --temperatures 0.5 --pass-k 1"
                                     " --allow-code-execution --samples " +
                                     (tmp.path / "samples.jsonl").string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(testing::processes_with_marker(marker), 0);
  int passed = 0;  // programs that ran to the end, having started the escapee
  std::ifstream in(tmp.path / "samples.jsonl");
  for (std::string line; std::getline(in, line);) passed += nlohmann::json::parse(line).at("status") == "passed";
  EXPECT_GE(passed, 1) << testing::slurp(tmp.path / "samples.jsonl");
}

}  // namespace
}  // namespace fbt
