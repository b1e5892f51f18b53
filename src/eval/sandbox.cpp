// Runs Python programs in a limited child process: fork + exec, rlimits, process-group kill,
// temp working directory, captured output (see include/fbt/eval/sandbox.h).
#include "fbt/eval/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "fbt/util/error.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

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

struct Pipe {
  Fd read, write;
};

/// A close-on-exec pipe whose ends are both >= 4, so the child's dup2 onto 0..3 cannot clobber
/// the source of another dup2 (fd 3 could be any pipe end; 0..2 too if the harness closed them).
Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe2");
  Pipe p{Fd(fds[0]), Fd(fds[1])};
  for (Fd* end : {&p.read, &p.write}) {
    if (end->get() >= 4) continue;
    const int moved = ::fcntl(end->get(), F_DUPFD_CLOEXEC, 4);
    if (moved < 0) throw_errno("fcntl(F_DUPFD_CLOEXEC)");
    *end = Fd(moved);
  }
  return p;
}

/// Removes `path` and everything under it, first making directories writable where a
/// non-root program has taken that away. Best effort: never throws.
void remove_tree(const fs::path& path) noexcept {
  std::error_code ec;
  if (fs::remove_all(path, ec) != static_cast<std::uintmax_t>(-1) && !ec) return;
  for (auto it = fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code ignored;
    if (it->is_directory(ignored)) fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ignored);
  }
  fs::remove_all(path, ec);
}

/// TMP/fbt_sandbox_XXXXXX/ holding program.py (read-only) and work/ (the program's empty working
/// directory, owned by `owner` when given); removed with everything in it on destruction.
class RunDir {
 public:
  RunDir(const std::string& program, std::optional<uint32_t> owner) {
    const fs::path tmp = fs::temp_directory_path();
    std::string pattern = (tmp / "fbt_sandbox_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw_errno("mkdtemp in " + tmp.string());
    root = pattern;
    program_file = root / "program.py";
    work = root / "work";
    // The sandbox user may enter root (to open program.py by name) but not list or write it.
    if (::chmod(root.c_str(), 0711) != 0) throw_errno("chmod " + root.string());
    std::ofstream file(program_file, std::ios::binary);
    file << program;
    file.close();
    if (!file)
      throw std::system_error(std::make_error_code(std::errc::io_error), "sandbox: write " + program_file.string());
    if (::chmod(program_file.c_str(), 0444) != 0) throw_errno("chmod " + program_file.string());
    if (::mkdir(work.c_str(), 0700) != 0) throw_errno("mkdir " + work.string());
    if (owner && ::chown(work.c_str(), *owner, *owner) != 0) throw_errno("chown " + work.string());
  }
  ~RunDir() { remove_tree(root); }
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  fs::path root, program_file, work;
};

/// Where `python` may be: itself if it holds a '/', else every executable `DIR/python` for DIR in
/// $PATH, in order. Throws fbt::Error naming `python` if there is none.
std::vector<std::string> interpreter_candidates(const std::string& python) {
  if (python.find('/') != std::string::npos) return {python};
  const char* env_path = std::getenv("PATH");
  const std::string path = env_path ? env_path : "/usr/local/bin:/usr/bin:/bin";
  std::vector<std::string> found;
  for (size_t begin = 0; begin <= path.size();) {
    const size_t end = std::min(path.find(':', begin), path.size());
    const std::string dir = end > begin ? path.substr(begin, end - begin) : ".";
    const std::string candidate = dir + "/" + python;
    if (::access(candidate.c_str(), X_OK) == 0) found.push_back(candidate);
    begin = end + 1;
  }
  if (found.empty()) throw Error("sandbox: interpreter '" + python + "' not found in $PATH (" + path + ")");
  return found;
}

/// Why the child could not start the interpreter, sent over the report pipe before it exits.
enum class ChildStep : int { kSetsid, kSignals, kStdio, kChdir, kSetUser, kRlimit, kExec };
constexpr const char* kChildStepNames[] = {"setsid", "signal reset", "stdio redirection", "chdir",
                                           "dropping to the sandbox uid", "setrlimit", "exec"};
struct ChildReport {
  ChildStep step;
  int error;
};

/// Everything the child needs, prepared before fork: after fork in a multi-threaded program only
/// async-signal-safe calls are allowed, so the child allocates nothing and calls only syscalls.
struct ChildPlan {
  int stdout_fd = -1, stderr_fd = -1, report_fd = -1;
  const char* work_dir = nullptr;
  std::optional<uint32_t> uid;  // set when we are root: setgid + setuid to it
  std::vector<std::pair<decltype(RLIMIT_CPU), rlim_t>> limits;  // the type setrlimit takes (an enum in glibc)
  std::vector<std::vector<char*>> argvs;  // one null-terminated argv per interpreter candidate
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
  // The report pipe goes to fd 3 first so `fail` can use it (all plan fds are >= 4, see make_pipe).
  if (::dup2(plan.report_fd, 3) < 0 || ::fcntl(3, F_SETFD, FD_CLOEXEC) != 0) ::_exit(127);
  if (::setsid() < 0) fail(ChildStep::kSetsid);

  sigset_t none;
  sigemptyset(&none);
  if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) fail(ChildStep::kSignals);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);  // fails harmlessly for KILL/STOP

  const int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd < 0 || ::dup2(null_fd, 0) < 0 || ::dup2(plan.stdout_fd, 1) < 0 || ::dup2(plan.stderr_fd, 2) < 0)
    fail(ChildStep::kStdio);
  close_from(4, plan.max_fd);

  if (::chdir(plan.work_dir) != 0) fail(ChildStep::kChdir);
  if (plan.uid && (::setgroups(0, nullptr) != 0 || ::setgid(*plan.uid) != 0 || ::setuid(*plan.uid) != 0))
    fail(ChildStep::kSetUser);
  // After setuid: RLIMIT_NPROC set while still root would make execve fail with EAGAIN whenever
  // the sandbox uid already has that many processes (Linux checks it again at exec).
  for (const auto& [resource, value] : plan.limits) {
    const rlimit lim{value, resource == RLIMIT_CPU ? value + 1 : value};
    if (::setrlimit(resource, &lim) != 0) fail(ChildStep::kRlimit);
  }
  int exec_error = ENOENT;
  for (const auto& argv : plan.argvs) {
    ::execve(argv[0], argv.data(), plan.envp);
    if (errno != ENOENT) exec_error = errno;  // like execvp: report EACCES over "not found"
  }
  errno = exec_error;
  fail(ChildStep::kExec);
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

/// Makes this process the reaper of its orphaned descendants (Linux only), so that a run's
/// leftover processes become our children and RunGroup can collect them. Otherwise they go to
/// init, which in a container may reap late or never, and until then count against RLIMIT_NPROC.
void become_subreaper() {
#ifdef __linux__
  static const int done = ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  (void)done;
#endif
}

/// A started run: the interpreter `pid`, leader of process group `pid`. kill_and_reap() kills the
/// group and reaps the interpreter and every member that is our child; the destructor does the
/// same if an exception leaves run_python early, so no run outlives its call.
class RunGroup {
 public:
  explicit RunGroup(pid_t pid) : pid_(pid) {}
  ~RunGroup() {
    if (!reaped_) kill_and_reap();
  }
  RunGroup(const RunGroup&) = delete;
  RunGroup& operator=(const RunGroup&) = delete;

  /// SIGKILL to the group, then the interpreter's wait status. Call it while the interpreter is
  /// still unreaped (see exited), so the group id cannot have been reused.
  int kill_and_reap() {
    ::killpg(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {}
    reaped_ = true;
    // Orphans of the group are ours (become_subreaper); wait until none is left.
    while (::waitpid(-pid_, nullptr, 0) > 0 || errno == EINTR) {}
    return status;
  }

 private:
  pid_t pid_;
  bool reaped_ = false;
};

void check_positive(double value, const char* field) {
  if (!(value > 0)) throw Error(std::string("sandbox: SandboxLimits.") + field + " must be positive, got " +
                                std::to_string(value));
}

}  // namespace

const char* to_string(SandboxStatus status) {
  switch (status) {
    case SandboxStatus::kPassed: return "passed";
    case SandboxStatus::kFailed: return "failed";
    case SandboxStatus::kTimeout: return "timeout";
    case SandboxStatus::kCrashed: return "crashed";
  }
  return "unknown";
}

SandboxResult run_python(const std::string& program, const SandboxLimits& limits) {
  check_positive(limits.timeout_seconds, "timeout_seconds");
  check_positive(static_cast<double>(limits.cpu_seconds), "cpu_seconds");
  check_positive(static_cast<double>(limits.memory_bytes), "memory_bytes");
  check_positive(static_cast<double>(limits.file_size_bytes), "file_size_bytes");
  check_positive(static_cast<double>(limits.max_processes), "max_processes");
  check_positive(static_cast<double>(limits.max_output_bytes), "max_output_bytes");
  const bool as_root = ::geteuid() == 0;
  if (as_root && limits.uid == 0)
    throw Error("sandbox: SandboxLimits.uid must not be 0 (RLIMIT_NPROC does not apply to root)");
  const std::optional<uint32_t> uid = as_root ? std::optional<uint32_t>(limits.uid) : std::nullopt;
  become_subreaper();

  std::vector<std::string> candidates = interpreter_candidates(limits.python);
  RunDir dir(program, uid);
  Pipe out = make_pipe(), err = make_pipe(), report = make_pipe();

  std::string program_path = dir.program_file.string(), isolated = "-I";
  std::vector<std::string> env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir.work.string(),
                                  "TMPDIR=" + dir.work.string(), "LANG=C.UTF-8"};
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  ChildPlan plan;
  plan.stdout_fd = out.write.get();
  plan.stderr_fd = err.write.get();
  plan.report_fd = report.write.get();
  plan.work_dir = dir.work.c_str();
  plan.uid = uid;
  plan.limits = {{RLIMIT_CPU, static_cast<rlim_t>(limits.cpu_seconds)},
                 {RLIMIT_AS, static_cast<rlim_t>(limits.memory_bytes)},
                 {RLIMIT_FSIZE, static_cast<rlim_t>(limits.file_size_bytes)},
                 {RLIMIT_NPROC, static_cast<rlim_t>(limits.max_processes)},
                 {RLIMIT_CORE, 0}};
  for (std::string& python : candidates)
    plan.argvs.push_back({python.data(), isolated.data(), program_path.data(), nullptr});
  plan.envp = envp.data();
  const long open_max = ::sysconf(_SC_OPEN_MAX);
  plan.max_fd = static_cast<int>(open_max > 0 ? std::min<long>(open_max, 1 << 20) : 1024);

  const Clock::time_point start = Clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw_errno("fork");
  if (pid == 0) child_main(plan);
  RunGroup group(pid);
  out.write.reset();
  err.write.reset();
  report.write.reset();

  // End of file on the report pipe (closed on exec) means the interpreter is running.
  ChildReport child_report{};
  ssize_t got;
  while ((got = ::read(report.read.get(), &child_report, sizeof child_report)) < 0 && errno == EINTR) {}
  if (got > 0) {
    group.kill_and_reap();
    const std::string step = kChildStepNames[static_cast<int>(child_report.step)];
    if (child_report.step != ChildStep::kExec)
      throw std::system_error(child_report.error, std::generic_category(), "sandbox: child " + step);
    std::string tried;
    for (const std::string& c : candidates) tried += (tried.empty() ? "" : ", ") + c;
    throw Error("sandbox: cannot execute interpreter '" + limits.python + "' (tried " + tried + ")" +
                (uid ? " as uid " + std::to_string(*uid) : "") + ": " + std::strerror(child_report.error));
  }

  SandboxResult result;
  const auto cap = static_cast<size_t>(limits.max_output_bytes);
  std::vector<Capture> captures = {{out.read.get(), &result.stdout_text, &result.stdout_truncated, cap},
                                   {err.read.get(), &result.stderr_text, &result.stderr_truncated, cap}};
  for (const Capture& c : captures)
    if (::fcntl(c.fd, F_SETFL, O_NONBLOCK) != 0) throw_errno("fcntl(O_NONBLOCK)");
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(limits.timeout_seconds));
  constexpr auto kTick = std::chrono::milliseconds(10);  // how often we look for the exit
  bool timed_out = false;
  while (!exited(pid)) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      timed_out = true;
      break;
    }
    pump(captures, std::min<Clock::duration>(deadline - now, kTick));
  }
  // Kill the interpreter if it still runs, and whatever it left behind.
  const int wstatus = group.kill_and_reap();
  result.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();

  // The killed descendants close their copies of the pipes as they die; a process that left the
  // group (setsid) could hold them open for ever, so draining stops after a grace period.
  const Clock::time_point drain_end = Clock::now() + std::chrono::milliseconds(500);
  while (std::any_of(captures.begin(), captures.end(), [](const Capture& c) { return c.open; }) &&
         Clock::now() < drain_end)
    pump(captures, drain_end - Clock::now());

  if (timed_out) {
    result.status = SandboxStatus::kTimeout;
    result.signal = SIGKILL;
  } else if (WIFEXITED(wstatus)) {
    result.exit_code = WEXITSTATUS(wstatus);
    result.status = result.exit_code == 0 ? SandboxStatus::kPassed : SandboxStatus::kFailed;
  } else {
    result.signal = WTERMSIG(wstatus);
    result.status = result.signal == SIGXCPU ? SandboxStatus::kTimeout : SandboxStatus::kCrashed;
  }
  return result;
}

}  // namespace fbt
