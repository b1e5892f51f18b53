// The bubblewrap command line of a sandboxed run: namespaces, read-only system binds, the private
// work directory (see include/fbt/eval/bwrap.h).
#include "fbt/eval/bwrap.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "fbt/util/error.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

/// Top-level system directories bound read-only as they are on the host: on a usrmerged system
/// (Debian 12) /bin, /sbin and /lib* are symlinks into /usr and are recreated as such.
constexpr const char* kSystemDirs[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};

/// /etc entries the dynamic loader and Python read; everything else of /etc stays hidden.
constexpr const char* kEtcEntries[] = {"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
                                       "/etc/localtime"};

/// Whether `path` is one of kSystemDirs or lies under one.
bool in_system_dirs(const fs::path& path) {
  const std::string p = path.lexically_normal().string();
  return std::any_of(std::begin(kSystemDirs), std::end(kSystemDirs),
                     [&](const std::string& dir) { return p == dir || p.compare(0, dir.size() + 1, dir + "/") == 0; });
}

/// The install prefixes (DIR of DIR/bin/python) of `interpreter` and of what it links to that lie
/// outside the system directories, e.g. /opt/python3.12 or a venv: bound read-only so that the
/// interpreter and its standard library exist inside. "/" is never bound.
std::vector<std::string> interpreter_prefixes(const std::string& interpreter) {
  std::vector<fs::path> paths{fs::path(interpreter)};
  std::error_code ec;
  const fs::path real = fs::canonical(interpreter, ec);
  if (!ec) paths.push_back(real);
  std::vector<std::string> prefixes;
  for (const fs::path& p : paths) {
    if (in_system_dirs(p)) continue;
    const fs::path prefix = p.lexically_normal().parent_path().parent_path();
    if (prefix.empty() || prefix == prefix.root_path() || in_system_dirs(prefix)) continue;
    if (std::find(prefixes.begin(), prefixes.end(), prefix.string()) == prefixes.end())
      prefixes.push_back(prefix.string());
  }
  return prefixes;
}

}  // namespace

std::string find_bwrap(const std::string& bwrap) {
  const char* env_path = std::getenv("PATH");
  const std::string path = env_path ? env_path : "/usr/local/bin:/usr/bin:/bin";
  if (bwrap.find('/') != std::string::npos) {
    if (::access(bwrap.c_str(), X_OK) == 0) return bwrap;
  } else {
    for (size_t begin = 0; begin <= path.size();) {
      const size_t end = std::min(path.find(':', begin), path.size());
      const std::string candidate = (end > begin ? path.substr(begin, end - begin) : ".") + "/" + bwrap;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      begin = end + 1;
    }
  }
  throw Error("sandbox: bubblewrap ('" + bwrap + "') is not installed or not executable (searched $PATH: " + path +
              "); fbt runs generated code only inside a bubblewrap sandbox. Install it with "
              "`sudo apt-get install bubblewrap` (scripts/setup.sh does)");
}

std::vector<std::string> bwrap_argv(const std::string& bwrap_path, const std::string& interpreter,
                                    int64_t work_dir_bytes) {
  std::vector<std::string> a{bwrap_path,          "--unshare-all", "--unshare-user", "--disable-userns",
                             "--die-with-parent", "--new-session", "--cap-drop",     "ALL"};
  for (const std::string dir : kSystemDirs) {
    std::error_code ec;
    const auto status = fs::symlink_status(dir, ec);
    if (ec || !fs::exists(status)) continue;
    if (fs::is_symlink(status)) {
      a.insert(a.end(), {"--symlink", fs::read_symlink(dir, ec).string(), dir});
    } else if (fs::is_directory(status)) {
      a.insert(a.end(), {"--ro-bind", dir, dir});
    }
  }
  std::vector<std::string> etc(std::begin(kEtcEntries), std::end(kEtcEntries));
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/etc", ec)) {  // /etc/python3, /etc/python3.11: sitecustomize
    const std::string name = entry.path().filename().string();
    if (name.rfind("python3", 0) == 0) etc.push_back(entry.path().string());
  }
  for (const std::string& e : etc) a.insert(a.end(), {"--ro-bind-try", e, e});
  for (const std::string& prefix : interpreter_prefixes(interpreter)) a.insert(a.end(), {"--ro-bind", prefix, prefix});
  a.insert(a.end(), {"--proc", "/proc", "--dev", "/dev"});
  a.insert(a.end(), {"--size", std::to_string(work_dir_bytes), "--tmpfs", kSandboxWorkDir});
  a.insert(a.end(), {"--ro-bind-data", std::to_string(kBwrapProgramFd), kSandboxProgramFile});
  a.insert(a.end(), {"--remount-ro", "/dev", "--remount-ro", "/"});  // /dev/null etc. are their own binds
  a.insert(a.end(), {"--chdir", kSandboxWorkDir, "--info-fd", std::to_string(kBwrapInfoFd)});
  a.insert(a.end(), {"--", interpreter, "-I", kSandboxProgramFile});
  return a;
}

std::optional<pid_t> bwrap_child_pid(const std::string& info) {
  const std::string key = "\"child-pid\":";
  size_t at = info.find(key);
  if (at == std::string::npos) return std::nullopt;
  at = info.find_first_not_of(" \t\n", at + key.size());
  if (at == std::string::npos) return std::nullopt;
  const size_t end = info.find_first_not_of("0123456789", at);
  if (end == std::string::npos || end == at) return std::nullopt;  // digits may still be coming
  return static_cast<pid_t>(std::stol(info.substr(at, end - at)));
}

}  // namespace fbt
