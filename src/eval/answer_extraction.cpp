// GSM8K number extraction and MATH \boxed{} extraction and normalisation
// (see include/fbt/eval/answer_extraction.h).
#include "fbt/eval/answer_extraction.h"

#include <algorithm>
#include <cctype>
#include <regex>
#include <vector>

#include "fbt/util/error.h"

namespace fbt {
namespace {

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
  return s;
}

bool is_letter(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

/// Index of the '}' matching the '{' at `open`, or npos.
size_t matching_brace(const std::string& s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) return i;
  }
  return std::string::npos;
}

/// Removes the LaTeX command `name` (e.g. "\left") where it is a whole command, i.e. not followed
/// by a letter ("\leftarrow" stays).
std::string remove_command(const std::string& s, const std::string& name) {
  std::string out;
  size_t pos = 0;
  for (size_t i = s.find(name); i != std::string::npos; i = s.find(name, i + name.size())) {
    const size_t end = i + name.size();
    if (end < s.size() && is_letter(s[end])) continue;
    out += s.substr(pos, i - pos);
    pos = end;
  }
  return out + s.substr(pos);
}

/// Replaces every `open`...} group (open is e.g. "\text{") by what it holds.
std::string unwrap(std::string s, const std::string& open) {
  for (size_t i = s.find(open); i != std::string::npos; i = s.find(open, i)) {
    const size_t close = matching_brace(s, i + open.size() - 1);
    if (close == std::string::npos) break;
    s = s.substr(0, i) + s.substr(i + open.size(), close - i - open.size()) + s.substr(close + 1);
  }
  return s;
}

/// Braces the first `nargs` arguments of every `command` that are written without them:
/// "\frac12" -> "\frac{1}{2}", "\frac{270}7" -> "\frac{270}{7}", "\sqrt3" -> "\sqrt{3}". An
/// unbraced argument is one character or one command ("\frac\pi2" -> "\frac{\pi}{2}"); an optional
/// "[...]" argument ("\sqrt[3]8") is kept as it is. Expects spaces already removed.
std::string brace_arguments(const std::string& s, const std::string& command, int nargs) {
  std::string out;
  size_t pos = 0;
  for (size_t i = s.find(command); i != std::string::npos; i = s.find(command, pos)) {
    size_t j = i + command.size();
    out += s.substr(pos, j - pos);
    pos = j;
    if (j < s.size() && is_letter(s[j])) continue;  // a longer command name, e.g. \fracture
    if (j < s.size() && s[j] == '[') {
      const size_t close = s.find(']', j);
      if (close == std::string::npos) continue;
      out += s.substr(j, close + 1 - j);
      j = close + 1;
    }
    for (int arg = 0; arg < nargs && j < s.size(); ++arg) {
      size_t end = j + 1;  // one past the argument
      if (s[j] == '{') {
        const size_t close = matching_brace(s, j);
        if (close == std::string::npos) break;
        end = close + 1;
        out += s.substr(j, end - j);
      } else {
        if (s[j] == '\\')
          while (end < s.size() && is_letter(s[end])) ++end;
        out += "{" + s.substr(j, end - j) + "}";
      }
      j = end;
    }
    pos = j;
  }
  return out + s.substr(pos);
}

/// A number in running text: optional '-', digits (optionally in comma-separated thousands
/// groups), optional decimals. A trailing '.' (end of sentence) is not part of it.
const std::regex& number_in_text() {
  static const std::regex re(R"(-?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?)");
  return re;
}

/// Every number in `raw`, normalised, in order. LaTeX's thousands separator "{,}" ("$9{,}500$")
/// counts as a comma.
std::vector<std::string> numbers_in(const std::string& raw) {
  const std::string text = replace_all(raw, "{,}", ",");
  std::vector<std::string> numbers;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), number_in_text()); it != std::sregex_iterator(); ++it) {
    std::string number = it->str();
    const auto at = it->position();
    const char before = at > 0 ? text[at - 1] : ' ';
    const bool follows_operand = std::isalnum(static_cast<unsigned char>(before)) || before == ')';
    if (number[0] == '-' && follows_operand) number.erase(0, 1);  // "16-3": a subtraction
    numbers.push_back(normalize_number(number));
  }
  return numbers;
}

}  // namespace

std::string normalize_number(const std::string& number) {
  static const std::regex re(R"(\+?(-?)\$?(\d{1,3}(?:,\d{3})+|\d*)(?:\.(\d*))?)");
  const std::string s = trim(replace_all(number, "{,}", ","));
  std::smatch m;
  if (!std::regex_match(s, m, re) || (m[2].length() == 0 && m[3].length() == 0)) return s;
  std::string integer = replace_all(m[2].str(), ",", "");
  integer.erase(0, std::min(integer.find_first_not_of('0'), integer.size()));
  if (integer.empty()) integer = "0";
  std::string fraction = m[3].str();
  fraction.erase(fraction.find_last_not_of('0') + 1);
  const bool negative = m[1].length() > 0 && !(integer == "0" && fraction.empty());
  return (negative ? "-" : "") + integer + (fraction.empty() ? "" : "." + fraction);
}

std::string gsm8k_reference_answer(const std::string& answer_field) {
  const size_t mark = answer_field.rfind("####");
  if (mark == std::string::npos)
    throw Error("GSM8K answer field has no '####' before its final answer: '" + answer_field + "'");
  const std::vector<std::string> numbers = numbers_in(answer_field.substr(mark + 4));
  if (numbers.empty()) throw Error("GSM8K answer field has no number after '####': '" + answer_field + "'");
  return numbers.front();
}

std::optional<std::string> extract_gsm8k_answer(const std::string& completion) {
  const size_t mark = completion.find("####");
  if (mark != std::string::npos) {
    const std::vector<std::string> after = numbers_in(completion.substr(mark + 4));
    if (!after.empty()) return after.front();
  }
  const std::vector<std::string> all = numbers_in(completion);
  if (all.empty()) return std::nullopt;
  return all.back();
}

bool gsm8k_answers_equal(const std::string& predicted, const std::string& reference) {
  return normalize_number(predicted) == normalize_number(reference);
}

std::optional<std::string> extract_boxed_answer(const std::string& text) {
  const size_t boxed = text.rfind("\\boxed"), fbox = text.rfind("\\fbox");
  size_t at;
  if (boxed != std::string::npos && (fbox == std::string::npos || boxed > fbox)) {
    at = boxed + 6;
  } else if (fbox != std::string::npos) {
    at = fbox + 5;
  } else {
    return std::nullopt;
  }
  if (at < text.size() && text[at] == ' ') return trim(text.substr(at, text.find_first_of("$\n", at) - at));
  if (at >= text.size() || text[at] != '{') return std::nullopt;
  const size_t close = matching_brace(text, at);
  if (close == std::string::npos) return std::nullopt;
  return text.substr(at + 1, close - at - 1);
}

std::string normalize_math_answer(const std::string& answer) {
  std::string s = replace_all(replace_all(answer, "\n", ""), "\r", "");
  s = replace_all(s, "\\!", "");
  for (const char* space : {"\\,", "\\;", "\\:"}) s = replace_all(s, space, " ");
  s = replace_all(s, "\\\\", "\\");
  s = replace_all(replace_all(s, "tfrac", "frac"), "dfrac", "frac");
  for (const char* command : {"\\left", "\\right", "\\displaystyle"}) s = remove_command(s, command);
  for (const char* degrees : {"^{\\circ}", "^\\circ", "\xC2\xB0"}) s = replace_all(s, degrees, "");
  s = replace_all(replace_all(s, "\\$", ""), "$", "");
  // A unit on the right: "5.4 \text{ cents}", "864 \mbox{ inches}^2".
  s = s.substr(0, std::min(s.find("\\text{ "), s.find("\\mbox{ ")));
  for (const char* text : {"\\text{", "\\textbf{", "\\textrm{", "\\mbox{", "\\mathrm{"}) s = unwrap(s, text);
  s = replace_all(replace_all(s, "\\%", ""), "%", "");
  s = replace_all(replace_all(s, " .", " 0."), "{.", "{0.");
  s = trim(s);
  if (!s.empty() && s[0] == '.') s = "0" + s;
  // "k = 5" -> "5": a short name before a single '='.
  const size_t eq = s.find('=');
  if (eq != std::string::npos && s.find('=', eq + 1) == std::string::npos && trim(s.substr(0, eq)).size() <= 2)
    s = s.substr(eq + 1);
  std::string compact;
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) compact += c;
  s = brace_arguments(brace_arguments(compact, "\\sqrt", 1), "\\frac", 2);
  if (!s.empty() && s.back() == '.') s.pop_back();
  s = normalize_number(s);
  if (s == "0.5") return "\\frac{1}{2}";
  static const std::regex slash(R"((-?)(\d+)/(\d+))");
  std::smatch m;
  if (std::regex_match(s, m, slash)) return m[1].str() + "\\frac{" + m[2].str() + "}{" + m[3].str() + "}";
  return s;
}

bool math_answers_equal(const std::string& predicted, const std::string& reference) {
  return normalize_math_answer(predicted) == normalize_math_answer(reference);
}

}  // namespace fbt
