// allowed_cpus, count_physical_cores, cgroup_cpu_limit, default_cpu_threads, set_cpu_threads (see cpu_threads.h).
#include "fbt/util/cpu_threads.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>

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

/// This process's cgroup v2 directory, from the "0::PATH" line of /proc/self/cgroup ("" if none).
std::string own_cgroup_path() {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return "";
}

/// A thread count from an environment variable holding a positive integer (libgomp also takes a
/// list, "4,2": its first element); 0 when unset or not such a number.
int threads_from_env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  return end != value && (*end == '\0' || *end == ',') && n >= 1 && n <= 1 << 16 ? int(n) : 0;
}

}  // namespace

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  // Growing sets: a fixed cpu_set_t fails (EINVAL) where the kernel has more possible CPUs.
  for (int size = CPU_SETSIZE; cpus.empty() && size <= 1 << 16; size *= 2) {
    cpu_set_t* set = CPU_ALLOC(size);
    const size_t bytes = CPU_ALLOC_SIZE(size);
    CPU_ZERO_S(bytes, set);
    if (sched_getaffinity(0, bytes, set) == 0)
      for (int cpu = 0; cpu < size; ++cpu)
        if (CPU_ISSET_S(cpu, bytes, set)) cpus.push_back(cpu);
    CPU_FREE(set);
  }
  if (cpus.empty())
    for (int cpu = 0; cpu < int(std::max(1u, std::thread::hardware_concurrency())); ++cpu) cpus.push_back(cpu);
  return cpus;
}

int count_physical_cores(const std::vector<int>& cpus, const std::string& sysfs_cpu_dir) {
  std::set<std::string> cores;  // each core by the list of its hardware threads
  for (int cpu : cpus) {
    const std::string topology = sysfs_cpu_dir + "/cpu" + std::to_string(cpu) + "/topology/";
    std::string siblings = first_word(topology + "core_cpus_list");
    if (siblings.empty()) siblings = first_word(topology + "thread_siblings_list");  // before Linux 5.7
    cores.insert(siblings.empty() ? "cpu" + std::to_string(cpu) : siblings);         // no topology: a core of its own
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
  if (end == quota.c_str() || *end != '\0' || !(q > 0) || !std::isfinite(q)) return 0;
  return int(std::ceil(std::min(q / period, 65536.0)));
}

int default_cpu_threads() {
  int threads = count_physical_cores(allowed_cpus());
  // The tightest cpu.max from this process's cgroup up to the root (a limit may sit on an ancestor).
  for (std::string dir = own_cgroup_path(); !dir.empty();
       dir = dir == "/" ? "" : dir.substr(0, std::max<size_t>(dir.rfind('/'), 1))) {
    const int limit = cgroup_cpu_limit("/sys/fs/cgroup" + (dir == "/" ? "" : dir) + "/cpu.max");
    if (limit > 0) threads = std::min(threads, limit);
  }
  return std::max(threads, 1);
}

int set_cpu_threads(int64_t threads) {
  const bool from_env = threads_from_env("OMP_NUM_THREADS") > 0 || threads_from_env("MKL_NUM_THREADS") > 0;
  if (threads == 0 && from_env) return at::get_num_threads();
  // Libtorch may start a thread pool here (Debian's 1.13: caffe2's pthreadpool). Its threads
  // inherit this thread's signal mask: with every signal blocked they take none, so a command
  // that waits for signals itself (fbt serve's sigwait of SIGTERM) still gets them.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &before);
  at::set_num_threads(threads > 0 ? int(threads) : default_cpu_threads());
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  return at::get_num_threads();
}

}  // namespace fbt
