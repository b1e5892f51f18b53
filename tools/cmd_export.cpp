// `fbt export --to hf --checkpoint PATH --out DIR`: an fbt model (block llama) as a Hugging Face
// model directory (hf_export.h).
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "fbt/io/hf_export.h"
#include "fbt/io/run_dir.h"

namespace fbt::cli {
namespace {

struct ExportArgs {
  std::string to = "hf", checkpoint, out;
};

void run_export(const ExportArgs& a) {
  check_new_directory(a.out);  // before the work, not after it
  const auto checkpoint = load_checkpoint(a.checkpoint, "cpu");
  require_fp32_weights(checkpoint, "fbt export");
  const auto tokenizer_dir = std::filesystem::path(run_dir_of(checkpoint.model_file)) / "tokenizer";
  export_hf_model(checkpoint.model, checkpoint.info.tokenizer, tokenizer_dir.string(), a.out);
  std::cout << "exported " << checkpoint.model_file << " (step " << checkpoint.info.step << ") as a "
            << hf_model_type(checkpoint.model->config()) << " model -> " << a.out
            << " (config.json, model.safetensors; the fusion in fbt_fusion.safetensors, which transformers ignores)\n";
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand("export", "Export a Llama-block fbt model as a Hugging Face model directory");
  cmd->add_option("--to", a->to, "Target format")->check(CLI::IsMember({"hf"}))->capture_default_str();
  cmd->add_option("--checkpoint", a->checkpoint, "Run directory, step directory or model.safetensors")->required();
  cmd->add_option("--out", a->out, "Directory to create (must not exist, or be empty)")->required();
  cmd->callback([a] { run_export(*a); });
}

}  // namespace fbt::cli
