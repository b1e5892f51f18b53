// Shared helpers for tests that run the `fbt` binary: file I/O, a tiny run directory, CLI calls.
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "fbt/data/tokenizer.h"
#include "fbt/io/checkpoint.h"
#include "fbt/io/run_dir.h"
#include "test_model_helpers.h"

namespace fbt::testing {

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

/// Writes `text` to `p`, creating its parent directories.
inline void write_file(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}

struct CliRun {
  int rc;
  std::string out, err;
};

/// Runs `prefix FBT_CLI args` through the shell (quote args where needed; `prefix` may set the
/// environment, e.g. "env -u VAR"), capturing stdout and stderr apart in files under `dir`.
inline CliRun run_cli(const std::filesystem::path& dir, const std::string& args, const std::string& prefix = "") {
  const auto out = dir / "stdout", err = dir / "stderr";
  const std::string cmd = prefix + " " + FBT_CLI + " " + args + " > " + out.string() + " 2> " + err.string();
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

/// A run dir as the trainer leaves it, holding make_test_model(debug preset with `vocab` and EOS
/// as the document separator; `context` > 0 replaces the preset's 64): RUNDIR/step-0000001/
/// model.safetensors, RUNDIR/latest and RUNDIR/tokenizer/meta.json (all Tokenizer::load needs for
/// the byte tokenizer). `edit`, when given, changes the model's weights before it is saved.
/// Returns the model.
inline FBT make_run_dir(const std::filesystem::path& run_dir, int64_t vocab, int64_t context = 0,
                        const std::function<void(FBT&)>& edit = nullptr) {
  auto config = ModelConfig::preset("debug");
  config.vocab_size = vocab;
  if (context > 0) config.context = context;
  config.doc_separator_id = ByteTokenizer::kEos;
  auto m = make_test_model(config);
  if (edit) edit(m);
  std::filesystem::create_directories(run_dir / step_dir_name(1));
  save_model((run_dir / step_dir_name(1) / "model.safetensors").string(), m, ByteTokenizer().meta(), 1);
  write_latest(run_dir.string(), step_dir_name(1));
  const nlohmann::json meta{{"format", "fbt-dataset"}, {"format_version", 1}, {"tokenizer", ByteTokenizer().meta()}};
  write_file(run_dir / "tokenizer" / "meta.json", meta.dump(2));
  return m;
}

}  // namespace fbt::testing
