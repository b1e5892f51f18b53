// Starts bwrap as a limited child process: fork + exec, uid drop, rlimits, captured output, and
// the kill and reap of the whole sandbox through a pidfd of its init (include/fbt/eval/sandbox_process.h).
#include "fbt/eval/sandbox_process.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "fbt/eval/bwrap.h"

#ifndef P_PIDFD
#define P_PIDFD 3  // waitid on a pidfd (Linux 5.4); glibc < 2.36 lacks the constant
#endif

namespace fbt {
namespace {
using Clock = std::chrono::steady_clock;

/// Our descriptors are all at or above this, so the child's dup2 onto 0..5 cannot clobber the
/// source of another dup2 (0..2 could be anything if the harness closed them).
constexpr int kFirstFreeFd = 6;

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), "sandbox: " + what);
}

/// An owned file descriptor, closed on destruction or reset().
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

/// `fd` moved to a close-on-exec descriptor >= kFirstFreeFd.
Fd high_fd(Fd fd) {
  if (fd.get() >= kFirstFreeFd) return fd;
  const int moved = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, kFirstFreeFd);
  if (moved < 0) throw_errno("fcntl(F_DUPFD_CLOEXEC)");
  return Fd(moved);
}

struct Pipe {
  Fd read, write;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe2");
  Fd read(fds[0]), write(fds[1]);
  return {high_fd(std::move(read)), high_fd(std::move(write))};
}

/// An anonymous in-memory file holding `text`, its offset at 0 (bwrap reads it from there).
Fd memory_file(const std::string& text) {
  const int fd = static_cast<int>(::syscall(SYS_memfd_create, "fbt-program", MFD_CLOEXEC));
  if (fd < 0) throw_errno("memfd_create");
  Fd file = high_fd(Fd(fd));
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(file.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno("write to memfd");
    done += static_cast<size_t>(n);
  }
  if (::lseek(file.get(), 0, SEEK_SET) != 0) throw_errno("lseek");
  return file;
}

/// Why the child could not start bwrap, sent over the report pipe (fd 3) before it exits.
enum class ChildStep : int { kSetsid, kSignals, kStdio, kChdir, kSetUser, kDeathSignal, kRlimit, kNoGate, kExec };
constexpr const char* kChildStepNames[] = {"setsid",
                                           "signal reset",
                                           "descriptor setup",
                                           "chdir",
                                           "dropping to the sandbox uid",
                                           "PR_SET_PDEATHSIG",
                                           "setrlimit",
                                           "gate",
                                           "exec"};
struct ChildReport {
  ChildStep step;
  int error;
};

/// Everything the child needs, prepared before fork: after fork in a multi-threaded program only
/// async-signal-safe calls are allowed, so the child allocates nothing and calls only syscalls.
struct ChildPlan {
  int stdout_fd = -1, stderr_fd = -1, report_fd = -1, program_fd = -1, info_fd = -1;
  pid_t parent = 0;
  std::optional<uint32_t> uid;
  std::vector<std::pair<decltype(RLIMIT_CPU), rlim_t>> limits;  // the type setrlimit takes (an enum in glibc)
  std::vector<std::vector<char*>> argvs;                        // null-terminated
  std::vector<const char*> gates;
  char* const* envp = nullptr;
  int max_fd = 1024;  // bound for the close-one-by-one fallback
};

/// Closes every descriptor >= `first` (close_range where the kernel has it, else one by one).
void close_from(int first, int max_fd) {
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, first, ~0U, 0) == 0) return;
#endif
  for (int fd = first; fd < max_fd; ++fd) ::close(fd);
}

/// In the child: reports `step` and errno on fd 3 and exits.
[[noreturn]] void fail(ChildStep step) {
  const ChildReport report{step, errno};
  [[maybe_unused]] const ssize_t n = ::write(3, &report, sizeof report);
  ::_exit(127);
}

[[noreturn]] void child_main(const ChildPlan& plan) {
  if (::dup2(plan.report_fd, 3) < 0 || ::fcntl(3, F_SETFD, FD_CLOEXEC) != 0) ::_exit(127);
  if (::setsid() < 0) fail(ChildStep::kSetsid);

  sigset_t none;
  sigemptyset(&none);
  if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) fail(ChildStep::kSignals);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);  // fails harmlessly for KILL/STOP

  // dup2 clears close-on-exec on the copies: bwrap inherits exactly 0, 1, 2, 4 and 5.
  const int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd < 0 || ::dup2(null_fd, 0) < 0 || ::dup2(plan.stdout_fd, 1) < 0 || ::dup2(plan.stderr_fd, 2) < 0 ||
      ::dup2(plan.program_fd, kBwrapProgramFd) < 0 || ::dup2(plan.info_fd, kBwrapInfoFd) < 0)
    fail(ChildStep::kStdio);
  close_from(kBwrapInfoFd + 1, plan.max_fd);

  if (::chdir("/") != 0) fail(ChildStep::kChdir);
  if (plan.uid && (::setgroups(0, nullptr) != 0 || ::setgid(*plan.uid) != 0 || ::setuid(*plan.uid) != 0))
    fail(ChildStep::kSetUser);
  // After setuid, which clears it; a parent that died before this leaves us reparented.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(ChildStep::kDeathSignal);
  if (::getppid() != plan.parent) ::_exit(127);
  // After setuid: RLIMIT_NPROC set while still root would make execve fail with EAGAIN whenever
  // the sandbox uid already has that many processes (Linux checks it again at exec).
  for (const auto& [resource, value] : plan.limits) {
    const rlimit lim{value, resource == RLIMIT_CPU ? value + 1 : value};
    if (::setrlimit(resource, &lim) != 0) fail(ChildStep::kRlimit);
  }
  int gate_error = ENOENT;
  for (size_t i = 0; i < plan.argvs.size(); ++i) {
    if (::access(plan.gates[i], X_OK) != 0) {
      if (errno != ENOENT) gate_error = errno;  // like execvp: report EACCES over "not found"
      continue;
    }
    ::execve(plan.argvs[i][0], plan.argvs[i].data(), plan.envp);
    fail(ChildStep::kExec);
  }
  errno = gate_error;
  fail(ChildStep::kNoGate);
}

/// One captured output stream: appends what the child writes, up to `cap` bytes.
struct Capture {
  int fd;
  std::string* text;
  bool* truncated;
  size_t cap;
  bool open = true;

  /// Reads everything available now (the fd is non-blocking); closes at end of file.
  void read_available() {
    char buf[1 << 16];
    while (open) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      if (n <= 0) {
        open = false;
        return;
      }
      const size_t keep = std::min(static_cast<size_t>(n), cap - text->size());
      text->append(buf, keep);
      if (keep < static_cast<size_t>(n)) *truncated = true;
    }
  }
};

/// Waits up to `timeout` for output on the open captures and reads it.
void pump(std::vector<Capture>& captures, Clock::duration timeout) {
  std::vector<pollfd> fds;
  for (const Capture& c : captures)
    if (c.open) fds.push_back({c.fd, POLLIN, 0});
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(timeout).count();
  if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(ms, 0))) < 0 && errno != EINTR)
    throw_errno("poll");
  for (Capture& c : captures) c.read_available();
}

/// Whether child `pid` has exited, leaving it unreaped.
bool exited(pid_t pid) {
  siginfo_t info{};
  // WNOWAIT: the zombie keeps its pid, and so its process group id, reserved until we reap it.
  while (::waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0)
    if (errno != EINTR) throw_errno("waitid");
  return info.si_pid == pid;
}

/// The parent pid of `pid` from /proc, or 0.
pid_t parent_of(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line) || line.rfind(')') == std::string::npos) return 0;
  std::istringstream fields(line.substr(line.rfind(')') + 2));  // after "pid (comm) "
  char state;
  pid_t ppid = 0;
  fields >> state >> ppid;
  return ppid;
}

/// Makes this process the reaper of its orphaned descendants, so that the namespace's init,
/// orphaned when bwrap exits before it, becomes our child (reaped in RunningSandbox::kill_and_reap)
/// instead of init's, which in a container may reap late or never.
void become_subreaper() {
  static const int done = ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  (void)done;
}

/// A started run: bwrap (`pid`, leader of process group `pid`) and, once bwrap has reported it,
/// a pidfd of the namespace's init. kill_and_reap() kills and reaps them; the destructor does the
/// same if an exception leaves run_sandbox_process early, so no run outlives its call.
class RunningSandbox {
 public:
  explicit RunningSandbox(pid_t pid) : pid_(pid) {}
  ~RunningSandbox() {
    if (!reaped_) kill_and_reap();
  }
  RunningSandbox(const RunningSandbox&) = delete;
  RunningSandbox& operator=(const RunningSandbox&) = delete;

  bool has_init() const { return init_.get() >= 0; }

  /// Opens a pidfd of the namespace's init `init`. bwrap writes the pid right after creating the
  /// process, which stays its child (or, once bwrap is gone, ours) until reaped; the parent check
  /// makes sure the pid was not recycled in between (then the sandbox is already gone).
  void adopt_init(pid_t init) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, init, 0));
    if (fd < 0 && errno == ESRCH) return;
    if (fd < 0) throw_errno("pidfd_open (Linux >= 5.3 is needed)");
    Fd pidfd(fd);
    const pid_t parent = parent_of(init);
    if (parent == pid_ || parent == ::getpid()) init_ = std::move(pidfd);
  }

  /// Kills the namespace (SIGKILL to its init: the kernel kills every process in it before the
  /// init itself ends) and bwrap, reaps bwrap, waits for the init to end and reaps it if it was
  /// orphaned to us. Returns bwrap's wait status. Call it while bwrap is still unreaped (see
  /// exited), so that its process group id cannot have been reused.
  int kill_and_reap() {
    if (has_init()) ::syscall(SYS_pidfd_send_signal, init_.get(), SIGKILL, nullptr, 0);
    ::killpg(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {}
    reaped_ = true;
    while (::waitpid(-pid_, nullptr, 0) > 0 || errno == EINTR) {}
    if (has_init()) {
      // A process stuck in an uninterruptible sleep can delay the end; do not wait for ever.
      pollfd p{init_.get(), POLLIN, 0};
      int ready;
      while ((ready = ::poll(&p, 1, 10000)) < 0 && errno == EINTR) {}
      siginfo_t info{};
      while (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(init_.get()), &info,
                      WEXITED | (ready > 0 ? 0 : WNOHANG)) != 0 &&
             errno == EINTR) {}
    }
    return status;
  }

 private:
  pid_t pid_;
  Fd init_;
  bool reaped_ = false;
};

/// The child's plan for `command` (descriptors are filled in by the caller); env, argvs and envp
/// receive the strings and pointers the plan points into and must outlive it.
ChildPlan make_plan(const SandboxCommand& command, const SandboxLimits& limits, std::vector<std::string>& env,
                    std::vector<std::vector<std::string>>& argvs, std::vector<char*>& envp) {
  ChildPlan plan;
  plan.parent = ::getpid();
  plan.uid = command.uid;
  plan.limits = {{RLIMIT_CPU, static_cast<rlim_t>(limits.cpu_seconds)},
                 {RLIMIT_AS, static_cast<rlim_t>(limits.memory_bytes)},
                 {RLIMIT_FSIZE, static_cast<rlim_t>(limits.file_size_bytes)},
                 {RLIMIT_NPROC, static_cast<rlim_t>(limits.max_processes)},
                 {RLIMIT_CORE, 0}};
  env = command.env;
  argvs = command.argvs;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  plan.envp = envp.data();
  for (auto& argv : argvs) {
    std::vector<char*> args;
    for (std::string& arg : argv) args.push_back(arg.data());
    args.push_back(nullptr);
    plan.argvs.push_back(std::move(args));
  }
  for (const std::string& gate : command.gates) plan.gates.push_back(gate.c_str());
  const long open_max = ::sysconf(_SC_OPEN_MAX);
  plan.max_fd = static_cast<int>(open_max > 0 ? std::min<long>(open_max, 1 << 20) : 1024);
  return plan;
}

}  // namespace

SandboxProcessResult run_sandbox_process(const SandboxCommand& command, const SandboxLimits& limits) {
  become_subreaper();
  Pipe out = make_pipe(), err = make_pipe(), report = make_pipe(), info = make_pipe();
  const Fd program = memory_file(command.program);
  std::vector<std::string> env;
  std::vector<std::vector<std::string>> argvs;
  std::vector<char*> envp;
  ChildPlan plan = make_plan(command, limits, env, argvs, envp);
  plan.stdout_fd = out.write.get();
  plan.stderr_fd = err.write.get();
  plan.report_fd = report.write.get();
  plan.program_fd = program.get();
  plan.info_fd = info.write.get();

  const Clock::time_point start = Clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw_errno("fork");
  if (pid == 0) child_main(plan);
  RunningSandbox sandbox(pid);
  for (Fd* end : {&out.write, &err.write, &report.write, &info.write}) end->reset();

  // End of file on the report pipe (closed on exec) means bwrap is running.
  SandboxProcessResult result;
  ChildReport child_report{};
  ssize_t got;
  while ((got = ::read(report.read.get(), &child_report, sizeof child_report)) < 0 && errno == EINTR) {}
  if (got > 0) {
    sandbox.kill_and_reap();
    if (child_report.step != ChildStep::kNoGate && child_report.step != ChildStep::kExec)
      throw std::system_error(child_report.error, std::generic_category(),
                              std::string("sandbox: child ") + kChildStepNames[static_cast<int>(child_report.step)]);
    result.not_started = child_report.step == ChildStep::kExec ? SandboxProcessResult::NotStarted::kExec
                                                               : SandboxProcessResult::NotStarted::kNoGate;
    result.error = child_report.error;
    return result;
  }

  std::string info_text;
  bool info_truncated = false;
  const auto cap = static_cast<size_t>(limits.max_output_bytes);
  std::vector<Capture> captures = {{out.read.get(), &result.stdout_text, &result.stdout_truncated, cap},
                                   {err.read.get(), &result.stderr_text, &result.stderr_truncated, cap},
                                   {info.read.get(), &info_text, &info_truncated, 4096}};
  for (const Capture& c : captures)
    if (::fcntl(c.fd, F_SETFL, O_NONBLOCK) != 0) throw_errno("fcntl(O_NONBLOCK)");
  const auto adopt = [&] {
    if (result.sandboxed) return;
    if (const auto init = bwrap_child_pid(info_text)) {
      result.sandboxed = true;
      sandbox.adopt_init(*init);
    }
  };
  const auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits.timeout_seconds));
  constexpr auto kTick = std::chrono::milliseconds(10);  // how often we look for the exit
  while (!exited(pid)) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      result.timed_out = true;
      break;
    }
    pump(captures, std::min<Clock::duration>(deadline - now, kTick));
    adopt();
  }
  captures[2].read_available();  // all bwrap wrote is there once it has exited
  adopt();
  result.wait_status = sandbox.kill_and_reap();
  result.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();

  // Everything that held the pipes is dead now; the grace period only bounds a pathological case.
  const Clock::time_point drain_end = Clock::now() + std::chrono::milliseconds(500);
  while (std::any_of(captures.begin(), captures.end() - 1, [](const Capture& c) { return c.open; }) &&
         Clock::now() < drain_end)
    pump(captures, drain_end - Clock::now());
  return result;
}

}  // namespace fbt
