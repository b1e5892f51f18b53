// Bad numbers and output paths on every subcommand, through the CLI binary: each fails with
// "error: ..." naming the flag, setting or path, exit status 1, before any work (the issue's
// robustness items 6, 13 and 14); --help shows the ranges; bench --results-dir keeps earlier files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "cli_test_helpers.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

using testing::CliRun;
using testing::make_run_dir;
using testing::write_file;

struct BadInputCli : ::testing::Test {
  fs::path dir = fs::temp_directory_path() / ("fbt_badcli_" + std::to_string(::getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::path run = dir / "run", data = dir / "data", mem = dir / "MEM.jsonl", a_dir = dir / "a_dir";
  std::string RUN, DATA, MEM;

  void SetUp() override {
    fs::remove_all(dir);
    make_run_dir(run, ByteTokenizer::kVocab);
    for (int i = 0; i < 4; ++i)
      write_file(dir / "corpus" / ("d" + std::to_string(i) + ".txt"),
                 "Document " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog.\n");
    fs::create_directories(a_dir);
    RUN = run.string(), DATA = data.string(), MEM = mem.string();
    ASSERT_EQ(fbt_cli("prepare --input " + (dir / "corpus").string() + " --out " + DATA + " --tokenizer byte").rc, 0);
    ASSERT_EQ(fbt_cli("synth --task memory --n 4 --distractors 0 --out " + MEM).rc, 0);
  }
  void TearDown() override { fs::remove_all(dir); }

  CliRun fbt_cli(const std::string& args) const { return testing::run_cli(dir, args); }

  /// `args` must fail cleanly: exit 1, "error: " first, `needle` in the message, nothing on stdout.
  void expect_clean_failure(const std::string& args, const std::string& needle) const {
    const auto r = fbt_cli(args);
    EXPECT_EQ(r.rc, 1) << args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(r.out, "") << args;
  }
};

TEST_F(BadInputCli, NumericFlagsOutOfRangeNameTheFlag) {
  const std::string gen = "generate --checkpoint " + RUN + " --prompt hi ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {gen + "--temperature nan", "--temperature: expected 0 (greedy) or a number in [1e-06, 1e+06], got 'nan'"},
      {gen + "--temperature -1 --max-new-tokens 5", "--temperature"},
      {gen + "--max-new-tokens 0", "--max-new-tokens: expected an integer >= 1, got '0'"},
      {gen + "--top-p 1.5", "--top-p: expected a number in (0, 1], got '1.5'"},
      {gen + "--top-k -2", "--top-k: expected an integer >= -1, got '-2'"},  // -1 and 0: all tokens
      {gen + "--seed -1", "--seed: expected an integer in [0, 18446744073709551615], got '-1'"},
      {gen + "--fused-passes 0", "--fused-passes"},
      {"train --config debug --data " + DATA + " --out " + (dir / "r").string() + " --steps 0", "--steps"},
      {"train --config debug --data " + DATA + " --out " + (dir / "r").string() + " --steps -5", "--steps"},
      {"train --config debug --data " + DATA + " --out " + (dir / "r").string() + " --steps 99999999999999999999999",
       "--steps: expected an integer in [1, 1099511627776], got '99999999999999999999999'"},
      {"train --config debug --data " + DATA + " --out " + (dir / "r").string() + " --bucket-mb 0", "--bucket-mb"},
      {"train --config debug --data " + DATA + " --out " + (dir / "r").string() + " --dist-timeout -1",
       "--dist-timeout"},
      {"prepare --input " + (dir / "corpus").string() + " --out " + (dir / "d2").string() + " --seed -1", "--seed"},
      {"prepare --input " + (dir / "corpus").string() + " --out " + (dir / "d2").string() + " --val-fraction nan",
       "--val-fraction"},
      {"prepare --input " + (dir / "corpus").string() + " --out " + (dir / "d2").string() + " --vocab-size 100",
       "--vocab-size: expected an integer in [262, 16777216]"},
      {"eval-loss --checkpoint " + RUN + " --data " + DATA + " --max-tokens -5", "--max-tokens: expected -1 (all)"},
      {"eval-loss --checkpoint " + RUN + " --data " + DATA + " --max-tokens 0", "--max-tokens"},
      {"eval-loss --checkpoint " + RUN + " --data " + DATA + " --batch 0", "--batch"},
      {"eval-loss --checkpoint " + RUN + " --data " + DATA + " --passes -1", "--passes"},
      {"eval arc_easy --checkpoint " + RUN + " --data-dir " + DATA + " --shots -2", "--shots"},
      {"eval arc_easy --checkpoint " + RUN + " --data-dir " + DATA + " --limit 0", "--limit"},
      {"eval humaneval --checkpoint " + RUN + " --data-dir " + DATA + " --pass-k 0", "--pass-k"},
      {"eval humaneval --checkpoint " + RUN + " --data-dir " + DATA + " --sandbox-timeout -1", "--sandbox-timeout"},
      {"eval humaneval --checkpoint " + RUN + " --data-dir " + DATA + " --temperatures 0.5,nan", "--temperatures"},
      {"synth --task memory --out " + (dir / "m.jsonl").string() + " --n 0", "--n"},
      {"synth --task memory --out " + (dir / "m.jsonl").string() + " --distractors 0,-3", "--distractors"},
      {"eval-probe " + MEM + " --checkpoint " + RUN + " --folds 1", "--folds"},
      {"eval-probe " + MEM + " --checkpoint " + RUN + " --l2 inf", "--l2"},
      {"bench --preset debug --batch-sizes 0", "--batch-sizes"},
      {"bench --preset debug --contexts 0", "--contexts"},
      {"bench --preset debug --new-tokens -1", "--new-tokens"},
      {"bench --preset debug --train-batch 0", "--train-batch"},
      {"bench --preset debug --warmup -3", "--warmup"},
      {"bench --preset debug --train-seq -5", "--train-seq"},
      {"bench --preset debug --threads -1", "--threads"},
      {"bench --preset debug --peak-size -1", "--peak-size"},
      {"bench --preset debug --passes 1,0", "--passes"},
      {"bench --preset debug --tests decode --contexts 60 --new-tokens 8",
       "--contexts 60 + --new-tokens 8 exceeds the model context 64"},
  };
  for (const auto& [args, needle] : cases) expect_clean_failure(args, needle);
}

// Issue 36: `fbt eval` checks that a task has items to evaluate before it loads the checkpoint
// (here: none, so the error can only come from the data): 50 lambada records are all within the
// 100-record few-shot pool.
TEST_F(BadInputCli, EvalWithoutItemsFailsBeforeLoadingTheCheckpoint) {
  std::string records;
  for (int i = 0; i < 50; ++i) records += R"({"text": "the cat sat on the mat number )" + std::to_string(i) + "\"}\n";
  write_file(dir / "tasks" / "lambada" / "lambada_test.jsonl", records);
  const std::string tasks = " --data-dir " + (dir / "tasks").string();
  for (const auto& checkpoint : {(dir / "nowhere").string(), RUN})
    expect_clean_failure("eval lambada --checkpoint " + checkpoint + tasks,
                         "task lambada: no item to evaluate (50 items, the last 100 are the few-shot pool");
}

TEST_F(BadInputCli, HelpShowsTheRanges) {
  const auto help = [&](const std::string& sub) { return fbt_cli(sub + " --help").out; };
  EXPECT_NE(help("generate").find("NUMBER in (0, 1]"), std::string::npos);        // --top-p
  EXPECT_NE(help("train").find("INT in [1, 1099511627776]"), std::string::npos);  // --steps
  EXPECT_NE(help("bench").find("INT in [0, 1024]"), std::string::npos);           // --threads
  EXPECT_NE(help("eval-loss").find("-1 (all) or INT >= 1"), std::string::npos);   // --max-tokens
}

TEST_F(BadInputCli, SettingsOutOfRangeNameTheKeyAndLeaveNoRun) {
  const std::string train = "train --config debug --data " + DATA + " --out " + (dir / "r").string() + " ";
  expect_clean_failure(train + "--set train.lr=1e39", "train.lr must be in (0, 1e+06] (got 1e+39)");
  expect_clean_failure(train + "--set train.seed=-1", "'seed': expected an integer in [0, 2^64-1]");
  expect_clean_failure(train + "--set model.n_layers=0", "model.n_layers must be in [1, 4096]");
  // 16M sequences: terabytes of logits, refused before anything is allocated.
  expect_clean_failure(train + "--set train.batch_size=16000000", "train.batch_size=16000000");
  write_file(dir / "c.json", R"({"model": "debug", "train": {"steps": 18446744073709551615}})");
  expect_clean_failure(
      "train --config " + (dir / "c.json").string() + " --data " + DATA + " --out " + (dir / "r").string(),
      "field 'steps'");
  EXPECT_FALSE(fs::exists(dir / "r" / "run.json"));
}

TEST_F(BadInputCli, OutputPathsAreCheckedBeforeTheWork) {
  write_file(dir / "plain", "x");
  const std::string missing = (dir / "missing" / "out.json").string(), under_file = (dir / "plain" / "x").string();
  expect_clean_failure("synth --task memory --n 2 --out " + a_dir.string(),
                       "--out " + a_dir.string() + ": Is a directory");
  expect_clean_failure("eval-loss --checkpoint " + RUN + " --data " + DATA + " --json " + missing,
                       "--json " + missing + ": No such file or directory");
  // eval and eval-probe: refused before the checkpoint or the task data are read.
  expect_clean_failure(
      "eval arc_easy --checkpoint " + RUN + " --data-dir " + (dir / "nowhere").string() + " --out " + a_dir.string(),
      "--out " + a_dir.string() + ": Is a directory");
  expect_clean_failure(
      "eval gsm8k --checkpoint " + RUN + " --data-dir " + (dir / "nowhere").string() + " --samples " + under_file,
      "--samples " + under_file + ": Not a directory");
  expect_clean_failure("eval-probe " + MEM + " --checkpoint " + RUN + " --out " + missing, "--out " + missing);
  expect_clean_failure("bench --preset debug --tests train --out " + a_dir.string(),
                       "--out " + a_dir.string() + ": Is a directory");
  expect_clean_failure("bench --preset debug --tests train --results-dir " + under_file, "--results-dir " + under_file);
  expect_clean_failure("prepare --input " + (dir / "corpus").string() + " --tokenizer byte --out " + under_file,
                       "--out " + under_file + ": Not a directory");
  expect_clean_failure("train --config debug --data " + DATA + " --steps 1 --out " + (dir / "plain").string(),
                       "--out " + (dir / "plain").string() + ": Not a directory");
}

TEST_F(BadInputCli, BenchResultsDirKeepsTheEarlierRunOfTheDay) {
  const std::string bench =
      "bench --preset debug --tests prefill --batch-sizes 1 --contexts 8 --reps 1 --warmup 0 "
      "--peak-size 64 --threads 1 --hardware testhw --results-dir " +
      (dir / "res").string();
  ASSERT_EQ(fbt_cli(bench).rc, 0);
  const auto second = fbt_cli(bench);
  ASSERT_EQ(second.rc, 0) << second.err;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir / "res")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 4u);  // debug_testhw_DATE.{json,md} and debug_testhw_DATE_2.{json,md}
  EXPECT_EQ(names[0].rfind("debug_testhw_", 0), 0u);
  EXPECT_EQ(names[0].substr(names[0].size() - 5), ".json");
  EXPECT_EQ(names[2], names[0].substr(0, names[0].size() - 5) + "_2.json");
  EXPECT_NE(second.err.find("_2.md"), std::string::npos) << second.err;
}

}  // namespace
}  // namespace fbt
