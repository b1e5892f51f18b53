// How many CPU threads fbt's commands use by default: the physical cores this process may run on.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fbt {

/// The CPUs this process may run on (sched_getaffinity: taskset, numactl, a container's cpuset),
/// ascending. Falls back to 0..hardware_concurrency-1 where the call fails.
std::vector<int> allowed_cpus();

/// The distinct physical cores among `cpus` (logical CPU numbers): pairs (physical_package_id,
/// core_id) read from `sysfs_cpu_dir`/cpuN/topology/, so SMT siblings count once. A CPU whose
/// topology files are missing or unreadable counts as a core of its own. Never throws.
int count_physical_cores(const std::vector<int>& cpus, const std::string& sysfs_cpu_dir = "/sys/devices/system/cpu");

/// The CPU limit of a cgroup v2 `cpu.max` file ("QUOTA PERIOD" in microseconds, or "max PERIOD"):
/// ceil(QUOTA / PERIOD) CPUs, or 0 for no limit ("max", a missing, unreadable or malformed file).
/// Source: the kernel's Documentation/admin-guide/cgroup-v2.rst, "cpu.max". Never throws.
int cgroup_cpu_limit(const std::string& cpu_max_file);

/// The default thread count: the physical cores among allowed_cpus(), capped by the cgroup v2 CPU
/// limit of this process's cgroup (/proc/self/cgroup), at least 1. Libtorch's own default comes from
/// cpuinfo and is 1 on some VMs (Debian's libtorch 1.13 on the 2-core CI VM), which ran
/// `fbt train` on one of two cores.
int default_cpu_threads();

/// Sets libtorch's intra-op threads (which the decode kernels share; batch_gemv.h) for a
/// `--threads` value: `threads` when > 0; for 0, the value of OMP_NUM_THREADS where that is set
/// (libtorch reads it), else default_cpu_threads(). Returns the count now in use.
int set_cpu_threads(int64_t threads);

}  // namespace fbt
