// Run directory layout: step directory names, the `latest` pointer, --checkpoint resolution.
#include "fbt/io/run_dir.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "fbt/util/atomic_file.h"
#include "fbt/util/error.h"

namespace fbt {
namespace fs = std::filesystem;

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%07lld", static_cast<long long>(step));
  return buf;
}

namespace {

constexpr const char* kPartialMarker = ".fbt-partial";  // in OUT.partial while a command fills it

/// `out_dir` without trailing separators ("runs/a/" -> "runs/a"; "/" stays).
std::string without_trailing_slash(std::string out_dir) {
  while (out_dir.size() > 1 && out_dir.back() == '/') out_dir.pop_back();
  return out_dir;
}

}  // namespace

void check_new_directory(const std::string& given) {
  if (given.empty()) throw Error("--out is empty: give the directory to create");
  const std::string out_dir = without_trailing_slash(given);
  const fs::path out(out_dir), partial(out_dir + ".partial");
  std::error_code ec;
  if (fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec)))
    throw Error("--out '" + given + "' already exists and is not an empty directory");
  if (fs::exists(partial, ec) && !fs::exists(partial / kPartialMarker, ec))
    throw Error("--out '" + given + "': '" + partial.string() +
                "' exists and is not the leftover of a killed fbt "
                "command (it has no " +
                kPartialMarker + " marker); move it away, fbt writes its output there first");
}

void write_directory_atomic(const std::string& given, const std::function<void(const std::string& partial)>& fill) {
  check_new_directory(given);
  const std::string out_dir = without_trailing_slash(given);
  const fs::path out(out_dir), partial(out_dir + ".partial");
  auto discard = [&] {
    std::error_code ignored;
    fs::remove_all(partial, ignored);
  };
  try {
    fs::remove_all(partial);  // a killed command's leftover (check_new_directory saw its marker)
    fs::create_directories(partial);
    write_file_atomic((partial / kPartialMarker).string(), "");
    fill(partial.string());
    fs::remove(partial / kPartialMarker);
    if (fs::exists(out)) fs::remove(out);  // an empty directory (checked above)
    fs::rename(partial, out);
  } catch (const fs::filesystem_error& e) {
    discard();
    throw Error("--out '" + given + "': " + e.what());
  } catch (...) {
    discard();
    throw;
  }
}

void write_latest(const std::string& run_dir, const std::string& name) {
  write_file_atomic((fs::path(run_dir) / "latest").string(), name + "\n");
}

std::string resolve_checkpoint(const std::string& path) {
  const fs::path p(path);
  if (fs::is_regular_file(p) && p.extension() == ".gguf")
    throw Error("'" + path +
                "' is a GGUF file, not an fbt checkpoint: make a run of it first with `fbt import "
                "--from gguf " +
                path + " --out RUNDIR`");
  if (fs::is_regular_file(p)) return p.string();
  if (fs::is_regular_file(p / "model.safetensors")) return (p / "model.safetensors").string();
  if (fs::is_regular_file(p / "latest")) {
    std::ifstream f(p / "latest");
    std::string name;
    f >> name;
    if (name.empty()) throw Error(path + ": " + (p / "latest").string() + " is empty (names no step directory)");
    const auto file = p / name / "model.safetensors";
    if (!fs::is_regular_file(file))
      throw Error(path + ": 'latest' names " + name + " but " + file.string() + " does not exist");
    return file.string();
  }
  throw Error("--checkpoint " + path +
              ": not a model file, a step directory with model.safetensors, or a run directory with 'latest'");
}

int64_t truncate_metrics(const std::string& path, int64_t step) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return 0;
  std::string line, kept;
  int64_t dropped = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool keep =
        j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() <= step;
    if (keep)
      kept += line + "\n";
    else
      ++dropped;  // a later step, or a line cut short when the process was killed
  }
  if (dropped > 0) write_file_atomic(path, kept);
  return dropped;
}

std::string run_dir_of(const std::string& model_file) {
  return fs::absolute(model_file).parent_path().parent_path().string();
}

}  // namespace fbt
