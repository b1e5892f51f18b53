// Shared helpers for tests that run programs in the sandbox (fbt/eval/sandbox.h): when to skip,
// and finding a run's processes from the host through /proc.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "fbt/eval/sandbox.h"
#include "fbt/util/error.h"

namespace fbt::testing {

/// Why the sandbox cannot be tested here, or nullopt when it works. Only two reasons count: no
/// python3 at all, or bwrap itself reporting that it cannot create namespaces on this machine
/// (e.g. a container without user namespaces). Anything else (bwrap missing, a bwrap that
/// cannot run Python) is rethrown, so the test fails.
inline std::optional<std::string> sandbox_skip_reason() {
  try {
    check_sandbox();
    return std::nullopt;
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find("interpreter 'python3' not found") != std::string::npos) return "no python3: " + what;
    if (what.find("bwrap: ") != std::string::npos && what.find("new namespace") != std::string::npos)
      return "bwrap cannot create namespaces on this machine: " + what;
    throw;
  }
}

/// Skips the test (printing why) only for the reasons of sandbox_skip_reason.
#define REQUIRE_SANDBOX() \
  if (const auto why = ::fbt::testing::sandbox_skip_reason()) GTEST_SKIP() << *why

/// Calls `f(pid_dir)` for every process directory /proc/PID.
template <typename F>
void for_each_process(F f) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") == std::string::npos) f(entry.path());
  }
}

/// Number of processes whose command line contains `marker` (a unique argv[0] a test's program
/// gives what it starts).
inline int processes_with_marker(const std::string& marker) {
  int count = 0;
  for_each_process([&](const std::filesystem::path& dir) {
    std::ifstream in(dir / "cmdline", std::ios::binary);
    std::ostringstream cmdline;
    cmdline << in.rdbuf();
    if (cmdline.str().find(marker) != std::string::npos) ++count;
  });
  return count;
}

/// Number of live processes in the PID namespace `ns` ("pid:[INODE]", what a program inside
/// reads from os.readlink('/proc/self/ns/pid')).
inline int processes_in_pid_namespace(const std::string& ns) {
  int count = 0;
  for_each_process([&](const std::filesystem::path& dir) {
    std::error_code ec;
    if (std::filesystem::read_symlink(dir / "ns" / "pid", ec).string() == ns) ++count;
  });
  return count;
}

/// Number of processes, zombies included, whose parent is this process.
inline int children_of_this_process() {
  int count = 0;
  const pid_t self = ::getpid();
  for_each_process([&](const std::filesystem::path& dir) {
    std::ifstream stat(dir / "stat");
    std::string line;
    if (!std::getline(stat, line) || line.rfind(')') == std::string::npos) return;
    std::istringstream fields(line.substr(line.rfind(')') + 2));  // after "pid (comm) "
    char state;
    pid_t ppid = 0;
    if (fields >> state >> ppid && ppid == self) ++count;
  });
  return count;
}

}  // namespace fbt::testing
