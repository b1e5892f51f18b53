// cpu_threads.h: physical cores from a sysfs topology tree, cgroup v2 CPU limits, the affinity
// mask and the thread count set for --threads / OMP_NUM_THREADS / the default.
#include <gtest/gtest.h>

#include <sched.h>

#include <ATen/Parallel.h>

#include "cli_test_helpers.h"
#include "fbt/util/cpu_threads.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

/// A sysfs cpu directory whose CPU i sits on (package[i], core[i]).
fs::path fake_sysfs(const fs::path& root, const std::vector<std::pair<int, int>>& topology) {
  for (size_t cpu = 0; cpu < topology.size(); ++cpu) {
    const auto dir = root / ("cpu" + std::to_string(cpu)) / "topology";
    testing::write_file(dir / "physical_package_id", std::to_string(topology[cpu].first) + "\n");
    testing::write_file(dir / "core_id", std::to_string(topology[cpu].second) + "\n");
  }
  return root;
}

TEST(CpuThreads, SmtSiblingsCountAsOneCore) {
  testing::TempDir tmp;
  // 0,1: two hyperthreads of core 0; 2,3: of core 1; 4: core 0 of the second package.
  const auto sysfs = fake_sysfs(tmp.path, {{0, 0}, {0, 0}, {0, 1}, {0, 1}, {1, 0}}).string();
  EXPECT_EQ(count_physical_cores({0, 1, 2, 3, 4}, sysfs), 3);
  EXPECT_EQ(count_physical_cores({0, 1}, sysfs), 1);
  EXPECT_EQ(count_physical_cores({1, 3}, sysfs), 2);
  EXPECT_EQ(count_physical_cores({0, 4}, sysfs), 2);  // same core_id, another package
  EXPECT_EQ(count_physical_cores({}, sysfs), 0);
  EXPECT_EQ(count_physical_cores({7, 8}, sysfs), 2);  // no topology files: one core each
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

TEST(CpuThreads, SetCpuThreadsTakesTheFlagThenOmpNumThreadsThenTheDefault) {
  const int before = at::get_num_threads();
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const std::string saved = omp ? omp : "";
  EXPECT_EQ(set_cpu_threads(3), 3);
  unsetenv("OMP_NUM_THREADS");
  EXPECT_EQ(set_cpu_threads(0), default_cpu_threads());
  setenv("OMP_NUM_THREADS", "3", 1);
  at::set_num_threads(3);  // as libtorch would have read it at start-up
  EXPECT_EQ(set_cpu_threads(0), 3);  // left as it is
  if (omp) setenv("OMP_NUM_THREADS", saved.c_str(), 1); else unsetenv("OMP_NUM_THREADS");
  at::set_num_threads(before);
}

}  // namespace
}  // namespace fbt
