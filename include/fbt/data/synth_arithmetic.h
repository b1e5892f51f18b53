// Synthetic multi-step arithmetic word problems with worked solutions: a
// reasoning benchmark a small model can learn on a CPU, in GSM8K's record format.
//
// A problem follows one person's collection of items through 2 to 6 operations [choice]:
//
//   question  "Cleo has 7 shells. Cleo finds 5 more shells. Then Cleo gives 3 shells away.
//              Then the number of shells doubles. How many shells does Cleo have now?"
//   answer    "7 + 5 = 12\n12 - 3 = 9\n9 * 2 = 18\n#### 18"
//
// Each operation is one sentence drawn from several wordings: add 1..20 (the total stays at
// most 200), subtract 1..v−1 (the count stays positive), multiply by 2 or 3 (at most 200), or
// divide by 2..5 where that divides the count exactly ("splits them into k equal groups and
// keeps one"). The kind is uniform over those allowed at the current count. The solution has one
// line "a op b = c" per operation, a·b·c integers, then "#### result" (GSM8K's final-answer mark,
// read by fbt eval's answer check). A "skipping" solution (a fraction --skip-fraction of the
// problems) leaves out each intermediate line with probability 1/2, at least one: the remaining
// lines start from numbers the text never derived, the room a latent state could use.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fbt {

/// One generated problem, one JSON line {"id","question","answer","operations","skipped","result"}.
struct ArithmeticProblem {
  std::string id;          ///< "arithmetic-<seed>-<index>", unique within a file
  std::string question;    ///< the word problem (one sentence per operation, then the question)
  std::string answer;      ///< the worked solution, ending in "#### <result>"
  int64_t operations = 0;  ///< number of operations
  bool skipped = false;    ///< the solution leaves out intermediate lines
  int64_t result = 0;      ///< the final count
};

/// Settings of `fbt synth --task arithmetic`.
struct ArithmeticOptions {
  int64_t n = 1000;            ///< problems
  int64_t min_ops = 2;         ///< fewest operations (≥ 1)
  int64_t max_ops = 6;         ///< most operations (min_ops..12); uniform in between
  double skip_fraction = 0.0;  ///< share of problems whose solution skips steps, in [0, 1]
  uint64_t seed = 0;
};

/// options.n problems, deterministic in options.seed. Throws fbt::Error naming the flag (--n,
/// --min-ops, --max-ops, --skip-fraction) for a value out of range.
std::vector<ArithmeticProblem> generate_arithmetic(const ArithmeticOptions& options);

nlohmann::json to_json(const ArithmeticProblem& problem);

}  // namespace fbt
