// Synthetic state-tracking tasks for linear probes (SPEC §8, paper §4.4 and App. F).
//
// Every example is a few short lines of text ending in a query whose last character is a colon;
// the answer (`label`) comes from a small closed set, so a multinomial logistic probe on the
// residual stream at that colon can be fitted. The paper gives the three tasks in outline only;
// the exact templates below are our choices [choice]:
//
// completion   Three of the eight tasks alpha..hotel are started ("task alpha started.") and
//              some of those finished ("task alpha finished.", always after its start); the
//              query is "is task X done:" about one of the three; label "yes" if X finished,
//              else "no" (drawn with probability 1/2 each, so the classes are balanced).
//              group = X.
// memory       One statement "key K is V." first (K one of the eight keys amber..opal, V one of
//              red, green, blue, gold), then the distractors, then "value of K:"; label V.
//              group = K.
// registers    R registers r0..r{R-1} (--registers, default 4) receive W writes (--writes,
//              default 6) "set rI to V." with V one of 0..3, register and value uniform; the
//              query "register rI:" names one register written at least once; label = the value
//              of its last write. group = rI.
//
// Distractors: D lines "note: ..." drawn from a fixed list of neutral sentences. In `memory` they
// all sit between the statement and the query (the delay); in `completion` and `registers` they
// are inserted at uniformly random places among the event lines (before the query). Lines end in
// "\n"; the query line does not. The group is the queried entity, so grouped cross-validation
// tests whether a probe generalises to entities it was not fitted on.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fbt {

/// One generated example, one JSON line {"task","text","label","group","distractors"}.
struct SynthExample {
  std::string task;         ///< "completion", "memory" or "registers"
  std::string text;         ///< the lines and the query, ending in ':'
  std::string label;        ///< the answer, from synth_labels(task)
  std::string group;        ///< the queried entity (for grouped cross-validation)
  int64_t distractors = 0;  ///< number of distractor lines in `text`
};

/// Settings of `fbt synth`.
struct SynthOptions {
  std::string task;                                         ///< completion | memory | registers
  int64_t n = 200;                                          ///< examples per distractor count
  std::vector<int64_t> distractors = {0, 8, 32, 128, 256};  ///< distractor counts (each ≥ 0)
  int64_t registers = 4;                                    ///< R of `registers` (≥ 1)
  int64_t writes = 6;                                       ///< W of `registers` (≥ 1)
  uint64_t seed = 0;
};

/// The task names, in `fbt synth --help` order.
const std::vector<std::string>& synth_tasks();

/// The closed label set of `task`. Throws fbt::Error naming `task` if unknown.
const std::vector<std::string>& synth_labels(const std::string& task);

/// The distractor sentences (each line is "note: " + one of them + "\n").
const std::vector<std::string>& synth_distractor_sentences();

/// n examples for each distractor count in options.distractors, in that order; deterministic
/// in options.seed. Throws fbt::Error naming the flag (--task, --n, --distractors, --registers,
/// --writes) for an unknown task or a value out of range.
std::vector<SynthExample> generate_synth(const SynthOptions& options);

nlohmann::json to_json(const SynthExample& example);
/// Parses one JSON line; throws fbt::Error naming `origin` and the missing or mistyped field.
SynthExample synth_example_from_json(const nlohmann::json& j, const std::string& origin);

/// Reads a JSONL file written by `fbt synth` (blank lines skipped). Throws fbt::Error naming
/// the file and line for an unreadable file, bad JSON or a missing field, or an empty file.
std::vector<SynthExample> read_synth_jsonl(const std::string& path);

}  // namespace fbt
