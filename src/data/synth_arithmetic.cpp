// Synthetic multi-step arithmetic word problems (include/fbt/data/synth_arithmetic.h).
#include "fbt/data/synth_arithmetic.h"

#include <algorithm>
#include <random>

#include "fbt/util/error.h"

namespace fbt {
namespace {

const std::vector<std::string> kPeople{"Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun"};
const std::vector<std::string> kItems{"apples", "marbles", "coins", "stickers", "pencils", "shells", "cards", "beads"};
constexpr int64_t kMaxCount = 200;  // no intermediate count exceeds it
constexpr int64_t kMaxOps = 12;

/// Uniform integer in [lo, hi].
int64_t uniform_in(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

/// One of `options`, uniformly.
const std::string& one_of(std::mt19937_64& rng, const std::vector<std::string>& options) {
  return options[uniform_in(rng, 0, static_cast<int64_t>(options.size()) - 1)];
}

/// Replaces every "{P}" (person), "{I}" (items) and "{K}" (operand) in `pattern`.
std::string fill(std::string pattern, const std::string& person, const std::string& items, int64_t k) {
  for (const auto& [key, value] :
       {std::pair<std::string, std::string>{"{P}", person}, {"{I}", items}, {"{K}", std::to_string(k)}})
    for (size_t at; (at = pattern.find(key)) != std::string::npos;) pattern.replace(at, key.size(), value);
  return pattern;
}

/// One operation applied to count v: its sentence (a wording chosen at random), its solution line
/// "v op k = result", and the result.
struct Step {
  std::string sentence, line;
  int64_t result = 0;
};

Step next_step(int64_t v, const std::string& person, const std::string& items, std::mt19937_64& rng) {
  std::vector<int64_t> divisors;
  for (int64_t k = 2; k <= 5; ++k)
    if (v % k == 0) divisors.push_back(k);
  std::vector<char> kinds;  // the operations allowed at v
  if (v < kMaxCount) kinds.push_back('+');
  if (v >= 2) kinds.push_back('-');
  if (2 * v <= kMaxCount) kinds.push_back('*');
  if (!divisors.empty()) kinds.push_back('/');
  const char kind = kinds[uniform_in(rng, 0, static_cast<int64_t>(kinds.size()) - 1)];
  int64_t k = 0, result = 0;
  std::vector<std::string> wordings;
  switch (kind) {
    case '+':
      k = uniform_in(rng, 1, std::min<int64_t>(20, kMaxCount - v));
      result = v + k;
      wordings = {"{P} finds {K} more {I}.", "Then {P} buys {K} more {I}.", "A friend gives {P} {K} {I}.",
                  "Later {P} gets {K} more {I}."};
      break;
    case '-':
      k = uniform_in(rng, 1, v - 1);
      result = v - k;
      wordings = {"Then {P} gives {K} {I} away.", "{P} loses {K} {I}.", "{P} sells {K} of the {I}.",
                  "Then {K} of the {I} go missing."};
      break;
    case '*':
      k = 3 * v <= kMaxCount ? uniform_in(rng, 2, 3) : 2;
      result = v * k;
      wordings = {"Then the number of {I} becomes {K} times as large.", "{P} ends up with {K} times as many {I}."};
      if (k == 2) wordings.push_back("Then the number of {I} doubles.");
      if (k == 3) wordings.push_back("Then the number of {I} triples.");
      break;
    default:
      k = divisors[uniform_in(rng, 0, static_cast<int64_t>(divisors.size()) - 1)];
      result = v / k;
      wordings = {"{P} splits the {I} into {K} equal groups and keeps one group.",
                  "{P} shares the {I} equally among {K} friends, {P} included, and keeps one share."};
      break;
  }
  return {fill(one_of(rng, wordings), person, items, k),
          std::to_string(v) + " " + kind + " " + std::to_string(k) + " = " + std::to_string(result), result};
}

ArithmeticProblem make_problem(const ArithmeticOptions& o, int64_t index, std::mt19937_64& rng) {
  const std::string& person = one_of(rng, kPeople);
  const std::string& items = one_of(rng, kItems);
  ArithmeticProblem p;
  p.id = "arithmetic-" + std::to_string(o.seed) + "-" + std::to_string(index);
  p.operations = uniform_in(rng, o.min_ops, o.max_ops);
  int64_t v = uniform_in(rng, 2, 20);
  p.question = person + " has " + std::to_string(v) + " " + items + ".";
  std::vector<std::string> lines;
  for (int64_t i = 0; i < p.operations; ++i) {
    const Step s = next_step(v, person, items, rng);
    p.question += " " + s.sentence;
    lines.push_back(s.line);
    v = s.result;
  }
  p.question += " How many " + items + " does " + person + " have now?";
  p.result = v;
  p.skipped = p.operations > 1 && std::bernoulli_distribution(o.skip_fraction)(rng);
  std::vector<char> keep(lines.size(), 1);
  if (p.skipped) {  // drop each intermediate line with probability 1/2, at least one
    const int64_t last = static_cast<int64_t>(lines.size()) - 1;
    bool dropped = false;
    for (int64_t i = 0; i < last; ++i)
      if (uniform_in(rng, 0, 1) == 1) {
        keep[i] = 0;
        dropped = true;
      }
    if (!dropped) keep[uniform_in(rng, 0, last - 1)] = 0;
  }
  for (size_t i = 0; i < lines.size(); ++i)
    if (keep[i]) p.answer += lines[i] + "\n";
  p.answer += "#### " + std::to_string(p.result);
  return p;
}

}  // namespace

std::vector<ArithmeticProblem> generate_arithmetic(const ArithmeticOptions& o) {
  if (o.n < 1) throw Error("--n must be >= 1 (got " + std::to_string(o.n) + ")");
  if (o.min_ops < 1 || o.min_ops > kMaxOps)
    throw Error("--min-ops must be in [1, " + std::to_string(kMaxOps) + "] (got " + std::to_string(o.min_ops) + ")");
  if (o.max_ops < o.min_ops || o.max_ops > kMaxOps)
    throw Error("--max-ops must be in [--min-ops, " + std::to_string(kMaxOps) + "] (got " + std::to_string(o.max_ops) +
                " with --min-ops " + std::to_string(o.min_ops) + ")");
  if (!(o.skip_fraction >= 0 && o.skip_fraction <= 1))
    throw Error("--skip-fraction must be in [0, 1] (got " + std::to_string(o.skip_fraction) + ")");
  std::mt19937_64 rng(o.seed);
  std::vector<ArithmeticProblem> out;
  for (int64_t i = 0; i < o.n; ++i) out.push_back(make_problem(o, i, rng));
  return out;
}

nlohmann::json to_json(const ArithmeticProblem& p) {
  return {{"id", p.id},           {"question", p.question}, {"answer", p.answer}, {"operations", p.operations},
          {"skipped", p.skipped}, {"result", p.result}};
}

}  // namespace fbt
