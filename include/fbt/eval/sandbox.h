// Runs a model-written Python program (HumanEval/MBPP checks) as `python3 -I` inside a bubblewrap
// sandbox (https://github.com/containers/bubblewrap, Debian package `bubblewrap`), with rlimits.
//
// What a run gets (bwrap.h has the exact command line, sandbox_process.h the process side):
//   - namespaces of its own: user (no nested ones), PID, network, IPC, UTS, mount, cgroup. The
//     program is pid 2 under bwrap's init; when the program exits or times out that init is killed
//     and the kernel kills every process left in the namespace, setsid'd or double-forked ones
//     included, before run_python returns. The network namespace has only a loopback interface of
//     its own: nothing of the host's network, loopback included, is reachable;
//   - a filesystem of read-only binds of /usr (and the /bin, /sbin, /lib* links), a few /etc files
//     the loader and Python need and the interpreter's install prefix if outside /usr; its own
//     /proc and a minimal /dev. No other host path exists inside (no /home, /root, /tmp, /var,
//     /run, /work, /sys, no host sockets), so it can neither read nor write host files;
//   - as its only writable place a private tmpfs of SandboxLimits::work_dir_bytes at /tmp: the
//     working directory, HOME and TMPDIR, empty at the start and gone with the namespace;
//   - when the harness runs as root, the uid/gid SandboxLimits::uid instead of root (no
//     supplementary groups), before bwrap starts: bwrap runs unprivileged and no process of the
//     run has any capability; otherwise the caller's uid;
//   - RLIMIT_CPU, RLIMIT_AS (address space), RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_CORE = 0, and the
//     wall-clock timeout;
//   - stdin from /dev/null, stdout and stderr captured up to a size cap each, no other inherited
//     file descriptor, and a fixed environment (PATH, HOME, TMPDIR, LANG=C.UTF-8); `-I` makes
//     Python ignore PYTHON* variables and the user site directory.
// If the harness is killed, the sandbox dies with it (PR_SET_PDEATHSIG, bwrap --die-with-parent).
//
// bubblewrap is required: if it is missing or cannot build the sandbox here (no unprivileged user
// namespaces, a container that forbids them), run_python throws fbt::Error saying so and never
// runs the program any other way. The check runs once per process and setting, and is cached.
//
// What is NOT contained: the kernel is shared, so a kernel exploit escapes (there is no seccomp
// filter); the program can read what the read-only system directories hold (world-readable
// anyway) and use CPU and memory up to the limits; RLIMIT_AS is per process, so the run's total
// memory is bounded only by max_processes x memory_bytes plus the tmpfs (use a cgroup, e.g.
// systemd-run --scope -p MemoryMax=..., for a hard total); RLIMIT_NPROC counts every process of
// the sandbox uid, so concurrent runs share that budget (and when the harness is not root, the
// caller's own processes count against it too). bwrap reports a death by signal N as exit status
// 128 + N, so a program that itself exits with 129..192 is reported as killed by that signal.
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
  int64_t work_dir_bytes = 64 << 20;        // size of the tmpfs work dir, all files together (it is RAM)
  int64_t max_processes = 64;               // RLIMIT_NPROC: processes + threads of the run's uid
  int64_t max_output_bytes = 1 << 20;       // kept of stdout and of stderr each; the rest is dropped
  uint32_t uid = 65534;                     // user and group the program runs as when we are root
                                            // ("nobody" on Debian); ignored otherwise
  std::string python = "python3";           // interpreter: a path, or a name searched in $PATH
  std::string bwrap = "bwrap";              // bubblewrap: a path, or a name searched in $PATH
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

/// Throws fbt::Error unless programs can be run in the sandbox with these settings: bwrap is
/// found (limits.bwrap), the interpreter too (limits.python), and `python -I` of an empty program
/// runs and exits 0 in the sandbox as limits.uid. The result is cached per process for each
/// (bwrap, interpreter, uid); run_python calls it first. Call it before expensive work whose
/// results need the sandbox.
void check_sandbox(const SandboxLimits& limits = {});

/// Runs `program` (Python source) as `python -I /sandbox/program.py` in the sandbox under
/// `limits` (see the file comment) and waits for it; returns within about limits.timeout_seconds
/// plus the time to kill and reap. The interpreter is resolved on the host like execvp would,
/// trying each match in $PATH in turn: a match the sandbox uid may not execute (e.g. a pyenv shim
/// under /root) is skipped; it must be a real executable, not a script that needs the host's
/// files. Throws fbt::Error if the sandbox is unusable (check_sandbox), naming the interpreter if
/// no match can be executed, and for limits that are not positive; std::system_error if a system
/// call of the harness fails (pipe, fork, pidfd) or the child cannot be set up. Should bwrap fail
/// to build the sandbox of one run after the check passed (e.g. the sandbox uid is at
/// RLIMIT_NPROC), the program does not run and the result is kFailed with bwrap's message on stderr.
SandboxResult run_python(const std::string& program, const SandboxLimits& limits = {});

}  // namespace fbt
