// cpu_threads.h: physical cores from a sysfs topology tree, cgroup v2 CPU limits, the affinity
// mask and the thread count set for --threads / OMP_NUM_THREADS / the default.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include <fstream>
#include <iostream>
#include <map>
#include <optional>

#include <ATen/Parallel.h>

#include "cli_test_helpers.h"
#include "fbt/util/cpu_threads.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

/// A sysfs cpu directory in which CPU i's topology/`file` holds siblings[i] (the list of the hardware
/// threads of its core, as the kernel writes it: "0-1", "2,6").
fs::path fake_sysfs(const fs::path& root, const std::vector<std::string>& siblings,
                    const std::string& file = "core_cpus_list") {
  for (size_t cpu = 0; cpu < siblings.size(); ++cpu)
    testing::write_file(root / ("cpu" + std::to_string(cpu)) / "topology" / file, siblings[cpu] + "\n");
  return root;
}

TEST(CpuThreads, SmtSiblingsCountAsOneCore) {
  testing::TempDir tmp;
  // 0,1: two hyperthreads of one core; 2,3: of another; 4: a core of its own.
  const auto sysfs = fake_sysfs(tmp.path / "a", {"0-1", "0-1", "2-3", "2-3", "4"}).string();
  EXPECT_EQ(count_physical_cores({0, 1, 2, 3, 4}, sysfs), 3);
  EXPECT_EQ(count_physical_cores({0, 1}, sysfs), 1);
  EXPECT_EQ(count_physical_cores({1, 3}, sysfs), 2);
  EXPECT_EQ(count_physical_cores({}, sysfs), 0);
  EXPECT_EQ(count_physical_cores({7, 8}, sysfs), 2);  // no topology files: one core each
  // Kernels before 5.7 have thread_siblings_list only.
  const auto old = fake_sysfs(tmp.path / "b", {"0,2", "1,3", "0,2", "1,3"}, "thread_siblings_list").string();
  EXPECT_EQ(count_physical_cores({0, 1, 2, 3}, old), 2);
  // An arm64 board's clusters (core_id restarts at 0 in each; no SMT): every CPU its own core.
  testing::write_file(tmp.path / "c" / "cpu0" / "topology" / "core_id", "0\n");
  testing::write_file(tmp.path / "c" / "cpu1" / "topology" / "core_id", "0\n");
  const auto arm = fake_sysfs(tmp.path / "c", {"0", "1"}).string();
  EXPECT_EQ(count_physical_cores({0, 1}, arm), 2);
}

TEST(CpuThreads, CgroupCpuMaxIsRoundedUpAndMaxIsNoLimit) {
  testing::TempDir tmp;
  const auto limit = [&](const std::string& text) {
    testing::write_file(tmp.path / "cpu.max", text);
    return cgroup_cpu_limit((tmp.path / "cpu.max").string());
  };
  EXPECT_EQ(limit("max 100000\n"), 0);
  EXPECT_EQ(limit("200000 100000\n"), 2);
  EXPECT_EQ(limit("150000 100000\n"), 2);
  EXPECT_EQ(limit("50000 100000\n"), 1);
  EXPECT_EQ(limit("garbage\n"), 0);
  EXPECT_EQ(limit("100000x 100000\n"), 0);
  EXPECT_EQ(limit("100000 0\n"), 0);
  EXPECT_EQ(limit("inf 100000\n"), 0);
  EXPECT_EQ(limit("1e30 1\n"), 65536);  // clamped, not an int overflow
  EXPECT_EQ(cgroup_cpu_limit((tmp.path / "missing").string()), 0);
}

TEST(CpuThreads, DefaultFollowsTheAffinityMask) {
  const auto cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_GE(default_cpu_threads(), 1);
  EXPECT_LE(default_cpu_threads(), int(cpus.size()));
  // Pinned to one CPU (taskset -c N), the default is one thread.
  cpu_set_t before, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  CPU_ZERO(&one);
  CPU_SET(cpus.back(), &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  const auto pinned = allowed_cpus();
  const int threads = default_cpu_threads();
  ASSERT_EQ(sched_setaffinity(0, sizeof before, &before), 0);
  EXPECT_EQ(pinned, std::vector<int>{cpus.back()});
  EXPECT_EQ(threads, 1);
}

/// The environment variable `name` set to `value` (unset for nullptr) for a scope.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> saved;
  ScopedEnv(std::string n, const char* value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) saved = v;
    if (value)
      setenv(name.c_str(), value, 1);
    else
      unsetenv(name.c_str());
  }
  ~ScopedEnv() {
    if (saved)
      setenv(name.c_str(), saved->c_str(), 1);
    else
      unsetenv(name.c_str());
  }
};

TEST(CpuThreads, SetCpuThreadsTakesTheFlagThenTheEnvironmentThenTheDefault) {
  const int before = at::get_num_threads();
  const int other = default_cpu_threads() + 1;  // a count no default gives
  ScopedEnv mkl("MKL_NUM_THREADS", nullptr);
  {
    ScopedEnv omp("OMP_NUM_THREADS", nullptr);
    EXPECT_EQ(set_cpu_threads(other), other);
    EXPECT_EQ(set_cpu_threads(0), default_cpu_threads());
  }
  for (const char* junk : {"0", "abc", ""}) {  // not a thread count: the default, not libtorch's own
    ScopedEnv omp("OMP_NUM_THREADS", junk);
    at::set_num_threads(other);
    EXPECT_EQ(set_cpu_threads(0), default_cpu_threads()) << "OMP_NUM_THREADS='" << junk << "'";
  }
  for (const char* name : {"OMP_NUM_THREADS", "MKL_NUM_THREADS"}) {
    ScopedEnv env(name, std::to_string(other).c_str());
    at::set_num_threads(other);                    // as libtorch would have read it at start-up
    EXPECT_EQ(set_cpu_threads(0), other) << name;  // left as it is
  }
  at::set_num_threads(before);
}

/// The threads of this process (/proc/self/task) and the signals each blocks (SigBlk, hex).
std::map<std::string, uint64_t> blocked_signals_by_thread() {
  std::map<std::string, uint64_t> out;
  for (const auto& task : fs::directory_iterator("/proc/self/task")) {
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("SigBlk:", 0) == 0)
        out[task.path().filename().string()] = std::stoull(line.substr(7), nullptr, 16);
  }
  return out;
}

// fbt serve blocks SIGINT/SIGTERM in every thread and takes them with sigwait: a thread that
// libtorch starts in set_cpu_threads must not take them (it would end the process instead).
TEST(CpuThreads, ThreadsStartedBySetCpuThreadsBlockEverySignal) {
  const int before = at::get_num_threads();
  const auto old_threads = blocked_signals_by_thread();
  set_cpu_threads(before + 2);  // a new count: libtorch (re)starts its pool
  set_cpu_threads(before + 3);
  const uint64_t term = uint64_t(1) << (SIGTERM - 1), interrupt = uint64_t(1) << (SIGINT - 1);
  int started = 0;
  for (const auto& [tid, blocked] : blocked_signals_by_thread()) {
    if (old_threads.count(tid)) continue;
    ++started;
    EXPECT_EQ(blocked & (term | interrupt), term | interrupt) << "thread " << tid;
  }
  std::cout << started << " thread(s) started by set_cpu_threads\n";
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  EXPECT_FALSE(sigismember(&mask, SIGTERM));  // the caller's own mask is restored
  at::set_num_threads(before);
}

}  // namespace
}  // namespace fbt
