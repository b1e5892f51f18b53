// Synthetic state-tracking tasks: completion tracking, delayed memory, multi-register last-write.
#include "fbt/data/synth.h"

#include <algorithm>
#include <random>

#include "fbt/data/records.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

const std::vector<std::string> kTaskNames{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"};
const std::vector<std::string> kKeys{"amber", "basil", "cedar", "dune", "ember", "flint", "grove", "opal"};
constexpr int64_t kTasksPerExample = 3;

/// Uniform index in [0, n).
size_t pick(std::mt19937_64& rng, size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }

std::string distractor_line(std::mt19937_64& rng) {
  const auto& s = synth_distractor_sentences();
  return "note: " + s[pick(rng, s.size())] + "\n";
}

/// `events` with `d` distractor lines inserted at uniformly random places (before, between or after).
std::string interleave(const std::vector<std::string>& events, int64_t d, std::mt19937_64& rng) {
  std::vector<std::string> lines = events;
  for (int64_t i = 0; i < d; ++i) lines.insert(lines.begin() + pick(rng, lines.size() + 1), distractor_line(rng));
  std::string text;
  for (const auto& l : lines) text += l;
  return text;
}

SynthExample completion(int64_t d, std::mt19937_64& rng) {
  std::vector<std::string> names = kTaskNames;
  std::shuffle(names.begin(), names.end(), rng);
  names.resize(kTasksPerExample);
  const std::string queried = names[0];
  const bool done = pick(rng, 2) == 1;
  // Each task's start precedes its finish: shuffle the starts, then insert each finish later.
  std::vector<std::string> events;
  for (const auto& n : names) events.push_back("task " + n + " started.\n");
  std::shuffle(events.begin(), events.end(), rng);
  for (const auto& n : names) {
    if (n == queried ? !done : pick(rng, 2) == 0) continue;
    const auto start = std::find(events.begin(), events.end(), "task " + n + " started.\n") - events.begin();
    events.insert(events.begin() + start + 1 + pick(rng, events.size() - start), "task " + n + " finished.\n");
  }
  return {"completion", interleave(events, d, rng) + "is task " + queried + " done:", done ? "yes" : "no", queried, d};
}

SynthExample memory(int64_t d, std::mt19937_64& rng) {
  const auto& values = synth_labels("memory");
  const std::string key = kKeys[pick(rng, kKeys.size())], value = values[pick(rng, values.size())];
  std::string text = "key " + key + " is " + value + ".\n";
  for (int64_t i = 0; i < d; ++i) text += distractor_line(rng);
  return {"memory", text + "value of " + key + ":", value, key, d};
}

SynthExample registers(int64_t d, int64_t n_registers, int64_t writes, std::mt19937_64& rng) {
  const auto& values = synth_labels("registers");
  std::vector<std::string> events, last(n_registers);
  for (int64_t w = 0; w < writes; ++w) {
    const size_t r = pick(rng, n_registers);
    last[r] = values[pick(rng, values.size())];
    events.push_back("set r" + std::to_string(r) + " to " + last[r] + ".\n");
  }
  std::vector<size_t> written;
  for (size_t r = 0; r < last.size(); ++r)
    if (!last[r].empty()) written.push_back(r);
  const size_t q = written[pick(rng, written.size())];
  const std::string reg = "r" + std::to_string(q);
  return {"registers", interleave(events, d, rng) + "register " + reg + ":", last[q], reg, d};
}

}  // namespace

const std::vector<std::string>& synth_tasks() {
  static const std::vector<std::string> tasks{"completion", "memory", "registers"};
  return tasks;
}

const std::vector<std::string>& synth_labels(const std::string& task) {
  static const std::vector<std::string> yes_no{"no", "yes"}, colours{"red", "green", "blue", "gold"},
      digits{"0", "1", "2", "3"};
  if (task == "completion") return yes_no;
  if (task == "memory") return colours;
  if (task == "registers") return digits;
  throw Error("unknown synthetic task '" + task + "' (expected completion, memory or registers)");
}

const std::vector<std::string>& synth_distractor_sentences() {
  static const std::vector<std::string> s{
      "the kettle is warm.",          "a bird sat on the fence.",   "the train was late again.",
      "it rained in the morning.",    "the lamp needs a new bulb.", "someone left a cup on the desk.",
      "the meeting moved to friday.", "a dog barked outside.",      "the printer is out of paper.",
      "the window was open.",         "lunch was soup today.",      "the clock runs a bit fast.",
  };
  return s;
}

std::vector<SynthExample> generate_synth(const SynthOptions& o) {
  synth_labels(o.task);  // validates --task
  if (o.n < 1) throw Error("--n must be >= 1 (got " + std::to_string(o.n) + ")");
  if (o.distractors.empty()) throw Error("--distractors must list at least one count");
  for (int64_t d : o.distractors)
    if (d < 0) throw Error("--distractors must be >= 0 (got " + std::to_string(d) + ")");
  if (o.registers < 1) throw Error("--registers must be >= 1 (got " + std::to_string(o.registers) + ")");
  if (o.writes < 1) throw Error("--writes must be >= 1 (got " + std::to_string(o.writes) + ")");
  std::mt19937_64 rng(o.seed);
  std::vector<SynthExample> out;
  for (int64_t d : o.distractors)
    for (int64_t i = 0; i < o.n; ++i) {
      if (o.task == "completion")
        out.push_back(completion(d, rng));
      else if (o.task == "memory")
        out.push_back(memory(d, rng));
      else
        out.push_back(registers(d, o.registers, o.writes, rng));
    }
  return out;
}

nlohmann::json to_json(const SynthExample& e) {
  return {{"task", e.task}, {"text", e.text}, {"label", e.label}, {"group", e.group}, {"distractors", e.distractors}};
}

SynthExample synth_example_from_json(const nlohmann::json& j, const std::string& origin) {
  auto field = [&](const char* name) -> const nlohmann::json& {
    if (!j.is_object() || !j.contains(name)) throw Error(origin + ": missing field \"" + std::string(name) + "\"");
    return j.at(name);
  };
  try {
    SynthExample e{field("task").get<std::string>(), field("text").get<std::string>(),
                   field("label").get<std::string>(), field("group").get<std::string>(),
                   field("distractors").get<int64_t>()};
    const auto& labels = synth_labels(e.task);
    if (std::find(labels.begin(), labels.end(), e.label) == labels.end())
      throw Error(origin + ": label \"" + e.label + "\" is not a " + e.task + " label");
    return e;
  } catch (const nlohmann::json::exception& ex) {
    throw Error(origin + ": mistyped field: " + ex.what());
  }
}

std::vector<SynthExample> read_synth_jsonl(const std::string& path) {
  const auto records = read_records(path, RecordFormat::JsonLines);
  if (records.empty()) throw Error(path + ": no examples");
  std::vector<SynthExample> out;
  for (size_t i = 0; i < records.size(); ++i)
    out.push_back(synth_example_from_json(records[i], path + ": record " + std::to_string(i + 1)));
  return out;
}

}  // namespace fbt
