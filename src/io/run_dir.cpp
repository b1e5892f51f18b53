// Run directory layout: step directory names, the `latest` pointer, --checkpoint resolution.
#include "fbt/io/run_dir.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "fbt/util/error.h"

namespace fbt {
namespace fs = std::filesystem;

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%07lld", static_cast<long long>(step));
  return buf;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.flush();
    if (!f) {
      const int err = errno;  // open() or write()'s error, before remove() can change it
      std::error_code ignored;
      fs::remove(tmp, ignored);
      throw Error(path + ": cannot write file '" + tmp + "': " + std::strerror(err));
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;  // keep rename's error for the message
    fs::remove(tmp, ignored);
    throw Error(path + ": cannot rename temporary file into place: " + ec.message());
  }
}

void write_latest(const std::string& run_dir, const std::string& name) {
  write_file_atomic((fs::path(run_dir) / "latest").string(), name + "\n");
}

std::string resolve_checkpoint(const std::string& path) {
  const fs::path p(path);
  if (fs::is_regular_file(p)) return p.string();
  if (fs::is_regular_file(p / "model.safetensors")) return (p / "model.safetensors").string();
  if (fs::is_regular_file(p / "latest")) {
    std::ifstream f(p / "latest");
    std::string name;
    f >> name;
    const auto file = p / name / "model.safetensors";
    if (!fs::is_regular_file(file))
      throw Error(path + ": 'latest' names " + name + " but " + file.string() + " does not exist");
    return file.string();
  }
  throw Error("--checkpoint " + path +
              ": not a model file, a step directory with model.safetensors, or a run directory with 'latest'");
}

std::string run_dir_of(const std::string& model_file) {
  return fs::absolute(model_file).parent_path().parent_path().string();
}

}  // namespace fbt
