// `fbt train` as a process: SIGINT finishes the step, writes a checkpoint, exits 0; --resume
// continues from it.
#include <gtest/gtest.h>

#include <signal.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli_test_helpers.h"
#include "fbt/data/prepare.h"
#include "fbt/util/cpu_threads.h"
#include "spawn_logged.h"
#include "temp_dir.h"
#include "shared_data.h"

extern char** environ;

namespace fbt {
namespace {
namespace fs = std::filesystem;

using testing::spawn_logged;

int count_lines(const fs::path& p) {
  std::ifstream f(p);
  int n = 0;
  for (std::string line; std::getline(f, line);) ++n;
  return n;
}

/// TinyShakespeare prepared with the byte tokenizer into `dir`; returns the directory.
std::string prepare_shakespeare_bytes(const fs::path& dir) {
  PrepareOptions p;
  p.inputs = {std::string(FBT_SHARED_DATA) + "/tinyshakespeare/input.txt"};
  p.out_dir = dir.string();
  p.tokenizer = "byte";
  std::ostringstream log;
  prepare_dataset(p, log);
  return p.out_dir;
}

TEST(TrainCli, SigintWritesACheckpointAndResumeContinues) {
  FBT_SKIP_WITHOUT_SHARED_DATA("tinyshakespeare/input.txt");
  testing::TempDir tmp;
  const std::string data = prepare_shakespeare_bytes(tmp.path / "data");
  const auto run = tmp.path / "run";
  const std::vector<std::string> args{FBT_CLI,    "train",
                                      "--config", "debug",
                                      "--data",   data,
                                      "--out",    run.string(),
                                      "--steps",  "100000",
                                      "--set",    "train.eval_every=0",
                                      "--set",    "train.checkpoint_every=0"};
  const pid_t pid = spawn_logged(args, tmp.path / "log1.txt");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (count_lines(run / "metrics.jsonl") < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(kill(pid, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  std::ifstream log1(tmp.path / "log1.txt");
  std::string text((std::istreambuf_iterator<char>(log1)), {});
  ASSERT_TRUE(WIFEXITED(status)) << text;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT) << text;  // cut short, not finished
  EXPECT_NE(text.find("interrupted: checkpoint written"), std::string::npos) << text;

  std::ifstream latest(run / "latest");
  std::string name;
  latest >> name;
  ASSERT_TRUE(fs::is_regular_file(run / name / "model.safetensors")) << name;
  const int64_t stopped_at = std::stoll(name.substr(5));
  EXPECT_EQ(count_lines(run / "metrics.jsonl"), stopped_at);  // one line per finished step

  // Resume for 2 more steps by raising nothing but the budget: --steps sets the new total.
  const std::vector<std::string> resume{
      FBT_CLI, "train", "--data", data, "--out", run.string(), "--resume", "--steps", std::to_string(stopped_at + 2)};
  const pid_t pid2 = spawn_logged(resume, tmp.path / "log2.txt");
  ASSERT_EQ(waitpid(pid2, &status, 0), pid2);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(fs::is_regular_file(
      run / ("step-" + std::string(7 - std::to_string(stopped_at + 2).size(), '0') + std::to_string(stopped_at + 2)) /
      "model.safetensors"));
  // The new total is recorded in run.json, with the resume that changed it.
  std::ifstream record(run / "run.json");
  const auto j = nlohmann::json::parse(record);
  EXPECT_EQ(j.at("config").at("train").at("steps").get<int64_t>(), stopped_at + 2);
  ASSERT_EQ(j.at("resumes").size(), 1u);
  EXPECT_EQ(j.at("resumes")[0].at("at_step").get<int64_t>(), stopped_at);
  EXPECT_EQ(j.at("resumes")[0].at("steps_before").get<int64_t>(), 100000);
  // ... and its progress: tokens and token-equivalent compute (Σ tokens × K) re-added from the
  // per-step lines of metrics.jsonl, which span both processes.
  std::ifstream metrics(run / "metrics.jsonl");
  int64_t tokens = 0, token_equivalent = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto m = nlohmann::json::parse(line);
    if (!m.contains("passes")) continue;
    const int64_t now = m.at("tokens");
    token_equivalent += (now - tokens) * m.at("passes").get<int64_t>();
    tokens = now;
  }
  const auto& progress = j.at("progress");
  EXPECT_EQ(progress.at("step").get<int64_t>(), stopped_at + 2);
  EXPECT_EQ(progress.at("tokens").get<int64_t>(), tokens);
  EXPECT_EQ(progress.at("token_equivalent").get<int64_t>(), token_equivalent);
  EXPECT_GT(progress.at("wall_s").get<double>(), 0.0);
  EXPECT_TRUE(progress.at("val").contains("fused1"));  // the last step validates
}

// A damaged run.json (empty object, truncated, not JSON) on --resume is an error naming the file,
// never an abort (exit 134 from an uncaught JSON-library exception before issue 21).
TEST(TrainCli, DamagedRunJsonOnResumeIsAnErrorNamingTheFile) {
  testing::TempDir tmp;
  const auto run = tmp.path / "run";
  fs::create_directories(run);
  std::ofstream(run / "latest") << "step-0000001\n";
  for (const std::string damaged : {"{}", "{\"config\": {\"mod", "not json"}) {
    std::ofstream(run / "run.json") << damaged;
    const auto r = testing::run_cli(
        tmp.path, "train --data " + (tmp.path / "data").string() + " --out " + run.string() + " --resume");
    EXPECT_EQ(r.rc, 1) << damaged << ": " << r.err;
    EXPECT_NE(r.err.find("error: --resume: " + (run / "run.json").string() + ": "), std::string::npos)
        << damaged << ": " << r.err;
  }
}

// Libtorch's own default is 1 thread on some machines (Debian's 1.13 on the 2-core CI VM): fbt
// uses the physical cores it may run on unless OMP_NUM_THREADS or --threads says otherwise.
TEST(TrainCli, RunsOnThePhysicalCoresUnlessOmpNumThreadsOrThreadsSaysOtherwise) {
  FBT_SKIP_WITHOUT_SHARED_DATA("tinyshakespeare/input.txt");
  testing::TempDir tmp;
  const std::string data = prepare_shakespeare_bytes(tmp.path / "data");
  struct Case {
    std::string prefix, flags;
    int threads;
  };
  for (const auto& c : {Case{"env -u OMP_NUM_THREADS -u MKL_NUM_THREADS", "", default_cpu_threads()},
                        Case{"env -u OMP_NUM_THREADS -u MKL_NUM_THREADS", "--threads 3", 3},
                        Case{"env OMP_NUM_THREADS=1", "--threads 0", 1},  // 0: the default
                        // (1, not more: PyTorch 2.x's MKL builds cap OMP_NUM_THREADS at the physical cores)
                        Case{"env OMP_NUM_THREADS=1", "", 1}}) {
    const auto run = tmp.path / "run";
    const auto r = testing::run_cli(tmp.path,
                                    "train --config debug --data " + data + " --out " + run.string() +
                                        " --steps 1 --force --set train.eval_every=0 " + c.flags,
                                    c.prefix);
    ASSERT_EQ(r.rc, 0) << c.prefix << " " << c.flags << "\n" << r.err;
    std::ifstream record(run / "run.json");
    EXPECT_EQ(nlohmann::json::parse(record).at("threads").get<int>(), c.threads) << c.prefix << " " << c.flags;
  }
}

}  // namespace
}  // namespace fbt
