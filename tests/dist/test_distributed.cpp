// Data-parallel `fbt train` on localhost (c10d Gloo): 2 processes reproduce 1 process's loss
// sequence for the same global batch; a killed rank makes the other fail within the timeout;
// resume refuses a different world size.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "fbt/data/prepare.h"
#include "metrics_lines.h"
#include "spawn_logged.h"
#include "temp_dir.h"
#include "shared_data.h"

extern char** environ;

namespace fbt {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

/// A TCP port nothing listens on right now (the kernel's pick for port 0).
int free_port() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(getsockname(s, reinterpret_cast<sockaddr*>(&a), &len), 0);
  close(s);
  return ntohs(a.sin_port);
}

/// Starts FBT_CLI `train args` with this environment minus torchrun's variables plus `env`,
/// stdout and stderr to `log`.
pid_t spawn_train(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                  const fs::path& log) {
  std::vector<std::string> argv_s{FBT_CLI, "train"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    const std::string kv(*e), key = kv.substr(0, kv.find('='));
    if (key != "WORLD_SIZE" && key != "RANK" && key != "LOCAL_RANK" && key != "MASTER_ADDR" && key != "MASTER_PORT" &&
        key != "OMP_NUM_THREADS")
      env_s.push_back(kv);
  }
  env_s.push_back("OMP_NUM_THREADS=1");  // 2 ranks on 2 cores, and the same math in every run
  for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
  return testing::spawn_logged(argv_s, log, env_s);
}

/// waitpid with a deadline: the exit status, or -1 (and the process killed) on timeout or signal.
int wait_exit(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

using testing::step_lines;

class Distributed : public ::testing::Test {
 protected:
  testing::TempDir tmp;
  std::string data;

  void SetUp() override {
    FBT_SKIP_WITHOUT_SHARED_DATA("tinyshakespeare/input.txt");
    PrepareOptions p;
    p.inputs = {testing::shared_data("tinyshakespeare/input.txt")};
    p.out_dir = (tmp.path / "data").string();
    p.tokenizer = "byte";
    std::ostringstream log;
    prepare_dataset(p, log);
    data = p.out_dir;
  }

  /// `debug` preset, global batch 2 x 8 x 64 tokens; no jitter or mixin (their draws are
  /// per rank); the default pass schedule, so steps 16-20 run K = 2 or 3.
  std::vector<std::string> args(const std::string& run, int64_t steps) const {
    return {"--config",       "debug",
            "--data",         data,
            "--out",          (tmp.path / run).string(),
            "--steps",        std::to_string(steps),
            "--dist-timeout", "15",
            "--set",          "train.batch_tokens=1024",
            "--set",          "train.warmup_steps=4",
            "--set",          "train.jitter=0",
            "--set",          "train.mixin_prob=0",
            "--set",          "train.eval_every=0",
            "--set",          "train.eval_tokens=1024"};
  }

  /// Runs `world` processes of `fbt train args`; returns each rank's exit status.
  std::vector<int> launch(int world, const std::vector<std::string>& a, const std::string& name) {
    const auto port = std::to_string(free_port());
    std::vector<pid_t> pids;
    for (int r = 0; r < world; ++r) {
      std::map<std::string, std::string> env;
      if (world > 1)
        env = {{"WORLD_SIZE", std::to_string(world)},
               {"RANK", std::to_string(r)},
               {"LOCAL_RANK", std::to_string(r)},
               {"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", port}};
      pids.push_back(spawn_train(a, env, tmp.path / (name + "_rank" + std::to_string(r) + ".log")));
    }
    std::vector<int> codes;
    for (auto pid : pids) codes.push_back(wait_exit(pid, std::chrono::seconds(120)));
    return codes;
  }
};

// The global batch's micro-batches come from one window stream whichever rank computes them,
// and the gradient sum over ranks adds the same per-micro-batch terms as accumulation does, so
// only fp32 summation order may differ: |Δloss| ≤ 1e-5 · loss (observed: bit-identical).
TEST_F(Distributed, TwoGlooProcessesReproduceOneProcessLossSequence) {
  ASSERT_EQ(launch(1, args("one", 20), "one"), std::vector<int>({0}));
  ASSERT_EQ(launch(2, args("two", 20), "two"), std::vector<int>({0, 0})) << read_text(tmp.path / "two_rank0.log");
  auto sharded = args("shard", 20);
  sharded.insert(sharded.end(), {"--normuon-orthogonalize", "shard"});
  ASSERT_EQ(launch(2, sharded, "shard"), std::vector<int>({0, 0})) << read_text(tmp.path / "shard_rank0.log");

  const auto one = step_lines(tmp.path / "one"), two = step_lines(tmp.path / "two"),
             shard = step_lines(tmp.path / "shard");
  ASSERT_EQ(one.size(), 20u);
  ASSERT_EQ(two.size(), 20u);  // rank 0 alone wrote metrics
  ASSERT_EQ(shard.size(), 20u);
  bool multi_pass = false;
  for (size_t i = 0; i < 20; ++i) {
    const double l1 = one[i].at("loss"), l2 = two[i].at("loss"), ls = shard[i].at("loss");
    EXPECT_NEAR(l2, l1, 1e-5 * l1) << "step " << i + 1;
    EXPECT_NEAR(ls, l1, 1e-5 * l1) << "step " << i + 1 << " (sharded NorMuon)";
    EXPECT_EQ(two[i].at("passes"), one[i].at("passes"));
    EXPECT_EQ(two[i].at("tokens"), one[i].at("tokens"));  // the global batch
    EXPECT_TRUE(two[i].contains("comm_s"));
    multi_pass |= one[i].at("passes").get<int>() > 1;
  }
  EXPECT_TRUE(multi_pass);  // the fusion's gradients were reduced too
  EXPECT_GT(one[0].at("loss").get<double>() - one[14].at("loss").get<double>(), 0.1);  // it trains (K = 1 so far)
  EXPECT_TRUE(fs::exists(tmp.path / "two" / "step-0000020" / "model.safetensors"));
  EXPECT_NE(read_text(tmp.path / "two_rank0.log").find("data parallel: 2 processes (c10d gloo"), std::string::npos);
  EXPECT_EQ(read_text(tmp.path / "two_rank1.log"), "");  // ranks > 0 print nothing

  // Resuming the 2-process run in 1 process is refused, naming both sizes.
  const std::vector<std::string> resume{"--data", data, "--out", (tmp.path / "two").string(), "--resume"};
  ASSERT_EQ(launch(1, resume, "resume"), std::vector<int>({1}));
  EXPECT_NE(read_text(tmp.path / "resume_rank0.log").find("2 process(es) but WORLD_SIZE is 1"), std::string::npos)
      << read_text(tmp.path / "resume_rank0.log");
}

// Without train.batch_tokens each of 2 ranks takes one micro-batch of batch_size (torchrun's
// convention): the global batch is 2 x 8 x 64 = 1024 tokens, the same steps as 1 process with
// batch_tokens=1024. The log states it, and a resume keeps it (issue: this launch used to fail).
TEST_F(Distributed, WithoutBatchTokensEachRankTakesOneMicroBatch) {
  auto defaults = args("two", 6);
  const auto bt = std::find(defaults.begin(), defaults.end(), "train.batch_tokens=1024");
  ASSERT_NE(bt, defaults.end());
  defaults.erase(bt - 1, bt + 1);  // drop "--set train.batch_tokens=1024"
  ASSERT_EQ(launch(1, args("one", 6), "one"), std::vector<int>({0}));
  ASSERT_EQ(launch(2, defaults, "two"), std::vector<int>({0, 0})) << read_text(tmp.path / "two_rank0.log");
  const auto one = step_lines(tmp.path / "one"), two = step_lines(tmp.path / "two");
  ASSERT_EQ(two.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(two[i].at("tokens"), 1024 * int64_t(i + 1)) << "step " << i + 1;
    EXPECT_NEAR(two[i].at("loss").get<double>(), one[i].at("loss").get<double>(),
                1e-5 * one[i].at("loss").get<double>());
  }
  const std::string log = read_text(tmp.path / "two_rank0.log");
  EXPECT_NE(log.find("global batch: 16 sequences x 64 = 1024 tokens/step (2 micro-batches of 8 x 64, 1 per rank on 2 "
                     "processes; train.batch_tokens unset: one micro-batch of train.batch_size per process)"),
            std::string::npos)
      << log;
  const auto record = nlohmann::json::parse(read_text(tmp.path / "two" / "run.json"));
  EXPECT_EQ(record.at("global_batch").at("tokens"), 1024);

  // A 1-process resume would halve the global batch: refused before any checkpoint is read.
  const std::vector<std::string> resume{"--data",   data,      "--out", (tmp.path / "two").string(),
                                        "--resume", "--steps", "8"};
  ASSERT_EQ(launch(1, resume, "resume1"), std::vector<int>({1}));
  EXPECT_NE(read_text(tmp.path / "resume1_rank0.log")
                .find("global batch of 1024 tokens per step by 2 process(es), but WORLD_SIZE 1 gives 512"),
            std::string::npos)
      << read_text(tmp.path / "resume1_rank0.log");
  // The same 2 processes continue with the same global batch.
  ASSERT_EQ(launch(2, resume, "resume2"), std::vector<int>({0, 0})) << read_text(tmp.path / "resume2_rank0.log");
  const auto resumed = step_lines(tmp.path / "two");
  ASSERT_EQ(resumed.size(), 8u);
  EXPECT_EQ(resumed[7].at("tokens"), 8 * 1024);
}

// SIGKILL on rank 1 mid-run: rank 0's next collective fails (Gloo sees the closed connection,
// or the 15 s c10d timeout fires) and it exits 1 rather than hang.
TEST_F(Distributed, KillingOneRankMakesTheOtherExitNonZero) {
  const auto port = std::to_string(free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r)
    pids.push_back(spawn_train(args("run", 100000),
                               {{"WORLD_SIZE", "2"},
                                {"RANK", std::to_string(r)},
                                {"LOCAL_RANK", std::to_string(r)},
                                {"MASTER_ADDR", "127.0.0.1"},
                                {"MASTER_PORT", port}},
                               tmp.path / ("rank" + std::to_string(r) + ".log")));
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (step_lines(tmp.path / "run").size() < 3 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_GE(step_lines(tmp.path / "run").size(), 3u) << read_text(tmp.path / "rank0.log");
  kill(pids[1], SIGKILL);
  const auto killed_at = Clock::now();
  EXPECT_EQ(wait_exit(pids[1], std::chrono::seconds(10)), -1);
  EXPECT_EQ(wait_exit(pids[0], std::chrono::seconds(15 + 15)), 1) << read_text(tmp.path / "rank0.log");
  EXPECT_LT(Clock::now() - killed_at, std::chrono::seconds(15 + 15));
  EXPECT_NE(read_text(tmp.path / "rank0.log").find("error:"), std::string::npos);
}

}  // namespace
}  // namespace fbt
