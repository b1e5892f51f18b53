// `fbt train`: parse flags into TrainOptions and run the training loop.
#include <iostream>

#include "cli_common.h"
#include "commands.h"
#include "fbt/train/trainer.h"

namespace fbt::cli {

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train an FBT model on a prepared dataset");
  auto opt = std::make_shared<TrainOptions>();
  cmd->add_option("--config", opt->config, "Preset (debug, small, 1b) or JSON file {model, train}")
      ->default_str("small");
  cmd->add_option("--data", opt->data_dir, "Dataset directory from `fbt prepare`")->required();
  cmd->add_option("--out", opt->out_dir, "Run directory")->required();
  cmd->add_option("--set", opt->sets, "Override a setting: model.KEY=VALUE or train.KEY=VALUE (repeatable)");
  cmd->add_option("--steps", opt->steps, "Training steps (overrides train.steps)");
  cmd->add_flag("--resume", opt->resume, "Continue the run in --out from its latest checkpoint");
  cmd->add_flag("--force", opt->force, "Replace a different run already in --out");
  cmd->add_flag("--verify", opt->verify_data,
                "Check the data shards' full sha256 against meta.json (always: token counts and a sampled hash)");
  cmd->add_option("--device", opt->device, "cpu, cuda or auto (CUDA when available)")->capture_default_str();
  // Data parallelism: launched with WORLD_SIZE > 1 (scripts/launch.sh, torchrun); see README.
  cmd->add_option("--dist-backend", opt->dist.backend, "c10d backend: auto (nccl for cuda, gloo for cpu), gloo, nccl")
      ->capture_default_str();
  cmd->add_option("--dist-timeout", opt->dist.timeout_s, "Seconds before a missing or stuck rank fails the others")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--bucket-mb", opt->dist.bucket_mb, "Gradient all-reduce bucket size, MiB")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--normuon-orthogonalize", opt->dist.normuon,
                  "replicate (every rank orthogonalises every matrix) or shard (one rank per matrix, broadcast)")
      ->capture_default_str()
      ->check(CLI::IsMember({"replicate", "shard"}));
  cmd->callback([opt] {
    opt->device = parse_device(opt->device).str();  // "auto" -> cuda or cpu
    // A run cut short by a signal exits 128 + signal (130, 143) as a killed program would, so
    // scripts can tell it from a finished one; its checkpoint is written and --resume continues.
    if (const auto r = run_training(*opt, std::cout); r.stop_signal != 0) throw CLI::RuntimeError(128 + r.stop_signal);
  });
}

}  // namespace fbt::cli
