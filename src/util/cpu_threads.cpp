// allowed_cpus, count_physical_cores, cgroup_cpu_limit, default_cpu_threads, set_cpu_threads (see cpu_threads.h).
#include "fbt/util/cpu_threads.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include <ATen/Parallel.h>

namespace fbt {
namespace {

/// The first whitespace-separated word of a text file; empty when it cannot be read.
std::string first_word(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  in >> word;
  return word;
}

/// This process's cgroup v2 directory under /sys/fs/cgroup, from the "0::PATH" line of /proc/self/cgroup.
std::string own_cgroup_dir() {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  return "/sys/fs/cgroup";
}

}  // namespace

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  if (cpus.empty())
    for (int cpu = 0; cpu < int(std::max(1u, std::thread::hardware_concurrency())); ++cpu) cpus.push_back(cpu);
  return cpus;
}

int count_physical_cores(const std::vector<int>& cpus, const std::string& sysfs_cpu_dir) {
  std::set<std::pair<std::string, std::string>> cores;
  for (int cpu : cpus) {
    const std::string topology = sysfs_cpu_dir + "/cpu" + std::to_string(cpu) + "/topology/";
    const std::string package = first_word(topology + "physical_package_id"), core = first_word(topology + "core_id");
    if (package.empty() || core.empty())
      cores.insert({"cpu", std::to_string(cpu)});  // no topology: a core of its own
    else
      cores.insert({package, core});
  }
  return int(cores.size());
}

int cgroup_cpu_limit(const std::string& cpu_max_file) {
  std::ifstream in(cpu_max_file);
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max" || !(period > 0)) return 0;
  char* end = nullptr;
  const double q = std::strtod(quota.c_str(), &end);
  if (end == quota.c_str() || *end != '\0' || !(q > 0)) return 0;
  return int(std::ceil(q / period));
}

int default_cpu_threads() {
  int threads = count_physical_cores(allowed_cpus());
  const int limit = cgroup_cpu_limit(own_cgroup_dir() + "/cpu.max");
  if (limit > 0) threads = std::min(threads, limit);
  return std::max(threads, 1);
}

int set_cpu_threads(int64_t threads) {
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (threads > 0)
    at::set_num_threads(int(threads));
  else if (omp == nullptr || *omp == '\0')
    at::set_num_threads(default_cpu_threads());
  return at::get_num_threads();
}

}  // namespace fbt
