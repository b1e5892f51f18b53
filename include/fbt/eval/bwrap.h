// The bubblewrap command line of a sandboxed Python run (sandbox.h): which namespaces, which host
// paths the program sees (read-only) and its private writable work directory.
//
// bubblewrap (`bwrap`, https://github.com/containers/bubblewrap, Debian package `bubblewrap`) is
// the unprivileged sandboxing tool that Flatpak builds on. bwrap_argv asks it for:
//   --unshare-all --unshare-user --disable-userns: new user, PID, network, IPC, UTS and cgroup
//       namespaces, and no further user namespaces inside (so no nested "root" either);
//   --die-with-parent --new-session: the sandbox is SIGKILLed when bwrap or its parent dies, and
//       the program has no controlling terminal;
//   a new root made of read-only binds of /usr, the usrmerge links or directories /bin, /sbin,
//       /lib*, a few /etc entries the interpreter needs (ld.so cache and config, alternatives,
//       localtime, python3*), and the interpreter's install prefix when it lies outside /usr;
//       nothing else of the host (no /home, /root, /tmp, /var, /run, /work, /sys, no sockets);
//   --proc /proc (the sandbox's own processes only), --dev /dev (null, zero, full, random,
//       urandom, tty);
//   a private tmpfs of at most work_dir_bytes at /tmp: the working directory, HOME and TMPDIR,
//       the only writable place (the root and /dev are remounted read-only);
//   the program as a read-only file /sandbox/program.py, copied from descriptor kBwrapProgramFd;
//   --info-fd kBwrapInfoFd: bwrap writes {"child-pid": N, ...} there, N being the host pid of the
//       namespace's init (pid 1 inside), whose death kills every process in the namespace.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fbt {

/// Descriptors bwrap receives from the sandbox's child process (sandbox_process.h).
constexpr int kBwrapProgramFd = 4;  // the program text, read by --ro-bind-data
constexpr int kBwrapInfoFd = 5;     // --info-fd

/// Where the program sees its files.
constexpr const char* kSandboxWorkDir = "/tmp";
constexpr const char* kSandboxProgramFile = "/sandbox/program.py";

/// The path of the bubblewrap executable `bwrap` (a path, or a name searched in $PATH). Throws
/// fbt::Error saying how to install bubblewrap when there is none.
std::string find_bwrap(const std::string& bwrap);

/// The full argv (bwrap_path first) that runs `interpreter -I /sandbox/program.py` in the
/// sandbox described in the file comment, its work directory a tmpfs of `work_dir_bytes`.
/// `interpreter` is a host path; it is run under the same path inside.
std::vector<std::string> bwrap_argv(const std::string& bwrap_path, const std::string& interpreter,
                                    int64_t work_dir_bytes);

/// The host pid of the namespace's init from what bwrap wrote to --info-fd so far, once the
/// "child-pid" field is complete.
std::optional<pid_t> bwrap_child_pid(const std::string& info);

}  // namespace fbt
