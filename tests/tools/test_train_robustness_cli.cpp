// `fbt train` on bad runs and damaged run directories (issue 21): a run that cannot start leaves
// nothing behind, non-finite steps never become `latest`, --resume falls back past a damaged
// checkpoint, drops the metrics of the steps it repeats, and never touches the run's tokenizer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "cli_test_helpers.h"
#include "fbt/data/prepare.h"
#include "fbt/io/safetensors.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;
using testing::run_cli;
using testing::slurp;
using testing::write_file;

/// A byte-tokenizer dataset of 40 generated documents (~52 KB) in DIR/data, and, with `steps`,
/// a debug run DIR/run trained that far with a checkpoint every 2 steps.
struct TinyRun {
  fs::path dir, data, run;
  explicit TinyRun(const fs::path& d, int steps = 4) : dir(d), data(d / "data"), run(d / "run") {
    const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away", "big", "red"};
    uint32_t state = 1;
    for (int i = 0; i < 40; ++i) {
      std::string text;
      for (int w = 0; w < 250; ++w) {
        state = state * 1103515245u + 12345u;
        text += std::string(words[(state >> 16) % 12]) + " ";
      }
      write_file(dir / "corpus" / ("doc" + std::to_string(i) + ".txt"), text + "\n");
    }
    PrepareOptions p;
    p.inputs = {(dir / "corpus").string()};
    p.out_dir = data.string();
    p.tokenizer = "byte";
    p.val_fraction = 0.2;
    std::ostringstream log;
    prepare_dataset(p, log);
    if (steps > 0) {
      const auto r = train("--config debug --steps " + std::to_string(steps) + " --set train.checkpoint_every=2");
      EXPECT_EQ(r.rc, 0) << r.err;
    }
  }
  testing::CliRun train(const std::string& args, const fs::path& out = {}) const {
    return run_cli(dir, "train --data " + data.string() + " --out " + (out.empty() ? run : out).string() + " " + args);
  }
};

std::string latest_of(const fs::path& run) {
  std::ifstream f(run / "latest");
  std::string name;
  f >> name;
  return name;
}

/// Steps of metrics.jsonl's per-step lines (those with "passes"), in file order.
std::vector<int64_t> metric_steps(const fs::path& run) {
  std::vector<int64_t> steps;
  std::ifstream f(run / "metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("passes")) steps.push_back(j.at("step").get<int64_t>());
  }
  return steps;
}

// Item 1: a split shorter than one window fails before step 1 and before anything is written.
TEST(TrainRobustCli, SplitShorterThanAWindowFailsBeforeStepOneLeavingNothing) {
  testing::TempDir tmp;
  TinyRun t(tmp.path, 0);
  const auto out = tmp.path / "short";
  const auto r = t.train("--config debug --steps 4 --set model.context=16384", out);  // val: ~10k tokens
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("val.bin"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fewer than one window of seq_len + 1 = 16385"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));  // item 4: no stub run directory
}

// Item 2: with lr = 1e6 (the largest train.lr accepts) the first update destroys the weights and
// every later step is non-finite: the run fails and no state reached through non-finite steps
// becomes `latest`.
TEST(TrainRobustCli, NonFiniteStepsNeverBecomeLatest) {
  testing::TempDir tmp;
  TinyRun t(tmp.path, 0);
  for (const std::string extra : {"", " --set train.max_bad_steps=3"}) {
    const auto out = tmp.path / ("lr" + std::to_string(extra.size()));
    const auto r = t.train(
        "--config debug --steps 8 --set train.lr=1e6 --set train.normuon_lr=1e6"
        " --set train.warmup_steps=0 --set train.checkpoint_every=1" +
            extra,
        out);
    EXPECT_EQ(r.rc, 1) << extra << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("non-finite"), std::string::npos) << r.err;
    std::ifstream f(out / "metrics.jsonl");
    int64_t first_bad = 0;
    for (std::string line; std::getline(f, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("skipped") && first_bad == 0) first_bad = j.at("step");
    }
    ASSERT_GT(first_bad, 0) << "expected non-finite steps";
    // `latest`, if any, names a checkpoint from before the first non-finite step, with finite weights.
    if (fs::exists(out / "latest")) {
      const auto name = latest_of(out);
      EXPECT_LT(std::stoll(name.substr(5)), first_bad) << name;
      for (const auto& [key, w] : load_tensors((out / name / "model.safetensors").string()).tensors)
        EXPECT_TRUE(torch::isfinite(w).all().item<bool>()) << key;
    }
    for (const auto& entry : fs::directory_iterator(out)) {  // and no step directory after it at all
      if (entry.path().filename().string().rfind("step-", 0) == 0) {
        EXPECT_LT(std::stoll(entry.path().filename().string().substr(5)), first_bad) << entry.path();
      }
    }
  }
}

// Items 3 and 12: a damaged newest checkpoint makes --resume fall back to the previous intact
// one with a warning naming both; item 5: metrics.jsonl then holds each step once.
TEST(TrainRobustCli, ResumeFallsBackPastADamagedCheckpointAndRewritesMetrics) {
  testing::TempDir tmp;
  TinyRun t(tmp.path);
  ASSERT_EQ(latest_of(t.run), "step-0000004");
  const auto trainer = t.run / "step-0000004" / "trainer.json";
  const std::string text = slurp(trainer);
  write_file(trainer, text.substr(0, text.size() / 2));  // truncated
  const auto r = t.train("--resume --steps 6");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("warning: checkpoint " + (t.run / "step-0000004").string() + " is damaged"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("trainer.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("resuming from " + (t.run / "step-0000002").string()), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("dropped 3 line(s)"), std::string::npos) << r.out;  // steps 3, 4 and step 4's validation
  EXPECT_EQ(metric_steps(t.run), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(latest_of(t.run), "step-0000006");
}

// Item 12: an empty or dangling `latest` is named as such, and the newest intact checkpoint used.
TEST(TrainRobustCli, EmptyOrDanglingLatestIsNamedAndTheNewestCheckpointUsed) {
  testing::TempDir tmp;
  TinyRun t(tmp.path);
  int steps = 4;
  for (const std::string content : {"", "step-0000099\n"}) {
    write_file(t.run / "latest", content);
    steps += 2;
    const auto r = t.train("--resume --steps " + std::to_string(steps));
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find((t.run / "latest").string() + (content.empty() ? " is empty" : " names 'step-0000099'")),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.out.find("at step " + std::to_string(steps - 2)), std::string::npos) << r.out;
  }
}

// Item 12: no intact checkpoint at all is an error that lists each one and its damage.
TEST(TrainRobustCli, NoIntactCheckpointListsEveryDamage) {
  testing::TempDir tmp;
  TinyRun t(tmp.path);
  fs::resize_file(t.run / "step-0000004" / "model.safetensors", 100);
  fs::remove(t.run / "step-0000002" / "optimizer.safetensors");
  const auto before = slurp(t.run / "latest");
  const auto r = t.train("--resume --steps 6");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("error: --resume: no intact checkpoint"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("step-0000004/model.safetensors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("step-0000002/optimizer.safetensors"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(t.run / "latest"), before);
}

// Item 10: resuming with another dataset's tokenizer fails before the run directory is touched.
TEST(TrainRobustCli, ResumeWithAnotherTokenizerLeavesTheRunsTokenizer) {
  testing::TempDir tmp;
  TinyRun t(tmp.path);
  const auto other = tmp.path / "other";
  fs::copy(t.data, other);
  auto meta = nlohmann::json::parse(slurp(other / "meta.json"));
  meta["tokenizer"]["eos_id"] = 1;  // the same vocabulary, another separator
  write_file(other / "meta.json", meta.dump(2));
  const auto before = slurp(t.run / "tokenizer" / "meta.json");
  const auto r =
      run_cli(tmp.path, "train --data " + other.string() + " --out " + t.run.string() + " --resume --steps 6");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("its tokenizer differs from the run's"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("eos_id"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(t.run / "tokenizer" / "meta.json"), before);
}

// Items 4 and 12: a run killed before its first checkpoint (run.json, no step directory) starts
// afresh without --force; an error before the start leaves no run directory.
TEST(TrainRobustCli, RunWithoutCheckpointRestartsAndEarlyErrorsLeaveNoStub) {
  testing::TempDir tmp;
  TinyRun t(tmp.path, 0);
  const auto bad = t.train("--config debug --set train.seq_len=100000", tmp.path / "bad");
  EXPECT_EQ(bad.rc, 1);
  EXPECT_FALSE(fs::exists(tmp.path / "bad"));
  write_file(t.run / "run.json", "{}");
  write_file(t.run / "metrics.jsonl", "{\"step\": 1}\n");
  const auto r = t.train("--config debug --steps 2");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("stopped before its first checkpoint; starting it afresh"), std::string::npos) << r.out;
  EXPECT_EQ(metric_steps(t.run), (std::vector<int64_t>{1, 2}));
  const auto again = t.train("--resume --steps 4", tmp.path / "nothing");
  EXPECT_EQ(again.rc, 1);
  EXPECT_FALSE(fs::exists(tmp.path / "nothing"));
}

// Item 11: a replaced shard is caught by its token count or sampled hash; --verify checks it all.
TEST(TrainRobustCli, ReplacedOrEditedShardIsAnError) {
  testing::TempDir tmp;
  TinyRun t(tmp.path, 0);
  const auto train_bin = t.data / "train.bin", val_bin = t.data / "val.bin";
  const std::string val = slurp(val_bin);
  fs::copy_file(train_bin, val_bin, fs::copy_options::overwrite_existing);
  auto r = t.train("--config debug --steps 1", tmp.path / "a");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find(val_bin.string() + ": holds"), std::string::npos) << r.err;
  // A same-size edit of one token: the sampled hash reads all of a file this small; --verify
  // hashes the whole of any file.
  std::string edited = val;
  edited[edited.size() / 2 + 1] ^= 1;
  write_file(val_bin, edited);
  r = t.train("--config debug --steps 1", tmp.path / "b");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find(val_bin.string() + ": sampled sha256 differs"), std::string::npos) << r.err;
  r = t.train("--config debug --steps 1 --verify", tmp.path / "b");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find(val_bin.string() + ": sha256 differs"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp.path / "b"));
}

}  // namespace
}  // namespace fbt
