// The Python sandbox: exit statuses, timeouts, rlimits, fork bombs, working directory, descriptors.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "fbt/eval/sandbox.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

/// Whether a python3 can be started in the sandbox at all.
bool python_available() {
  static const bool available = [] {
    try {
      return run_python("pass").status == SandboxStatus::kPassed;
    } catch (const Error&) {
      return false;
    }
  }();
  return available;
}

/// Skips the test when python3 is missing.
#define REQUIRE_PYTHON() \
  if (!python_available()) GTEST_SKIP() << "python3 cannot be run in the sandbox"

/// run_python, also timing the whole call from outside.
SandboxResult run_timed(const std::string& program, const SandboxLimits& limits, double* call_seconds) {
  const auto start = std::chrono::steady_clock::now();
  SandboxResult r = run_python(program, limits);
  *call_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

/// Number of processes, zombies included, in process group `pgid` (Linux /proc).
int processes_in_group(pid_t pgid) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;  // exited while we looked
    std::istringstream fields(line.substr(line.rfind(')') + 2));  // after "pid (comm) "
    char state;
    pid_t ppid, pgrp;
    if (fields >> state >> ppid >> pgrp && pgrp == pgid) ++count;
  }
  return count;
}

/// The process group id a program printed on its first stdout line.
pid_t printed_pgid(const SandboxResult& r) {
  std::istringstream out(r.stdout_text);
  pid_t pgid = 0;
  out >> pgid;
  return pgid;
}

TEST(Sandbox, PassingProgramPasses) {
  REQUIRE_PYTHON();
  const SandboxResult r = run_python("import sys\nprint('hello')\nprint('to stderr', file=sys.stderr)\n");
  EXPECT_EQ(r.status, SandboxStatus::kPassed) << r.stderr_text;
  EXPECT_STREQ(to_string(r.status), "passed");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.stdout_text, "hello\n");
  EXPECT_EQ(r.stderr_text, "to stderr\n");
  EXPECT_GT(r.wall_seconds, 0.0);
}

TEST(Sandbox, FailedAssertFails) {
  REQUIRE_PYTHON();
  const SandboxResult r = run_python("assert False, 'wrong answer'");
  EXPECT_EQ(r.status, SandboxStatus::kFailed);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.stderr_text.find("AssertionError: wrong answer"), std::string::npos) << r.stderr_text;
  EXPECT_EQ(run_python("import sys; sys.exit(3)").exit_code, 3);
}

TEST(Sandbox, InfiniteLoopIsKilledAtTheTimeout) {
  REQUIRE_PYTHON();
  SandboxLimits limits;
  limits.timeout_seconds = 1.0;
  double call = 0;
  const SandboxResult r = run_timed("while True: pass", limits, &call);
  EXPECT_EQ(r.status, SandboxStatus::kTimeout);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_GE(r.wall_seconds, 1.0);
  EXPECT_LT(call, limits.timeout_seconds + 1.5);
}

TEST(Sandbox, CpuLimitStopsABusyLoop) {
  REQUIRE_PYTHON();
  SandboxLimits limits;
  limits.cpu_seconds = 1;
  limits.timeout_seconds = 20;
  double call = 0;
  const SandboxResult r = run_timed("while True: pass", limits, &call);
  EXPECT_EQ(r.status, SandboxStatus::kTimeout);
  EXPECT_EQ(r.signal, SIGXCPU);
  EXPECT_LT(call, 10.0);  // CPU time, so a loaded machine may take a few seconds of wall time
}

TEST(Sandbox, SignalIsACrash) {
  REQUIRE_PYTHON();
  const SandboxResult r = run_python("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)");
  EXPECT_EQ(r.status, SandboxStatus::kCrashed);
  EXPECT_EQ(r.signal, SIGSEGV);
  EXPECT_EQ(r.exit_code, -1);
}

TEST(Sandbox, MemoryHogFailsUnderTheAddressSpaceLimit) {
  REQUIRE_PYTHON();
  SandboxLimits limits;
  limits.memory_bytes = 256 << 20;
  const SandboxResult r = run_python("x = bytearray(2 * 1024**3)\nprint('allocated')", limits);
  EXPECT_EQ(r.status, SandboxStatus::kFailed);
  EXPECT_NE(r.stderr_text.find("MemoryError"), std::string::npos) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "");
  EXPECT_EQ(run_python("x = bytearray(64 * 1024**2)", limits).status, SandboxStatus::kPassed);
}

TEST(Sandbox, ForkBombReturnsInTimeAndLeavesNoProcess) {
  REQUIRE_PYTHON();
  SandboxLimits limits;
  limits.timeout_seconds = 3.0;
  limits.uid = 65533;  // not "nobody": the bomb's processes would eat the RLIMIT_NPROC budget of
                       // sandbox runs in tests that ctest -j runs at the same time
  // The plain bomb dies of its first failed fork; the stubborn one keeps trying until the timeout.
  for (const std::string bomb : {"while True: os.fork()\n",
                                 "while True:\n  try: os.fork()\n  except OSError: pass\n"}) {
    double call = 0;
    const SandboxResult r = run_timed("import os\nprint(os.getpgid(0), flush=True)\n" + bomb, limits, &call);
    EXPECT_NE(r.status, SandboxStatus::kPassed);
    EXPECT_LT(call, limits.timeout_seconds + 1.5) << bomb;
    const pid_t pgid = printed_pgid(r);
    ASSERT_GT(pgid, 1) << r.stdout_text;
    EXPECT_NE(pgid, ::getpgrp());
    EXPECT_EQ(processes_in_group(pgid), 0) << bomb;
  }
}

TEST(Sandbox, BackgroundChildIsKilledWhenTheProgramExits) {
  REQUIRE_PYTHON();
  double call = 0;
  const SandboxResult r = run_timed(
      "import os, time\nprint(os.getpgid(0), flush=True)\nif os.fork() == 0:\n  time.sleep(60)\n", {}, &call);
  EXPECT_EQ(r.status, SandboxStatus::kPassed) << r.stderr_text;
  EXPECT_LT(call, 3.0);  // not waiting for the child's copy of stdout to close
  const pid_t pgid = printed_pgid(r);
  ASSERT_GT(pgid, 1) << r.stdout_text;
  EXPECT_EQ(processes_in_group(pgid), 0);
}

TEST(Sandbox, FileSizeLimit) {
  REQUIRE_PYTHON();
  SandboxLimits limits;
  limits.file_size_bytes = 1 << 20;
  const SandboxResult big = run_python("open('big', 'wb').write(b'x' * (2 << 20))", limits);
  EXPECT_EQ(big.status, SandboxStatus::kFailed);
  EXPECT_NE(big.stderr_text.find("File too large"), std::string::npos) << big.stderr_text;
  EXPECT_EQ(run_python("open('small', 'wb').write(b'x' * (512 << 10))", limits).status, SandboxStatus::kPassed);
}

TEST(Sandbox, FreshEmptyWorkingDirectoryIsRemoved) {
  REQUIRE_PYTHON();
  const SandboxResult r = run_python(
      "import os\nprint(os.getcwd())\nprint(os.listdir('.'))\nopen('out.txt', 'w').write('data')\n"
      "print(os.environ['HOME'] == os.getcwd() == os.environ['TMPDIR'])\n"
      "os.makedirs('a/b')\nos.chmod('a/b', 0)\nos.chmod('a', 0o500)\n");  // removable all the same
  ASSERT_EQ(r.status, SandboxStatus::kPassed) << r.stderr_text;
  std::istringstream out(r.stdout_text);
  std::string cwd, listing, env_ok;
  std::getline(out, cwd);
  std::getline(out, listing);
  std::getline(out, env_ok);
  EXPECT_EQ(listing, "[]");
  EXPECT_EQ(env_ok, "True");
  EXPECT_NE(fs::path(cwd), fs::current_path());
  EXPECT_FALSE(fs::exists(cwd)) << cwd;
  EXPECT_FALSE(fs::exists(fs::path(cwd).parent_path())) << cwd;
  EXPECT_NE(run_python("import os\nprint(os.getcwd())").stdout_text, cwd + "\n");  // a new one each run
}

TEST(Sandbox, ParentDescriptorsAreNotInheritedAndStdinIsEmpty) {
  REQUIRE_PYTHON();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);  // deliberately without O_CLOEXEC
  const SandboxResult r = run_python("import os, sys\nfor fd in (" + std::to_string(fds[0]) + ", " +
                                     std::to_string(fds[1]) +
                                     "):\n  try:\n    os.fstat(fd); print('open')\n"
                                     "  except OSError:\n    print('closed')\nprint(repr(sys.stdin.read()))\n");
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_EQ(r.status, SandboxStatus::kPassed) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "closed\nclosed\n''\n");
}

TEST(Sandbox, OutputIsCappedAndTheRestDrained) {
  REQUIRE_PYTHON();
  SandboxLimits limits;
  limits.max_output_bytes = 1000;
  const SandboxResult r = run_python("import sys\nsys.stdout.write('x' * 1000000)\nprint('tail', file=sys.stderr)",
                                     limits);
  EXPECT_EQ(r.status, SandboxStatus::kPassed) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, std::string(1000, 'x'));
  EXPECT_TRUE(r.stdout_truncated);
  EXPECT_EQ(r.stderr_text, "tail\n");
  EXPECT_FALSE(r.stderr_truncated);
}

TEST(Sandbox, BadInterpreterOrLimitsThrow) {
  SandboxLimits limits;
  limits.python = "fbt-no-such-python";
  EXPECT_THROW(run_python("pass", limits), Error);
  limits.python = "/nonexistent/python3";
  EXPECT_THROW(run_python("pass", limits), Error);
  SandboxLimits bad;
  bad.timeout_seconds = 0;
  EXPECT_THROW(run_python("pass", bad), Error);
  bad = SandboxLimits{};
  bad.memory_bytes = -1;
  EXPECT_THROW(run_python("pass", bad), Error);
}

}  // namespace
}  // namespace fbt
