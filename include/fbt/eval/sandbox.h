// Runs a Python program in a separate, resource-limited `python3 -I` process (HumanEval/MBPP checks).
//
// What a run gets (POSIX fork + exec; see run_python):
//   - its own session and process group, killed as a whole with SIGKILL at the wall-clock timeout
//     and again as soon as the interpreter exits, so background children and fork bombs die too;
//     on Linux the first call makes the calling process a child subreaper (prctl), so the group's
//     orphans become its children and are reaped before run_python returns instead of lingering
//     as zombies (which count against RLIMIT_NPROC) under an init that reaps late or never;
//   - when the harness runs as root, the uid/gid SandboxLimits::uid instead of root (no
//     supplementary groups): RLIMIT_NPROC is not enforced for root, and as another user the
//     program cannot write root's files;
//   - RLIMIT_CPU, RLIMIT_AS (address space), RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_CORE = 0;
//   - a fresh empty working directory (also HOME and TMPDIR) under the system temp directory,
//     deleted with everything in it afterwards; the program itself is a file outside it;
//   - stdin from /dev/null, stdout and stderr captured up to a size cap each, no other inherited
//     file descriptor, default signal dispositions, an empty signal mask, and a fixed environment
//     (PATH, HOME, TMPDIR, LANG=C.UTF-8); `-I` makes Python ignore PYTHON* variables and the user
//     site directory.
//
// This is NOT a security boundary. It contains accidents of model-written code (infinite loops,
// memory hogs, fork bombs, stray files) on a machine that runs nothing precious. It does not stop
// network access, reading world-readable files, writing world-writable places (/tmp, /dev/shm),
// or a program that leaves its process group (setsid) before it is killed; and RLIMIT_NPROC counts
// every process of the sandbox uid, so concurrent runs share that budget (and when the harness is
// not root, the caller's own processes count against it too). Use a container or VM with no
// network for untrusted code at scale.
#pragma once
#include <cstdint>
#include <string>

namespace fbt {

/// Limits for one run_python call. Sizes are bytes, times seconds.
struct SandboxLimits {
  double timeout_seconds = 10.0;            // wall clock, from fork to exit
  int64_t cpu_seconds = 10;                 // RLIMIT_CPU (SIGXCPU at the limit, SIGKILL 1 s later)
  int64_t memory_bytes = int64_t{1} << 30;  // RLIMIT_AS, per process
  int64_t file_size_bytes = 16 << 20;       // RLIMIT_FSIZE: largest file the program may write
  int64_t max_processes = 64;               // RLIMIT_NPROC: processes + threads of the run's uid
  int64_t max_output_bytes = 1 << 20;       // kept of stdout and of stderr each; the rest is dropped
  uint32_t uid = 65534;                     // user and group the program runs as when we are root
                                            // ("nobody" on Debian); ignored otherwise
  std::string python = "python3";           // interpreter: a path, or a name searched in $PATH
};

enum class SandboxStatus {
  kPassed,   // exited with status 0
  kFailed,   // exited with a non-zero status (an uncaught exception, a failed assert, MemoryError)
  kTimeout,  // killed at the wall-clock timeout, or by SIGXCPU at the CPU limit
  kCrashed,  // killed by any other signal (SIGSEGV, SIGABRT, ...; also the CPU hard limit's SIGKILL)
};

/// "passed", "failed", "timeout" or "crashed".
const char* to_string(SandboxStatus status);

struct SandboxResult {
  SandboxStatus status = SandboxStatus::kFailed;
  int exit_code = -1;       // the exit status when the program exited, else -1
  int signal = 0;           // the signal that ended it when it was killed, else 0
  double wall_seconds = 0;  // from fork until the run's processes are all gone
  std::string stdout_text;  // at most max_output_bytes of each stream
  std::string stderr_text;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
};

/// Runs `program` (Python source) as `python -I PROGRAM_FILE` under `limits` (see the file
/// comment) and waits for it; returns within about limits.timeout_seconds plus the time to kill
/// and reap. The interpreter is resolved like execvp would, trying each match in $PATH in turn:
/// when we are root, a match the sandbox uid may not execute (e.g. a pyenv shim under /root) is
/// skipped. When we are root the system temp directory ($TMPDIR, else /tmp) must be enterable by
/// the sandbox uid. Throws fbt::Error naming the interpreter if no match can be executed and for
/// limits that are not positive; std::system_error if a system call of the harness fails (temp
/// directory, pipe, fork) or the child cannot be set up (e.g. chdir: permission denied).
SandboxResult run_python(const std::string& program, const SandboxLimits& limits = {});

}  // namespace fbt
