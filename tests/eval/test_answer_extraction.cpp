// GSM8K / MATH answer extraction and normalisation: hand-written cases and the shared data sets.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "fbt/eval/answer_extraction.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

TEST(AnswerExtraction, NormalizeNumber) {
  EXPECT_EQ(normalize_number("1,234"), "1234");
  EXPECT_EQ(normalize_number("18.00"), "18");
  EXPECT_EQ(normalize_number("18."), "18");
  EXPECT_EQ(normalize_number(" -3.50 "), "-3.5");
  EXPECT_EQ(normalize_number("$1,000,000"), "1000000");
  EXPECT_EQ(normalize_number(".5"), "0.5");
  EXPECT_EQ(normalize_number("007"), "7");
  EXPECT_EQ(normalize_number("-0.0"), "0");
  EXPECT_EQ(normalize_number("+12"), "12");
  EXPECT_EQ(normalize_number("1,2345"), "1,2345");  // not thousands groups: left alone
  EXPECT_EQ(normalize_number(" x+1 "), "x+1");
}

TEST(AnswerExtraction, Gsm8kAfterHashes) {
  EXPECT_EQ(extract_gsm8k_answer("She makes 9 * 2 = $18 every day.\n#### 18"), "18");
  EXPECT_EQ(extract_gsm8k_answer("Total 5 + 7 = 12.\n#### 1,450,000\n\nQuestion: 3 apples"), "1450000");
  EXPECT_EQ(extract_gsm8k_answer("#### -5"), "-5");
  EXPECT_EQ(extract_gsm8k_answer("7 cats\n####\n"), "7");  // nothing after ####: last number
}

TEST(AnswerExtraction, Gsm8kLastNumber) {
  EXPECT_EQ(extract_gsm8k_answer("The answer is 1,000."), "1000");
  EXPECT_EQ(extract_gsm8k_answer("16 - 3 - 4 = 9 eggs, so she makes 9 * 2 = 18.00 dollars"), "18");
  EXPECT_EQ(extract_gsm8k_answer("The temperature fell to -12 degrees."), "-12");
  EXPECT_EQ(extract_gsm8k_answer("16-3-4=9"), "9");
  EXPECT_EQ(extract_gsm8k_answer("He has 10-3"), "3");  // subtraction, not -3
  EXPECT_EQ(extract_gsm8k_answer("It costs $2.50 each."), "2.5");
  EXPECT_EQ(extract_gsm8k_answer("Numbers 1, 2, 3"), "3");
  EXPECT_EQ(extract_gsm8k_answer("no digits here"), std::nullopt);
  // LaTeX thousands separators (issue 20: "$9{,}500" gave "500").
  EXPECT_EQ(extract_gsm8k_answer("The total is $9{,}500$."), "9500");
  EXPECT_EQ(extract_gsm8k_answer("#### 1{,}234{,}567"), "1234567");
  EXPECT_TRUE(gsm8k_answers_equal("9{,}500", "9500"));
}

TEST(AnswerExtraction, Gsm8kReferenceAndEquality) {
  EXPECT_EQ(gsm8k_reference_answer("It takes 2/2=<<2/2=1>>1 bolt.\nSo 2+1=<<2+1=3>>3\n#### 3"), "3");
  EXPECT_EQ(gsm8k_reference_answer("...\n#### 2,125"), "2125");
  EXPECT_THROW(gsm8k_reference_answer("no marker 5"), Error);
  EXPECT_THROW(gsm8k_reference_answer("#### none"), Error);
  EXPECT_TRUE(gsm8k_answers_equal("18.00", "18"));
  EXPECT_TRUE(gsm8k_answers_equal("1,234", "1234"));
  EXPECT_FALSE(gsm8k_answers_equal("18.5", "18"));
  EXPECT_FALSE(gsm8k_answers_equal("-18", "18"));
}

TEST(AnswerExtraction, BoxedContents) {
  EXPECT_EQ(extract_boxed_answer("so $x = \\boxed{5}$."), "5");
  EXPECT_EQ(extract_boxed_answer("\\boxed{1} then \\boxed{\\frac{1}{\\sqrt{2}}}"), "\\frac{1}{\\sqrt{2}}");
  EXPECT_EQ(extract_boxed_answer("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}"),
            "\\left( 3, \\frac{\\pi}{2} \\right)");
  EXPECT_EQ(extract_boxed_answer("answer: \\fbox{42}"), "42");
  EXPECT_EQ(extract_boxed_answer("$\\boxed 7$ is it"), "7");
  EXPECT_EQ(extract_boxed_answer("\\boxed{\\frac{1}{2}"), std::nullopt);  // cut off mid-answer
  EXPECT_EQ(extract_boxed_answer("no box"), std::nullopt);
}

TEST(AnswerExtraction, MathEquivalentForms) {
  EXPECT_TRUE(math_answers_equal("\\dfrac{3}{4}", "\\frac{3}{4}"));
  EXPECT_TRUE(math_answers_equal("\\tfrac34", "\\frac{3}{4}"));
  EXPECT_TRUE(math_answers_equal("\\frac12", "\\frac{1}{2}"));
  EXPECT_TRUE(math_answers_equal("\\frac 59", "\\frac{5}{9}"));
  EXPECT_TRUE(math_answers_equal("\\frac{270}7\\text{ degrees}", "\\frac{270}{7}"));
  EXPECT_TRUE(math_answers_equal("3/4", "\\frac{3}{4}"));
  EXPECT_TRUE(math_answers_equal("-3/8", "-\\frac{3}{8}"));
  EXPECT_TRUE(math_answers_equal("0.5", "\\frac{1}{2}"));
  EXPECT_TRUE(math_answers_equal(".0000672", "0.0000672"));
  EXPECT_TRUE(math_answers_equal("18.0", "18"));
  EXPECT_TRUE(math_answers_equal("-50", "-50"));
  EXPECT_TRUE(math_answers_equal("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"));
  EXPECT_TRUE(math_answers_equal("10,\\!080", "10080"));
  EXPECT_TRUE(math_answers_equal("11,\\! 111,\\! 111,\\! 100", "11111111100"));
  EXPECT_TRUE(math_answers_equal("\\$32,\\!348", "32348"));
  EXPECT_TRUE(math_answers_equal("90^\\circ", "90"));
  EXPECT_TRUE(math_answers_equal("90^{\\circ}", "90"));
  EXPECT_TRUE(math_answers_equal("5.4 \\text{ cents}", "5.4"));
  EXPECT_TRUE(math_answers_equal("864 \\mbox{ inches}^2", "864"));
  EXPECT_TRUE(math_answers_equal("\\text{Evelyn}", "Evelyn"));
  EXPECT_TRUE(math_answers_equal("x = 5", "5"));
  EXPECT_TRUE(math_answers_equal("11\\sqrt2", "11\\sqrt{2}"));
  EXPECT_TRUE(math_answers_equal("\\sqrt[3]8", "\\sqrt[3]{8}"));
  EXPECT_TRUE(math_answers_equal("50\\%", "50"));
  EXPECT_TRUE(math_answers_equal("\\displaystyle \\frac{\\pi}{6}.", "\\frac{\\pi}{6}"));
  EXPECT_TRUE(
      math_answers_equal("\\begin{pmatrix} -1/3 \\\\ 2/3 \\end{pmatrix}", "\\begin{pmatrix}-1/3\\\\2/3\\end{pmatrix}"));
}

TEST(AnswerExtraction, MathDifferentAnswers) {
  EXPECT_FALSE(math_answers_equal("\\frac{2}{4}", "\\frac{1}{2}"));  // no algebra
  EXPECT_FALSE(math_answers_equal("-\\frac{\\pi}{6}", "\\frac{\\pi}{6}"));
  EXPECT_FALSE(math_answers_equal("1,-2", "-2,1"));
  EXPECT_FALSE(math_answers_equal("x \\leftarrow 1", "x arrow 1"));  // \left only as a whole command
  EXPECT_FALSE(math_answers_equal("(3,4]", "(3,4)"));
  EXPECT_FALSE(math_answers_equal("6 - 5i", "6 + 5i"));
}

TEST(AnswerExtraction, MathNormalFormsOfReferenceAnswers) {
  EXPECT_EQ(normalize_math_answer("\\left[ \\frac{\\pi^2}{8}, \\frac{5 \\pi^2}{4} \\right]"),
            "[\\frac{\\pi^2}{8},\\frac{5\\pi^2}{4}]");
  EXPECT_EQ(normalize_math_answer("\\text{(C)}"), "(C)");
  EXPECT_EQ(normalize_math_answer("\\$18.90"), "18.9");
  EXPECT_EQ(normalize_math_answer("y = -2x"), "-2x");
  EXPECT_EQ(normalize_math_answer("5x - 7y + 11z + 4 = 0"), "5x-7y+11z+4=0");  // long left side kept
  EXPECT_EQ(normalize_math_answer("\\frac\\pi2"), "\\frac{\\pi}{2}");
}

/// Every MATH-500 solution's last \boxed{} equals its `answer` field after normalisation, and no
/// answer normalises to nothing.
TEST(AnswerExtraction, Math500SolutionsAgreeWithAnswers) {
  std::ifstream in(FBT_SHARED_DATA "/math500/test.jsonl");
  if (!in) GTEST_SKIP() << "no " FBT_SHARED_DATA "/math500/test.jsonl";
  std::string line;
  int records = 0;
  while (std::getline(in, line)) {
    const nlohmann::json record = nlohmann::json::parse(line);
    const std::string answer = record.at("answer"), solution = record.at("solution");
    ++records;
    EXPECT_FALSE(normalize_math_answer(answer).empty()) << answer;
    const std::optional<std::string> boxed = extract_boxed_answer(solution);
    ASSERT_TRUE(boxed.has_value()) << record.at("unique_id");
    EXPECT_TRUE(math_answers_equal(*boxed, answer)) << *boxed << " vs " << answer;
  }
  EXPECT_EQ(records, 500);
}

/// Every GSM8K test solution yields its own reference number, which is a plain number.
TEST(AnswerExtraction, Gsm8kSolutionsYieldTheirReference) {
  std::ifstream in(FBT_SHARED_DATA "/gsm8k/test.jsonl");
  if (!in) GTEST_SKIP() << "no " FBT_SHARED_DATA "/gsm8k/test.jsonl";
  std::string line;
  int records = 0;
  while (std::getline(in, line)) {
    const std::string answer = nlohmann::json::parse(line).at("answer");
    ++records;
    const std::string reference = gsm8k_reference_answer(answer);
    EXPECT_EQ(reference.find_first_not_of("-0123456789."), std::string::npos) << reference;
    EXPECT_EQ(extract_gsm8k_answer(answer), reference);
  }
  EXPECT_EQ(records, 1187);  // this copy (MANIFEST.md); the official test split has 1319
}

}  // namespace
}  // namespace fbt
