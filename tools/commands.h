// The `fbt` subcommands: each tools/cmd_*.cpp registers one on the CLI11 app.
#pragma once
#include <CLI/CLI.hpp>

namespace fbt::cli {

/// Each adds its subcommand to `app`; the subcommand's callback does the work and throws
/// fbt::Error for bad input (main prints it and exits 1).
void add_prepare_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_eval_loss_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_synth_command(CLI::App& app);
void add_eval_probe_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_import_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_quantize_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_serve_command(CLI::App& app);

}  // namespace fbt::cli
