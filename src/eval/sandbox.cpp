// Runs Python programs in the bubblewrap sandbox: limits, interpreter lookup, the cached check
// that the sandbox works here, and the verdict of a run (see include/fbt/eval/sandbox.h).
#include "fbt/eval/sandbox.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "fbt/eval/bwrap.h"
#include "fbt/eval/sandbox_process.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

void check_positive(double value, const char* field) {
  if (!(value > 0))
    throw Error(std::string("sandbox: SandboxLimits.") + field + " must be positive, got " + std::to_string(value));
}

/// The uid to drop to when we are root; throws for uid 0.
std::optional<uint32_t> sandbox_uid(const SandboxLimits& limits) {
  if (::geteuid() != 0) return std::nullopt;
  if (limits.uid == 0) throw Error("sandbox: SandboxLimits.uid must not be 0 (RLIMIT_NPROC does not apply to root)");
  return limits.uid;
}

void check_limits(const SandboxLimits& limits) {
  check_positive(limits.timeout_seconds, "timeout_seconds");
  check_positive(static_cast<double>(limits.cpu_seconds), "cpu_seconds");
  check_positive(static_cast<double>(limits.memory_bytes), "memory_bytes");
  check_positive(static_cast<double>(limits.file_size_bytes), "file_size_bytes");
  check_positive(static_cast<double>(limits.work_dir_bytes), "work_dir_bytes");
  check_positive(static_cast<double>(limits.max_processes), "max_processes");
  check_positive(static_cast<double>(limits.max_output_bytes), "max_output_bytes");
  sandbox_uid(limits);
}

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

/// The bwrap command of `program` for every interpreter candidate (the child takes the first the
/// sandbox uid may execute), with the sandbox's environment.
SandboxCommand make_command(const std::string& program, const SandboxLimits& limits, const std::string& bwrap,
                            const std::vector<std::string>& candidates) {
  SandboxCommand c;
  for (const std::string& python : candidates) {
    c.argvs.push_back(bwrap_argv(bwrap, python, limits.work_dir_bytes));
    c.gates.push_back(python);
  }
  c.env = {"PATH=/usr/local/bin:/usr/bin:/bin", std::string("HOME=") + kSandboxWorkDir,
           std::string("TMPDIR=") + kSandboxWorkDir, "LANG=C.UTF-8"};
  c.uid = sandbox_uid(limits);
  c.program = program;
  return c;
}

/// Runs `program` in the sandbox; throws fbt::Error when neither the interpreter nor bwrap could
/// be executed (so nothing ran).
SandboxProcessResult run_in_sandbox(const std::string& program, const SandboxLimits& limits, const std::string& bwrap) {
  const std::vector<std::string> candidates = interpreter_candidates(limits.python);
  const SandboxCommand command = make_command(program, limits, bwrap, candidates);
  SandboxProcessResult r = run_sandbox_process(command, limits);
  const std::string as_uid = command.uid ? " as uid " + std::to_string(*command.uid) : "";
  if (r.not_started == SandboxProcessResult::NotStarted::kExec)
    throw Error("sandbox: cannot execute bubblewrap '" + bwrap + "'" + as_uid + ": " + std::strerror(r.error));
  if (r.not_started == SandboxProcessResult::NotStarted::kNoGate) {
    std::string tried;
    for (const std::string& c : candidates) tried += (tried.empty() ? "" : ", ") + c;
    throw Error("sandbox: cannot execute interpreter '" + limits.python + "' (tried " + tried + ")" + as_uid + ": " +
                std::strerror(r.error));
  }
  return r;
}

/// "" if `python -I` of "pass" runs in the sandbox and exits 0, else why not (bwrap's message).
std::string sandbox_problem(const SandboxLimits& limits, const std::string& bwrap) {
  SandboxLimits probe;  // default rlimits: the check is about the sandbox, not the caller's limits
  probe.uid = limits.uid;
  probe.python = limits.python;
  probe.timeout_seconds = 60;  // generous: a busy machine must not make the cached answer "no"
  const SandboxProcessResult r = run_in_sandbox("pass", probe, bwrap);
  if (r.sandboxed && !r.timed_out && WIFEXITED(r.wait_status) && WEXITSTATUS(r.wait_status) == 0) return "";
  std::string why = r.stderr_text.substr(0, 2000);
  while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
  if (r.timed_out) why += " (timed out after 60 s)";
  const std::string uid = ::geteuid() == 0 ? std::to_string(limits.uid) : std::to_string(::geteuid());
  return "sandbox: bubblewrap (" + bwrap + ") cannot run " + limits.python +
         " in its sandbox here: " + (why.empty() ? "exit status " + std::to_string(r.wait_status) : why) +
         ". fbt runs generated code only inside that sandbox, never without it. bwrap needs unprivileged user "
         "namespaces for uid " +
         uid +
         " (sysctl user.max_user_namespaces > 0, and kernel.unprivileged_userns_clone = 1 where that setting "
         "exists) and, in a container, a seccomp/AppArmor profile that allows creating namespaces and mounts; "
         "bubblewrap >= 0.8 (for --size and --disable-userns). Try: bwrap --unshare-all --ro-bind / / true";
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

void check_sandbox(const SandboxLimits& limits) {
  check_limits(limits);
  const std::string bwrap = find_bwrap(limits.bwrap);
  const std::string key = bwrap + '\n' + limits.python + '\n' + std::to_string(limits.uid);
  static std::mutex mutex;
  static std::map<std::string, std::string> problems;  // key -> "" (works) or the error message
  const std::lock_guard<std::mutex> lock(mutex);       // concurrent first calls wait for one check
  auto it = problems.find(key);
  if (it == problems.end()) it = problems.emplace(key, sandbox_problem(limits, bwrap)).first;
  if (!it->second.empty()) throw Error(it->second);
}

SandboxResult run_python(const std::string& program, const SandboxLimits& limits) {
  check_sandbox(limits);
  const SandboxProcessResult r = run_in_sandbox(program, limits, find_bwrap(limits.bwrap));
  SandboxResult result;
  result.wall_seconds = r.wall_seconds;
  result.stdout_text = r.stdout_text;
  result.stderr_text = r.stderr_text;
  result.stdout_truncated = r.stdout_truncated;
  result.stderr_truncated = r.stderr_truncated;
  // bwrap exits with the program's status, or 128 + N when the program died of signal N.
  const int code = WIFEXITED(r.wait_status) ? WEXITSTATUS(r.wait_status) : -1;
  if (r.timed_out) {
    result.status = SandboxStatus::kTimeout;
    result.signal = SIGKILL;
  } else if (WIFSIGNALED(r.wait_status) || (r.sandboxed && code > 128 && code < 128 + NSIG)) {
    result.signal = WIFSIGNALED(r.wait_status) ? WTERMSIG(r.wait_status) : code - 128;
    result.status = result.signal == SIGXCPU ? SandboxStatus::kTimeout : SandboxStatus::kCrashed;
  } else {
    result.exit_code = code;
    result.status = code == 0 && r.sandboxed ? SandboxStatus::kPassed : SandboxStatus::kFailed;
  }
  return result;
}

}  // namespace fbt
