// Progress lines when stderr is a file or a pipe (issue 36): one line per printed update, no
// carriage returns running them together; the first, every tenth and the last update are printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "cli_test_helpers.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

TEST(ProgressCli, EvalProbeWritesWholeLinesOffTerminal) {
  testing::TempDir tmp;
  const fs::path run = tmp.path / "run", mem = tmp.path / "memory.jsonl";
  testing::make_run_dir(run, ByteTokenizer::kVocab);
  ASSERT_EQ(testing::run_cli(tmp.path, "synth --task memory --n 40 --distractors 0 --out " + mem.string()).rc, 0);
  const auto r =
      testing::run_cli(tmp.path, "eval-probe --folds 2 --max-iter 5 --checkpoint " + run.string() + " " + mem.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
  // 40 examples: 1/40, then 4, 8, ..., 40 (each tenth): 11 lines, each ending in a newline.
  static const std::regex line(R"(memory: (\d+)/40 examples\n)");
  std::vector<int> done;
  for (auto it = std::sregex_iterator(r.err.begin(), r.err.end(), line); it != std::sregex_iterator(); ++it)
    done.push_back(std::stoi((*it)[1].str()));
  EXPECT_EQ(done, (std::vector<int>{1, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40})) << r.err;
}

}  // namespace
}  // namespace fbt
