// `fbt synth --task arithmetic` (include/fbt/data/synth_arithmetic.h): every solution line is
// recomputed, chained and tied to its sentence; skipping, determinism, bad flags, and the
// `arithmetic` eval task reading the files.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include "expect_error.h"
#include "fbt/data/synth_arithmetic.h"
#include "fbt/eval/answer_extraction.h"
#include "fbt/eval/gen_tasks.h"
#include "temp_dir.h"

namespace fbt {
namespace {
using testing::expect_error;

/// One solution line "a op b = c", parsed; c recomputed from a, op, b.
struct ArithmeticLine {
  int64_t a, b, c;
  char op;
};

std::vector<ArithmeticLine> solution_lines(const std::string& answer) {
  static const std::regex line(R"((\d+) ([-+*/]) (\d+) = (\d+))");
  std::vector<ArithmeticLine> out;
  for (std::sregex_iterator it(answer.begin(), answer.end(), line), end; it != end; ++it)
    out.push_back({std::stoll((*it)[1]), std::stoll((*it)[3]), std::stoll((*it)[4]), (*it)[2].str()[0]});
  return out;
}

int64_t apply(const ArithmeticLine& l) {
  switch (l.op) {
    case '+': return l.a + l.b;
    case '-': return l.a - l.b;
    case '*': return l.a * l.b;
    default: return l.b != 0 && l.a % l.b == 0 ? l.a / l.b : -1;
  }
}

/// The question's sentences, split after ". " (the first states the start, the last asks).
std::vector<std::string> sentences(const std::string& question) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t at; (at = question.find(". ", start)) != std::string::npos; start = at + 2)
    out.push_back(question.substr(start, at + 1 - start));
  out.push_back(question.substr(start));
  return out;
}

// Full solutions: one line per operation, each arithmetically right, each starting from the
// previous result (the first from the question's starting count), the i-th operand stated in the
// i-th operation sentence (as a number, or as "doubles"/"triples"), counts within 1..200, and
// "#### result" read back by GSM8K's answer extraction.
TEST(SynthArithmetic, SolutionsChainAndMatchTheirQuestions) {
  for (uint64_t seed : {0, 1, 2}) {
    ArithmeticOptions o;
    o.n = 300;
    o.seed = seed;
    std::vector<int64_t> seen_ops(7, 0);
    for (const auto& p : generate_arithmetic(o)) {
      ASSERT_FALSE(p.skipped);
      ASSERT_GE(p.operations, 2);
      ASSERT_LE(p.operations, 6);
      ++seen_ops[p.operations];
      const auto lines = solution_lines(p.answer);
      ASSERT_EQ(static_cast<int64_t>(lines.size()), p.operations) << p.answer;
      const auto said = sentences(p.question);
      ASSERT_EQ(static_cast<int64_t>(said.size()), p.operations + 2) << p.question;
      std::smatch start;
      ASSERT_TRUE(std::regex_search(said[0], start, std::regex(R"( has (\d+) )"))) << said[0];
      int64_t v = std::stoll(start[1]);
      for (size_t i = 0; i < lines.size(); ++i) {
        const auto& l = lines[i];
        EXPECT_EQ(l.a, v) << p.answer;
        EXPECT_EQ(apply(l), l.c) << p.answer;
        EXPECT_GE(l.c, 1);
        EXPECT_LE(l.c, 200);
        const auto& sentence = said[i + 1];
        const bool stated = std::regex_search(sentence, std::regex("\\b" + std::to_string(l.b) + "\\b")) ||
                            (l.op == '*' && l.b == 2 && sentence.find("doubles") != std::string::npos) ||
                            (l.op == '*' && l.b == 3 && sentence.find("triples") != std::string::npos);
        EXPECT_TRUE(stated) << sentence << " | " << l.a << l.op << l.b;
        v = l.c;
      }
      EXPECT_EQ(p.result, v);
      EXPECT_EQ(extract_gsm8k_answer(p.answer).value_or(""), std::to_string(v));
      EXPECT_EQ(gsm8k_reference_answer(p.answer), std::to_string(v));
      EXPECT_NE(said.back().find("How many"), std::string::npos);
    }
    for (int64_t k = 2; k <= 6; ++k) EXPECT_GT(seen_ops[k], 30) << k << " operations";  // ~60 each
  }
}

// --skip-fraction 0.3: about 30% of the solutions leave out at least one intermediate line (never
// the last); what remains is still right arithmetic and ends in the same "#### result".
TEST(SynthArithmetic, SkippingSolutionsDropIntermediateLinesOnly) {
  ArithmeticOptions o;
  o.n = 2000;
  o.skip_fraction = 0.3;
  o.seed = 5;
  int64_t skipped = 0;
  for (const auto& p : generate_arithmetic(o)) {
    const auto lines = solution_lines(p.answer);
    for (const auto& l : lines) EXPECT_EQ(apply(l), l.c) << p.answer;
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines.back().c, p.result);
    EXPECT_EQ(gsm8k_reference_answer(p.answer), std::to_string(p.result));
    if (p.skipped) {
      ++skipped;
      EXPECT_LT(static_cast<int64_t>(lines.size()), p.operations) << p.answer;
    } else {
      EXPECT_EQ(static_cast<int64_t>(lines.size()), p.operations) << p.answer;
    }
  }
  EXPECT_NEAR(skipped / 2000.0, 0.3, 0.04);  // 4 standard errors
}

TEST(SynthArithmetic, SeedsAreDeterministicAndIdsUnique) {
  ArithmeticOptions o;
  o.n = 50;
  o.seed = 9;
  const auto a = generate_arithmetic(o), b = generate_arithmetic(o);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(to_json(a[i]), to_json(b[i]));
  EXPECT_EQ(a[3].id, "arithmetic-9-3");
  o.seed = 10;
  const auto c = generate_arithmetic(o);
  int64_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i].question == c[i].question;
  EXPECT_LT(same, 3);
  o.min_ops = o.max_ops = 4;
  for (const auto& p : generate_arithmetic(o)) EXPECT_EQ(p.operations, 4);
}

TEST(SynthArithmetic, BadOptionsNameTheFlag) {
  auto with = [](auto set) {
    ArithmeticOptions o;
    set(o);
    return [o] { generate_arithmetic(o); };
  };
  expect_error(with([](ArithmeticOptions& o) { o.n = 0; }), {"--n"});
  expect_error(with([](ArithmeticOptions& o) { o.min_ops = 0; }), {"--min-ops"});
  expect_error(with([](ArithmeticOptions& o) { o.max_ops = 13; }), {"--max-ops"});
  expect_error(with([](ArithmeticOptions& o) {
                 o.min_ops = 4;
                 o.max_ops = 3;
               }),
               {"--max-ops", "--min-ops 4"});
  expect_error(with([](ArithmeticOptions& o) { o.skip_fraction = -0.1; }), {"--skip-fraction"});
  expect_error(with([](ArithmeticOptions& o) { o.skip_fraction = std::nan(""); }), {"--skip-fraction"});
}

// The `arithmetic` eval task reads DIR/arithmetic/test.jsonl (and train.jsonl as its few-shot
// pool) as GSM8K-style problems with the records' ids and final answers.
TEST(SynthArithmetic, EvalTaskReadsTheFiles) {
  testing::TempDir tmp;
  const auto dir = tmp.path / "arithmetic";
  std::filesystem::create_directories(dir);
  ArithmeticOptions o;
  o.n = 20;
  const auto test = generate_arithmetic(o);
  o.seed = 1;
  const auto train = generate_arithmetic(o);
  for (const auto& [name, problems] : {std::pair{"test.jsonl", &test}, std::pair{"train.jsonl", &train}}) {
    std::ofstream out(dir / name);
    for (const auto& p : *problems) out << to_json(p).dump() << "\n";
  }
  const auto* task = find_gen_task("arithmetic");
  ASSERT_NE(task, nullptr);
  const auto data = load_gen_task(*task, tmp.path.string());
  ASSERT_EQ(data.problems.size(), test.size());
  ASSERT_EQ(data.pool.size(), train.size());
  for (size_t i = 0; i < test.size(); ++i) {
    EXPECT_EQ(data.problems[i].id, test[i].id);
    EXPECT_EQ(data.problems[i].reference, std::to_string(test[i].result));
    EXPECT_EQ(data.problems[i].prompt, "Question: " + test[i].question + "\nAnswer:");
  }
  EXPECT_EQ(build_gen_prompt(*task, data, 0, 0, 0), data.problems[0].prompt);  // 0-shot by default
  EXPECT_EQ(task->default_shots, 0);
}

}  // namespace
}  // namespace fbt
