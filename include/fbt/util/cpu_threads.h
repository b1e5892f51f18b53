// How many CPU threads fbt's commands use by default: the physical cores this process may run on.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fbt {

/// The CPUs this process may run on (sched_getaffinity: taskset, numactl, a container's cpuset),
/// ascending. Falls back to 0..hardware_concurrency-1 where the call fails.
std::vector<int> allowed_cpus();

/// The distinct physical cores among `cpus` (logical CPU numbers): the distinct sets of hardware
/// threads in `sysfs_cpu_dir`/cpuN/topology/core_cpus_list (thread_siblings_list before Linux
/// 5.7), so SMT siblings count once, and cores are told apart on arm64 clusters too, where core_id
/// restarts in each cluster. A CPU without topology files counts as a core of its own. Never throws.
int count_physical_cores(const std::vector<int>& cpus, const std::string& sysfs_cpu_dir = "/sys/devices/system/cpu");

/// The CPU limit of a cgroup v2 `cpu.max` file ("QUOTA PERIOD" in microseconds, or "max PERIOD"):
/// ceil(QUOTA / PERIOD) CPUs, or 0 for no limit ("max", a missing, unreadable or malformed file).
/// Source: the kernel's Documentation/admin-guide/cgroup-v2.rst, "cpu.max". Never throws.
int cgroup_cpu_limit(const std::string& cpu_max_file);

/// The default thread count: the physical cores among allowed_cpus(), capped by the tightest cgroup
/// v2 CPU limit from this process's cgroup (/proc/self/cgroup) up to the root, at least 1.
/// Libtorch's own default comes from cpuinfo and is 1 on some VMs (Debian's libtorch 1.13 on the
/// 2-core CI VM), which ran `fbt train` on one of two cores.
int default_cpu_threads();

/// Sets libtorch's intra-op threads (which the decode kernels share; batch_gemv.h) for a
/// `--threads` value: `threads` when > 0; for 0, the count libtorch took from OMP_NUM_THREADS or
/// MKL_NUM_THREADS where one holds a positive integer, else default_cpu_threads(). Any thread
/// libtorch starts here has every signal blocked (fbt serve waits for its signals with sigwait).
/// Returns the count now in use.
int set_cpu_threads(int64_t threads);

}  // namespace fbt
