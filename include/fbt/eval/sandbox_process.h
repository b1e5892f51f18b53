// The process side of the Python sandbox (sandbox.h): starts bubblewrap (bwrap.h) as a resource-
// limited child process, captures its output, and kills and reaps it and everything it started.
//
// The child, set up between fork and exec with async-signal-safe calls only:
//   - its own session and process group; default signal dispositions, an empty signal mask;
//   - stdin /dev/null, stdout and stderr to pipes, the program text as fd kBwrapProgramFd and a
//     pipe as fd kBwrapInfoFd, no other descriptor; working directory /;
//   - when `uid` is set (the harness is root): no supplementary groups, gid and uid `uid`, so
//     bwrap runs unprivileged and builds the sandbox in a user namespace of that uid;
//   - PR_SET_PDEATHSIG SIGKILL: it dies with the thread that started it (and bwrap's
//     --die-with-parent then takes the sandbox along);
//   - RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC (after the uid drop), RLIMIT_CORE = 0,
//     inherited by bwrap and the program;
//   - exec of argvs[i] for the first i whose gates[i] it may execute (access X_OK as that uid).
// The first call makes the calling process a child subreaper (prctl), so that the namespace's
// init, orphaned when bwrap exits, is reparented to us and reaped here.
#pragma once
#include <cerrno>
#include <optional>
#include <string>
#include <vector>

#include "fbt/eval/sandbox.h"

namespace fbt {

struct SandboxCommand {
  std::vector<std::vector<std::string>> argvs;  // candidate command lines, argvs[i][0] the executable
  std::vector<std::string> gates;               // gates[i]: the file that must be executable to use argvs[i]
  std::vector<std::string> env;                 // the whole environment, "NAME=value"
  std::optional<uint32_t> uid;                  // the uid and gid to drop to, when we are root
  std::string program;                          // the text given to the child as fd kBwrapProgramFd
};

struct SandboxProcessResult {
  enum class NotStarted { kNo, kNoGate, kExec };
  NotStarted not_started = NotStarted::kNo;  // kNoGate: no gate was executable; kExec: execve failed
  int error = 0;                             // errno of that failure
  int wait_status = 0;                       // of the executed process (bwrap)
  bool timed_out = false;                    // killed at limits.timeout_seconds
  bool sandboxed = false;                    // bwrap reported the namespace's init (--info-fd)
  double wall_seconds = 0;                   // from fork until the sandbox's processes are all gone
  std::string stdout_text, stderr_text;      // at most limits.max_output_bytes each
  bool stdout_truncated = false, stderr_truncated = false;
};

/// Runs `command` as described in the file comment under limits' rlimits and timeout and waits
/// for it. When it exits or times out, the namespace's init (whose host pid bwrap wrote to fd
/// kBwrapInfoFd) is killed with SIGKILL through a pidfd, which makes the kernel kill every process
/// in the namespace, and this returns only after that init is gone, i.e. after all of them are.
/// (Should bwrap be killed at the timeout before it reported the init, still setting the sandbox
/// up, the namespace dies through --die-with-parent instead, moments later.)
/// Throws std::system_error if a system call of the harness fails (pipe, memfd, fork, pidfd_open:
/// Linux >= 5.3) or the child cannot be set up (setsid, setuid, setrlimit, ...).
SandboxProcessResult run_sandbox_process(const SandboxCommand& command, const SandboxLimits& limits);

}  // namespace fbt
