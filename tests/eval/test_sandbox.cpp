// The Python sandbox: exit statuses, timeouts, rlimits, fork bombs, working directory, descriptors,
// and the escapes bubblewrap contains: setsid'd grandchildren, host files (write and read), the
// network, a killed harness; and the refusal to run without a working bwrap.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fbt/eval/bwrap.h"
#include "fbt/eval/sandbox.h"
#include "fbt/util/error.h"
#include "sandbox_helpers.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;
using testing::children_of_this_process;
using testing::processes_in_pid_namespace;
using testing::processes_with_marker;

/// run_python, also timing the whole call from outside.
SandboxResult run_timed(const std::string& program, const SandboxLimits& limits, double* call_seconds) {
  const auto start = std::chrono::steady_clock::now();
  SandboxResult r = run_python(program, limits);
  *call_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

/// Python that prints the program's PID namespace ("pid:[N]") as its first stdout line.
constexpr const char* kPrintPidNamespace = "import os\nprint(os.readlink('/proc/self/ns/pid'), flush=True)\n";

/// The first stdout line of a run.
std::string first_line(const SandboxResult& r) {
  std::istringstream out(r.stdout_text);
  std::string line;
  std::getline(out, line);
  return line;
}

/// A name no other process of this machine uses: "fbt-escape-PID-TEST".
std::string unique_marker() {
  return "fbt-escape-" + std::to_string(::getpid()) + "-" +
         ::testing::UnitTest::GetInstance()->current_test_info()->name();
}

/// `text` as a Python string literal (no quotes or backslashes expected in test paths).
std::string py(const std::string& text) { return "'" + text + "'"; }

TEST(Sandbox, PassingProgramPasses) {
  REQUIRE_SANDBOX();
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
  REQUIRE_SANDBOX();
  const SandboxResult r = run_python("assert False, 'wrong answer'");
  EXPECT_EQ(r.status, SandboxStatus::kFailed);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.stderr_text.find("AssertionError: wrong answer"), std::string::npos) << r.stderr_text;
  EXPECT_EQ(run_python("import sys; sys.exit(3)").exit_code, 3);
}

TEST(Sandbox, InfiniteLoopIsKilledAtTheTimeout) {
  REQUIRE_SANDBOX();
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
  REQUIRE_SANDBOX();
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
  REQUIRE_SANDBOX();
  const SandboxResult r = run_python("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)");
  EXPECT_EQ(r.status, SandboxStatus::kCrashed);
  EXPECT_EQ(r.signal, SIGSEGV);
  EXPECT_EQ(r.exit_code, -1);
}

TEST(Sandbox, MemoryHogFailsUnderTheAddressSpaceLimit) {
  REQUIRE_SANDBOX();
  SandboxLimits limits;
  limits.memory_bytes = 256 << 20;
  const SandboxResult r = run_python("x = bytearray(2 * 1024**3)\nprint('allocated')", limits);
  EXPECT_EQ(r.status, SandboxStatus::kFailed);
  EXPECT_NE(r.stderr_text.find("MemoryError"), std::string::npos) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "");
  EXPECT_EQ(run_python("x = bytearray(64 * 1024**2)", limits).status, SandboxStatus::kPassed);
}

TEST(Sandbox, ForkBombReturnsInTimeAndLeavesNoProcess) {
  REQUIRE_SANDBOX();
  SandboxLimits limits;
  limits.timeout_seconds = 3.0;
  limits.uid = 65533;  // not "nobody": the bomb's processes would eat the RLIMIT_NPROC budget of
                       // sandbox runs in tests that ctest -j runs at the same time
  // The plain bomb dies of its first failed fork; the stubborn one keeps trying until the timeout.
  for (const std::string bomb :
       {"while True: os.fork()\n", "while True:\n  try: os.fork()\n  except OSError: pass\n"}) {
    double call = 0;
    const SandboxResult r = run_timed(kPrintPidNamespace + bomb, limits, &call);
    EXPECT_NE(r.status, SandboxStatus::kPassed);
    EXPECT_LT(call, limits.timeout_seconds + 1.5) << bomb;
    const std::string ns = first_line(r);
    ASSERT_EQ(ns.rfind("pid:[", 0), 0u) << r.stdout_text << r.stderr_text;
    EXPECT_EQ(processes_in_pid_namespace(ns), 0) << bomb;
    EXPECT_EQ(children_of_this_process(), 0) << bomb;  // nothing left unreaped either
  }
}

TEST(Sandbox, BackgroundChildIsKilledWhenTheProgramExits) {
  REQUIRE_SANDBOX();
  double call = 0;
  const SandboxResult r =
      run_timed(std::string(kPrintPidNamespace) + "if os.fork() == 0:\n  import time\n  time.sleep(60)\n", {}, &call);
  EXPECT_EQ(r.status, SandboxStatus::kPassed) << r.stderr_text;
  EXPECT_LT(call, 3.0);  // not waiting for the child's copy of stdout to close
  const std::string ns = first_line(r);
  ASSERT_EQ(ns.rfind("pid:[", 0), 0u) << r.stdout_text;
  EXPECT_NE(ns, fs::read_symlink("/proc/self/ns/pid").string());  // a PID namespace of its own
  EXPECT_EQ(processes_in_pid_namespace(ns), 0);
  EXPECT_EQ(children_of_this_process(), 0);
}

// Escape 1: a grandchild that leaves the session (fork, setsid, fork) and would write a marker
// file later. It is killed with the PID namespace when the program exits.
TEST(Sandbox, SetsidGrandchildDiesWithTheRun) {
  REQUIRE_SANDBOX();
  testing::TempDir tmp;
  ASSERT_EQ(::chmod(tmp.path.c_str(), 0777), 0);  // the sandbox uid could write here if it saw it
  const std::string marker = unique_marker();
  const fs::path marker_file = tmp.path / "escaped";
  const std::string program = std::string(kPrintPidNamespace) +
                              "import time\n"
                              "if os.fork() == 0:\n"
                              "  os.setsid()\n"
                              "  if os.fork() == 0:\n"
                              "    os.execv('/bin/sh', [" +
                              py(marker) + ", '-c', 'sleep 6; echo escaped > " + marker_file.string() +
                              "'])\n"
                              "  os._exit(0)\n"
                              "os.wait()\n"
                              "def running():\n"
                              "  for p in filter(str.isdigit, os.listdir('/proc')):\n"
                              "    try:\n"
                              "      if open('/proc/%s/cmdline' % p, 'rb').read().startswith(" +
                              py(marker) +
                              ".encode()): return True\n"
                              "    except OSError: pass\n"
                              "for _ in range(500):\n"
                              "  if running(): print('grandchild running', flush=True); break\n"
                              "  time.sleep(0.01)\n";
  double call = 0;
  const SandboxResult r = run_timed(program, {}, &call);
  EXPECT_LT(call, 4.5);  // killed, not waited for
  EXPECT_EQ(r.status, SandboxStatus::kPassed) << r.stderr_text;
  EXPECT_NE(r.stdout_text.find("grandchild running"), std::string::npos) << r.stdout_text << r.stderr_text;
  EXPECT_EQ(processes_with_marker(marker), 0);
  EXPECT_EQ(processes_in_pid_namespace(first_line(r)), 0);
  EXPECT_EQ(children_of_this_process(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(6500));  // longer than the grandchild's sleep
  EXPECT_FALSE(fs::exists(marker_file));
  EXPECT_EQ(processes_with_marker(marker), 0);
}

// Escape 2: writing anywhere but the private work dir fails, and nothing appears on the host.
TEST(Sandbox, CannotWriteOutsideTheWorkDir) {
  REQUIRE_SANDBOX();
  testing::TempDir tmp;
  ASSERT_EQ(::chmod(tmp.path.c_str(), 0777), 0);  // writable by the sandbox uid, were it visible
  const std::string name = unique_marker();
  const std::vector<std::string> outside = {(tmp.path / name).string(),
                                            (fs::current_path() / name).string(),
                                            "/var/tmp/" + name,
                                            "/dev/shm/" + name,
                                            "/dev/" + name,
                                            "/" + name,
                                            "/usr/" + name,
                                            "/etc/" + name,
                                            "/sandbox/" + name};
  std::string paths;
  for (const std::string& p : outside) paths += py(p) + ", ";
  const SandboxResult r = run_python("import os\nfor p in [" + paths +
                                     "]:\n"
                                     "  try:\n    open(p, 'w').write('escaped'); print(p, 'written')\n"
                                     "  except OSError as e: print(p, type(e).__name__)\n"
                                     "open('/tmp/" +
                                     name + "', 'w').write('private')\nprint(os.path.exists('/tmp/" + name + "'))\n");
  EXPECT_EQ(r.status, SandboxStatus::kPassed) << r.stderr_text;
  EXPECT_EQ(r.stdout_text.find("written"), std::string::npos) << r.stdout_text;
  EXPECT_NE(r.stdout_text.find("True"), std::string::npos) << r.stdout_text;  // its /tmp is its own
  for (const std::string& p : outside) EXPECT_FALSE(fs::exists(p)) << p;
  EXPECT_FALSE(fs::exists(fs::temp_directory_path() / name));
  EXPECT_FALSE(fs::exists("/tmp/" + name));
}

// Escape 3: world-readable files of the host (in a temp dir, and next to the test's working
// directory) cannot be read; the root holds only system dirs.
TEST(Sandbox, CannotReadHostFiles) {
  REQUIRE_SANDBOX();
  testing::TempDir tmp;
  const std::string secret = "secret-" + unique_marker();
  const fs::path near_cwd = fs::current_path() / unique_marker();
  fs::create_directories(near_cwd);
  std::vector<std::string> files;
  for (const fs::path& dir : {tmp.path, near_cwd}) {
    const fs::path file = dir / "secret.txt";
    std::ofstream(file) << secret << "\n";
    ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
    ASSERT_EQ(::chmod(file.c_str(), 0644), 0);
    files.push_back(file.string());
  }
  const SandboxResult r =
      run_python("import os\nfor p in [" + py(files[0]) + ", '/proc/1/root" + files[0] + "', " + py(files[1]) +
                 "]:\n"
                 "  try: print(open(p).read())\n"
                 "  except OSError as e: print(type(e).__name__)\n"
                 "print(sorted(os.listdir('/')))\n"
                 "print([p for p in ('/home', '/root', '/var', '/run', '/sys', '/work', " +
                 py(fs::current_path().string()) + ") if os.path.exists(p)])\n");
  fs::remove_all(near_cwd);
  EXPECT_EQ(r.status, SandboxStatus::kPassed) << r.stderr_text;
  EXPECT_EQ(r.stdout_text.find(secret), std::string::npos) << r.stdout_text;
  EXPECT_EQ(r.stdout_text.rfind("FileNotFoundError\nFileNotFoundError\nFileNotFoundError\n", 0), 0u) << r.stdout_text;
  EXPECT_NE(r.stdout_text.find("\n[]\n"), std::string::npos) << r.stdout_text;  // none of those exists
  // The root: the system directories (as binds or usrmerge links) and the sandbox's own.
  std::istringstream lines(r.stdout_text);
  std::string line, root;
  while (std::getline(lines, line))
    if (line.rfind("['", 0) == 0) root = line;
  for (const char* own : {"'dev'", "'etc'", "'proc'", "'sandbox'", "'tmp'", "'usr'"})
    EXPECT_NE(root.find(own), std::string::npos) << own << " in " << root;
  for (const char* hidden : {"'home'", "'root'", "'var'", "'run'", "'sys'", "'work'", "'mnt'", "'opt'", "'srv'"})
    EXPECT_EQ(root.find(hidden), std::string::npos) << hidden << " in " << root;
}

// Escape 4: the network. A TCP listener of the test on the host's loopback receives nothing.
TEST(Sandbox, CannotConnectToALoopbackListener) {
  REQUIRE_SANDBOX();
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  const SandboxResult r = run_python(
      "import socket\nprint([name for _, name in socket.if_nameindex()])\n"
      "try:\n"
      "  s = socket.create_connection(('127.0.0.1', " +
      port +
      "), timeout=3)\n"
      "  s.sendall(b'hello from sandbox'); print('connected')\n"
      "except OSError as e: print(type(e).__name__)\n");
  EXPECT_EQ(r.status, SandboxStatus::kPassed) << r.stderr_text;
  EXPECT_EQ(first_line(r), "['lo']");  // its own loopback only
  EXPECT_EQ(r.stdout_text.find("connected"), std::string::npos) << r.stdout_text;
  EXPECT_EQ(::accept(listener, nullptr, nullptr), -1);
  EXPECT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << std::strerror(errno);
  ::close(listener);
}

// Escape 6: a 20 GB allocation fails under the default address-space limit, quickly.
TEST(Sandbox, TwentyGigabyteAllocationFails) {
  REQUIRE_SANDBOX();
  double call = 0;
  const SandboxResult r = run_timed("x = bytearray(20 * 1024**3)\nprint('allocated')", {}, &call);
  EXPECT_NE(r.status, SandboxStatus::kPassed);
  EXPECT_NE(r.stderr_text.find("MemoryError"), std::string::npos) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "");
  EXPECT_LT(call, 10.0);
}

// The program has no capability, runs as the sandbox uid (when we are root) and cannot make
// user namespaces of its own (bwrap --disable-userns).
TEST(Sandbox, RunsUnprivilegedWithoutNestedUserNamespaces) {
  REQUIRE_SANDBOX();
  const SandboxResult r = run_python(
      "import ctypes, os\n"
      "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0])\n"
      "print(os.getuid(), os.getgid(), os.getgroups())\n"
      "print(ctypes.CDLL(None, use_errno=True).unshare(0x10000000))\n");  // CLONE_NEWUSER
  ASSERT_EQ(r.status, SandboxStatus::kPassed) << r.stderr_text;
  const std::string uid = ::geteuid() == 0 ? "65534" : std::to_string(::geteuid());
  const std::string gid = ::geteuid() == 0 ? "65534" : std::to_string(::getegid());
  EXPECT_EQ(r.stdout_text, "0000000000000000\n" + uid + " " + gid + " []\n-1\n");
}

// The harness dies (SIGKILL) in the middle of a run: the sandbox and everything in it dies too.
TEST(Sandbox, KilledHarnessTakesTheSandboxAlong) {
  REQUIRE_SANDBOX();
  const std::string marker = unique_marker();
  const std::string program =
      "import os\nif os.fork() == 0:\n  os.setsid()\n"
      "os.execv('/bin/sh', [" +
      py(marker) + ", '-c', 'sleep 30'])\n";
  const pid_t harness = ::fork();
  ASSERT_GE(harness, 0);
  if (harness == 0) {
    SandboxLimits limits;
    limits.timeout_seconds = 60;
    try {
      run_python(program, limits);
    } catch (...) {}
    ::_exit(0);
  }
  // True as soon as one look sees `done` (a second look could catch a transient fork and miss it).
  const auto until = [](auto done, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      if (done()) return true;
      if (std::chrono::steady_clock::now() >= end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  const bool started = until([&] { return processes_with_marker(marker) == 2; }, 30);
  ::kill(harness, SIGKILL);
  ::waitpid(harness, nullptr, 0);
  ASSERT_TRUE(started) << "the program did not start";
  EXPECT_TRUE(until([&] { return processes_with_marker(marker) == 0; }, 5)) << processes_with_marker(marker);
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {}  // an init orphaned to us, if any
}

TEST(Sandbox, FileSizeLimit) {
  REQUIRE_SANDBOX();
  SandboxLimits limits;
  limits.file_size_bytes = 1 << 20;
  const SandboxResult big = run_python("open('big', 'wb').write(b'x' * (2 << 20))", limits);
  EXPECT_EQ(big.status, SandboxStatus::kFailed);
  EXPECT_NE(big.stderr_text.find("File too large"), std::string::npos) << big.stderr_text;
  EXPECT_EQ(run_python("open('small', 'wb').write(b'x' * (512 << 10))", limits).status, SandboxStatus::kPassed);
}

TEST(Sandbox, FreshEmptyWorkingDirectoryIsRemoved) {
  REQUIRE_SANDBOX();
  const std::string name = unique_marker();
  const std::string program = "import os\nprint(os.getcwd())\nprint(os.listdir('.'))\nopen(" + py(name) +
                              ", 'w').write('data')\n"
                              "print(os.environ['HOME'] == os.getcwd() == os.environ['TMPDIR'])\nos.makedirs('a/b')\n";
  const SandboxResult r = run_python(program);
  ASSERT_EQ(r.status, SandboxStatus::kPassed) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, std::string(kSandboxWorkDir) + "\n[]\nTrue\n");
  EXPECT_FALSE(fs::exists(fs::path(kSandboxWorkDir) / name));  // a private tmpfs, not the host's /tmp
  EXPECT_FALSE(fs::exists(fs::current_path() / name));
  const SandboxResult again = run_python(program);  // a new, empty one each run
  EXPECT_EQ(again.stdout_text, r.stdout_text) << again.stderr_text;
}

TEST(Sandbox, WorkDirIsASizeCappedTmpfs) {
  REQUIRE_SANDBOX();
  SandboxLimits limits;
  limits.work_dir_bytes = 4 << 20;
  const SandboxResult r = run_python(
      "import os\nfor i in range(4):\n"
      "  try: open('f%d' % i, 'wb').write(b'x' * (1500 << 10)); print('ok')\n"
      "  except OSError as e: print(os.strerror(e.errno))\n",
      limits);
  EXPECT_EQ(r.status, SandboxStatus::kPassed) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "ok\nok\nNo space left on device\nNo space left on device\n");
}

TEST(Sandbox, ParentDescriptorsAreNotInheritedAndStdinIsEmpty) {
  REQUIRE_SANDBOX();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);  // deliberately without O_CLOEXEC
  const SandboxResult r =
      run_python("import os, sys\nfor fd in (" + std::to_string(fds[0]) + ", " + std::to_string(fds[1]) +
                 "):\n  try:\n    os.fstat(fd); print('open')\n"
                 "  except OSError:\n    print('closed')\nprint(repr(sys.stdin.read()))\n"
                 "print(len(os.listdir('/proc/self/fd')))\n");  // 0, 1, 2 and listdir's own
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_EQ(r.status, SandboxStatus::kPassed) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "closed\nclosed\n''\n4\n");
}

TEST(Sandbox, OutputIsCappedAndTheRestDrained) {
  REQUIRE_SANDBOX();
  SandboxLimits limits;
  limits.max_output_bytes = 1000;
  const SandboxResult r =
      run_python("import sys\nsys.stdout.write('x' * 1000000)\nprint('tail', file=sys.stderr)", limits);
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
  bad = SandboxLimits{};
  bad.work_dir_bytes = 0;
  EXPECT_THROW(run_python("pass", bad), Error);
}

/// The message of the fbt::Error that run_python(program, limits) throws ("" if none).
std::string refusal(const std::string& program, const SandboxLimits& limits) {
  try {
    run_python(program, limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Sandbox, MissingBwrapIsRefused) {
  SandboxLimits limits;
  limits.bwrap = "fbt-no-such-bwrap";
  const std::string why = refusal("pass", limits);
  EXPECT_NE(why.find("bubblewrap"), std::string::npos) << why;
  EXPECT_NE(why.find("apt-get install bubblewrap"), std::string::npos) << why;
  EXPECT_THROW(check_sandbox(limits), Error);
}

// A bwrap that cannot create namespaces (as in a locked-down container): the program is never
// run, sandboxed or not, and the error says why and what bwrap needs. The answer is cached.
TEST(Sandbox, UnusableBwrapIsRefusedNotBypassed) {
  testing::TempDir tmp;
  ASSERT_EQ(::chmod(tmp.path.c_str(), 0777), 0);
  const fs::path fake = tmp.path / "bwrap", calls = tmp.path / "calls", ran = tmp.path / "ran";
  std::ofstream(fake) << "#!/bin/sh\necho called >> " << calls.string()
                      << "\necho 'bwrap: Creating new namespace failed: Operation not permitted' >&2\nexit 1\n";
  ASSERT_EQ(::chmod(fake.c_str(), 0755), 0);
  SandboxLimits limits;
  limits.bwrap = fake.string();
  const std::string program = "open(" + py(ran.string()) + ", 'w').write('ran')\n";
  const std::string why = refusal(program, limits);
  EXPECT_NE(why.find("Creating new namespace failed"), std::string::npos) << why;
  EXPECT_NE(why.find("user namespaces"), std::string::npos) << why;
  EXPECT_NE(why.find("never without it"), std::string::npos) << why;
  EXPECT_EQ(refusal(program, limits), why);
  EXPECT_THROW(check_sandbox(limits), Error);
  EXPECT_FALSE(fs::exists(ran));
  std::ifstream in(calls);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) ++n;
  EXPECT_EQ(n, 1);  // tried once, then the cached answer
}

}  // namespace
}  // namespace fbt
