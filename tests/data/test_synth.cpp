// fbt synth: labels recomputed by parsing the generated text, distractor counts, determinism,
// flag errors and the JSONL round trip.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "cli_test_helpers.h"
#include "fbt/data/synth.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

/// The answer recomputed from the text alone (independently of the generator).
std::string recompute(const SynthExample& e) {
  const auto lines = lines_of(e.text);
  const std::string& query = lines.back();
  std::smatch m;
  if (e.task == "completion") {
    EXPECT_TRUE(std::regex_match(query, m, std::regex("is task (\\w+) done:")));
    const std::string x = m[1];
    int started = -1, finished = -1;
    for (size_t i = 0; i + 1 < lines.size(); ++i) {
      if (lines[i] == "task " + x + " started.") started = i;
      if (lines[i] == "task " + x + " finished.") finished = i;
    }
    EXPECT_GE(started, 0) << e.text;
    if (finished >= 0) {
      EXPECT_GT(finished, started) << e.text;
    }
    return finished >= 0 ? "yes" : "no";
  }
  if (e.task == "memory") {
    EXPECT_TRUE(std::regex_match(query, m, std::regex("value of (\\w+):")));
    const std::string key = m[1];
    std::smatch s;
    EXPECT_TRUE(std::regex_match(lines[0], s, std::regex("key (\\w+) is (\\w+)\\.")));
    EXPECT_EQ(s[1].str(), key);
    return s[2];
  }
  EXPECT_TRUE(std::regex_match(query, m, std::regex("register (r\\d+):")));
  std::map<std::string, std::string> last;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    std::smatch s;
    if (std::regex_match(lines[i], s, std::regex("set (r\\d+) to (\\d)\\."))) last[s[1]] = s[2];
  }
  EXPECT_TRUE(last.count(m[1])) << e.text;
  return last[m[1]];
}

int64_t count_distractors(const std::string& text) {
  int64_t n = 0;
  for (const auto& l : lines_of(text)) n += l.rfind("note: ", 0) == 0;
  return n;
}

TEST(Synth, LabelsRecomputedFromTheTextForSeveralSeeds) {
  for (const auto& task : synth_tasks())
    for (uint64_t seed : {0u, 1u, 42u}) {
      SynthOptions o;
      o.task = task;
      o.n = 40;
      o.distractors = {0, 3};
      o.seed = seed;
      std::set<std::string> labels_seen;
      for (const auto& e : generate_synth(o)) {
        EXPECT_EQ(e.task, task);
        EXPECT_EQ(e.text.back(), ':');
        EXPECT_EQ(recompute(e), e.label) << task << " seed " << seed << ":\n" << e.text;
        labels_seen.insert(e.label);
      }
      EXPECT_EQ(labels_seen.size(), synth_labels(task).size()) << task;  // every class occurs
    }
}

TEST(Synth, HandCheckedMemoryExample) {
  SynthOptions o;
  o.task = "memory";
  o.n = 1;
  o.distractors = {2};
  const auto e = generate_synth(o).at(0);
  const auto lines = lines_of(e.text);
  ASSERT_EQ(lines.size(), 4u);  // statement, 2 distractors, query
  EXPECT_EQ(lines[0], "key " + e.group + " is " + e.label + ".");
  EXPECT_EQ(lines[3], "value of " + e.group + ":");
}

TEST(Synth, DistractorCountsAreHonoured) {
  for (const auto& task : synth_tasks()) {
    SynthOptions o;
    o.task = task;
    o.n = 5;
    o.distractors = {0, 8, 33};
    const auto ex = generate_synth(o);
    ASSERT_EQ(ex.size(), 15u);
    for (size_t i = 0; i < ex.size(); ++i) {
      EXPECT_EQ(ex[i].distractors, o.distractors[i / 5]);
      EXPECT_EQ(count_distractors(ex[i].text), ex[i].distractors) << ex[i].text;
    }
  }
}

TEST(Synth, RegistersHonourWritesAndRegisters) {
  SynthOptions o;
  o.task = "registers";
  o.registers = 2;
  o.writes = 9;
  o.n = 20;
  o.distractors = {1};
  for (const auto& e : generate_synth(o)) {
    int64_t writes = 0;
    for (const auto& l : lines_of(e.text)) {
      if (l.rfind("set r", 0) != 0) continue;
      ++writes;
      EXPECT_TRUE(l[5] == '0' || l[5] == '1') << l;
    }
    EXPECT_EQ(writes, 9);
  }
}

TEST(Synth, SeedsAreDeterministic) {
  SynthOptions o;
  o.task = "completion";
  o.n = 10;
  o.distractors = {4};
  auto text = [](const std::vector<SynthExample>& v) {
    std::string s;
    for (const auto& e : v) s += to_json(e).dump() + "\n";
    return s;
  };
  const auto a = text(generate_synth(o));
  EXPECT_EQ(a, text(generate_synth(o)));
  o.seed = 1;
  EXPECT_NE(a, text(generate_synth(o)));
}

TEST(Synth, BadFlagsAreNamed) {
  SynthOptions o;
  o.task = "memory";
  o.distractors = {-1};
  EXPECT_THROW(
      {
        try {
          generate_synth(o);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("--distractors"), std::string::npos);
          throw;
        }
      },
      Error);
  o.distractors = {0};
  o.task = "parity";
  EXPECT_THROW(generate_synth(o), Error);
  o.task = "registers";
  o.registers = 0;
  EXPECT_THROW(
      {
        try {
          generate_synth(o);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("--registers"), std::string::npos);
          throw;
        }
      },
      Error);
}

TEST(Synth, JsonlRoundTripAndErrorsNameTheRecord) {
  const fs::path dir = fs::temp_directory_path() / ("fbt_synth_" + std::to_string(::getpid()));
  SynthOptions o;
  o.task = "registers";
  o.n = 3;
  o.distractors = {1};
  std::string text;
  const auto ex = generate_synth(o);
  for (const auto& e : ex) text += to_json(e).dump() + "\n";
  testing::write_file(dir / "ok.jsonl", text);
  const auto back = read_synth_jsonl((dir / "ok.jsonl").string());
  ASSERT_EQ(back.size(), ex.size());
  EXPECT_EQ(to_json(back[2]), to_json(ex[2]));

  testing::write_file(dir / "bad.jsonl", text + R"({"task":"memory","text":"x:","group":"k","distractors":0})"
                                                "\n");
  try {
    read_synth_jsonl((dir / "bad.jsonl").string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("record 4: missing field \"label\""), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fbt
