// Crash-safe file writes: temporary file, fsync, rename, fsync of the directory.
#include "fbt/util/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "fbt/util/error.h"

namespace fbt {
namespace fs = std::filesystem;

namespace {

/// fsync()s `path` (a file, or a directory so that a rename in it is durable); throws fbt::Error.
void sync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_WRONLY) | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open to sync: " + std::strerror(errno));
  const int rc = ::fsync(fd), err = errno;
  ::close(fd);
  if (rc != 0) throw Error(path + ": fsync failed: " + std::strerror(err));
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    const int open_errno = errno;
    if (!f) throw Error(path + ": cannot write file " + tmp + ": " + std::strerror(open_errno));
    f << text;
    f.flush();
    if (!f) {
      const int err = errno;  // open() or write()'s error, before remove() can change it
      std::error_code ignored;
      fs::remove(tmp, ignored);
      throw Error(path + ": cannot write file '" + tmp + "': " + std::strerror(err));
    }
  }
  try {
    sync_path(tmp, false);  // the bytes reach the disk before the rename makes them the file
  } catch (const Error&) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    throw Error(path + ": cannot rename temporary file into place: " + why);
  }
  const auto parent = fs::absolute(path).parent_path().string();
  sync_path(parent, true);  // and the rename survives a power loss
}

}  // namespace fbt
