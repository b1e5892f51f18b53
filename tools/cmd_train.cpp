// `fbt train`: parse flags into TrainOptions and run the training loop.
#include <iostream>

#include "cli_common.h"
#include "commands.h"
#include "fbt/train/trainer.h"
#include "fbt/util/error.h"
#include "fbt/util/out_of_memory.h"

namespace fbt::cli {

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train an FBT model on a prepared dataset");
  auto opt = std::make_shared<TrainOptions>();
  cmd->add_option("--config", opt->config, "Preset (debug, small, 1b) or JSON file {model, train}")
      ->default_str("small");
  cmd->add_option("--data", opt->data_dir,
                  "Dataset directory from `fbt prepare` (from `fbt prepare --conversations`: supervised fine-tuning "
                  "on whole conversations, the loss on the assistant tokens)")
      ->required();
  cmd->add_option("--out", opt->out_dir, "Run directory")->required();
  cmd->add_option("--set", opt->sets, "Override a setting: model.KEY=VALUE or train.KEY=VALUE (repeatable)");
  cmd->add_option("--steps", opt->steps, "Training steps (overrides train.steps)")->check(integer_range(1, kMaxCount));
  cmd->add_flag("--resume", opt->resume, "Continue the run in --out from its latest checkpoint");
  cmd->add_flag("--force", opt->force, "Replace a different run already in --out");
  cmd->add_option("--init-from", opt->init_from,
                  "Warm start: a checkpoint (run/step dir or model.safetensors, e.g. from fbt import) whose weights "
                  "and model config the run starts from, with the warm-start training settings (on a conversation "
                  "dataset the SFT ones: K=3 on every step; docs/models.md)");
  cmd->add_flag("--verify", opt->verify_data,
                "Check the data shards' full sha256 against meta.json (always: token counts and a sampled hash)");
  cmd->add_option("--device", opt->device, "cpu, cuda or auto (CUDA when available)")->capture_default_str();
  add_threads_option(cmd);
  // Data parallelism: launched with WORLD_SIZE > 1 (scripts/launch.sh, torchrun); see docs/training.md.
  cmd->add_option("--dist-backend", opt->dist.backend, "c10d backend: auto (nccl for cuda, gloo for cpu), gloo, nccl")
      ->capture_default_str();
  cmd->add_option("--dist-timeout", opt->dist.timeout_s, "Seconds before a missing or stuck rank fails the others")
      ->capture_default_str()
      ->check(integer_range(1, 1000000));
  cmd->add_option("--bucket-mb", opt->dist.bucket_mb, "Gradient all-reduce bucket size, MiB")
      ->capture_default_str()
      ->check(number_range(0, 65536, /*lo_open=*/true));
  cmd->add_option("--normuon-orthogonalize", opt->dist.normuon,
                  "replicate (every rank orthogonalises every matrix) or shard (one rank per matrix, broadcast)")
      ->capture_default_str()
      ->check(CLI::IsMember({"replicate", "shard"}));
  cmd->callback([opt] {
    opt->device = parse_device(opt->device).str();  // "auto" -> cuda or cpu
    check_output_dir("--out", opt->out_dir);
    // A run cut short by a signal exits 128 + signal (130, 143) as a killed program would, so
    // scripts can tell it from a finished one; its checkpoint is written and --resume continues.
    TrainResult r;
    try {
      r = run_training(*opt, std::cout);
    } catch (const Error&) {
      throw;  // already names what to fix (the model's and the batch's own allocations included)
    } catch (const std::exception& e) {
      if (!is_out_of_memory(e)) throw;
      throw Error("out of memory while training (" + first_line(e) +
                  "): the activations grow with train.batch_size x the sequence length (train.seq_len, else "
                  "model.context) x model.d_model / model.vocab_size / model.n_layers; lower them, set "
                  "train.activation_checkpointing=true, or reach a large batch by accumulation (train.batch_tokens)");
    }
    if (r.stop_signal != 0) throw CLI::RuntimeError(128 + r.stop_signal);
  });
}

}  // namespace fbt::cli
