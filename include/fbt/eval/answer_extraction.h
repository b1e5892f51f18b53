// Final answers of generated solutions and their comparison with references: GSM8K (numbers) and
// MATH / MATH-500 (LaTeX in \boxed{}).
//
// GSM8K follows openai/grade-school-math (`extract_answer`: the number after "####", commas
// removed), falling back to the last number in the text as lm-evaluation-harness's
// "flexible-extract" does. MATH follows the MATH paper's reference code (Hendrycks et al. 2021,
// `last_boxed_only_string`, `remove_boxed`, `_strip_string`, `is_equiv`) with a few extensions,
// listed at normalize_math_answer. Comparison is of normalised strings: no symbolic algebra, so
// e.g. "\frac{2}{4}" and "\frac{1}{2}", or "0.25" and "\frac14", are different answers.
#pragma once
#include <optional>
#include <string>

namespace fbt {

/// Canonical text of a decimal number: thousands commas (also LaTeX's "{,}"), a leading '+' or '$' and leading zeros
/// removed, trailing zeros of the fraction and a bare trailing '.' dropped, ".5" -> "0.5",
/// "-0" -> "0". So "1,234" -> "1234", "18.00" -> "18", "-3.50" -> "-3.5". A string that is not
/// such a number comes back with surrounding whitespace trimmed and otherwise unchanged.
std::string normalize_number(const std::string& number);

/// The reference answer of a GSM8K record: the number after the last "####" of its `answer`
/// field, normalised. Throws fbt::Error if the field has no "####" or no number after it.
std::string gsm8k_reference_answer(const std::string& answer_field);

/// A generated GSM8K answer: the first number after the first "####" if that exists, else the
/// last number in the text; normalised ("The answer is 1,000." -> "1000"). A '-' directly after
/// a letter, digit or ')' is read as subtraction, not a sign. nullopt if there is no number.
std::optional<std::string> extract_gsm8k_answer(const std::string& completion);

/// normalize_number(predicted) == normalize_number(reference).
bool gsm8k_answers_equal(const std::string& predicted, const std::string& reference);

/// What the last \boxed / \fbox in `text` holds: the brace-matched group after it (nested braces
/// kept: "\boxed{\frac{1}{2}}" -> "\frac{1}{2}"), or for "\boxed X" the text up to the next '$'
/// or line end, trimmed. nullopt if there is none or its brace group is not closed.
std::optional<std::string> extract_boxed_answer(const std::string& text);

/// The MATH paper's `_strip_string`: drops line breaks, spaces, \left and \right, \! (and here
/// also \, \; \: and \displaystyle), "^\circ", "\$", "\%"; cuts a unit at "\text{ " (here also
/// "\mbox{ "); turns \dfrac and \tfrac into \frac; "\frac12" -> "\frac{1}{2}" and "\sqrt3" ->
/// "\sqrt{3}"; a leading "x = " (at most 2 characters before a single '=') is dropped; ".5" ->
/// "0.5" at the start and after ' ' or '{'; "0.5" -> "\frac{1}{2}"; "a/b" of two integers ->
/// "\frac{a}{b}"; "\\" -> "\". Extensions: "\frac{a}b" -> "\frac{a}{b}" too, "-a/b" ->
/// "-\frac{a}{b}", \text{X} \textbf{X} \mbox{X} \mathrm{X} -> X, plain "$" and "%" and a
/// trailing '.' dropped, "°" dropped, and a plain number goes through normalize_number
/// ("10,\!080" -> "10080", "18.0" -> "18"). \left / \right are dropped only as whole commands
/// (not inside \leftarrow). Never throws.
std::string normalize_math_answer(const std::string& answer);

/// normalize_math_answer(predicted) == normalize_math_answer(reference) (the paper's is_equiv).
bool math_answers_equal(const std::string& predicted, const std::string& reference);

}  // namespace fbt
