// `fbt train`: the training loop with K-pass batches, validation, checkpoints and exact resume.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "fbt/dist/communicator.h"
#include "fbt/model/passes.h"
#include "fbt/train/train_config.h"

namespace fbt {

/// Everything `fbt train` takes from its command line.
struct TrainOptions {
  std::string config;             ///< preset name or JSON file (RunConfig::load); empty = "small";
                                  ///< must be empty with resume (the stored config is used)
  std::vector<std::string> sets;  ///< `--set key=value` overrides, applied in order
  std::string data_dir;           ///< prepared by `fbt prepare` (train.bin, val.bin, meta.json)
  std::string out_dir;            ///< the run directory (layout in run_dir.h)
  int64_t steps = 0;              ///< overrides train.steps when > 0
  bool resume = false;            ///< continue from RUNDIR/latest
  std::string init_from;          ///< warm start: a checkpoint (model.safetensors, step or run
                                  ///< directory) whose weights and model config a new run starts
                                  ///< from, with TrainConfig::warm_start's settings + `sets`
  bool force = false;             ///< replace a different run already in out_dir
  bool verify_data = false;       ///< check the shards' full sha256 against meta.json (open_split)
  std::string device = "cpu";     ///< "cpu" or "cuda" (`fbt train --device auto` resolves to one) (a data-parallel rank
                                  ///< takes cuda:LOCAL_RANK)
  DistributedOptions dist;        ///< used when launched with WORLD_SIZE > 1 (distributed.h)
};

/// Summary of a finished (or interrupted) run.
struct TrainResult {
  int64_t last_step = 0;                    ///< steps completed
  int stop_signal = 0;                      ///< SIGINT/SIGTERM that stopped the run early (checkpoint written), else 0
  std::vector<double> losses;               ///< total loss of every step run in this process (NaN if skipped)
  bool validated = false;                   ///< whether this process ran a validation
  double val_standard = 0, val_fused1 = 0;  ///< last validation, nats/token
};

/// Runs or resumes a training run (SPEC §5): per step, draws K from the pass schedule, runs
/// the K-pass forward with jitter and prefix mixin, steps the optimiser, appends a line to
/// RUNDIR/metrics.jsonl; validates every eval_every steps (standard and fused(1) val loss,
/// nats/token and bits/byte); checkpoints every checkpoint_every steps, at the end and on
/// SIGINT/SIGTERM (after finishing the step; `stop_signal` says which). After every checkpoint
/// RUNDIR/run.json gets a `progress` object: step, tokens, token-equivalent compute (Σ tokens·K)
/// and its ratio, realised pass fractions, wall-clock seconds over all resumes (`wall_s`) and the
/// last validation. Non-finite losses skip the update; after max_bad_steps in a row it throws.
/// Progress goes to `log`.
///
/// Data parallel (WORLD_SIZE > 1 in the environment, torchrun's variables; scripts/launch.sh):
/// every rank runs this function with the same options. The global batch is batch_tokens, or
/// without it one micro-batch of batch_size per rank (world_size · batch_size sequences; run.json
/// records it as `global_batch` and a resume must keep it). Its micro-batches come from one seeded
/// window stream and rank r computes the r-th contiguous share of them (accumulating batch_tokens
/// / (world_size · batch_size · seq_len) micro-batches, or 1), so the loss sequence matches a single
/// process with the same global batch up to fp32 summation order
/// (jitter and mixin draws excepted: each rank has its own generator). Gradients are summed in
/// buckets during the last micro-batch's backward (gradient_sync.h); K comes from the pass RNG,
/// identical on every rank. Rank 0 alone logs, validates and writes the run directory; resume
/// needs the same world size and RUNDIR readable by every rank. A dead or stuck peer makes the
/// others throw within dist.timeout_s.
/// Warm start (`init_from`): the model config is the checkpoint's (with `model.*` sets on top,
/// e.g. a longer context), the training settings TrainConfig::warm_start's (with `train.*`
/// sets), the weights the checkpoint's (fusion included: an import sets them by its rule,
/// hf_import.h; `fbt import` defaults to fusion residual, W_U = 0, so a warm start from an import
/// begins as the base model in every mode) and the optimiser state fresh; the dataset's tokenizer
/// must be the checkpoint's. `--set model.fusion=residual` on a checkpoint with another fusion
/// sets W_U = 0: the warm start then begins as the checkpoint's standard mode in every mode.
/// run.json records the checkpoint under `init_from`; --resume continues such a run as any other.
/// Throws fbt::Error for bad input: unknown config keys, missing data, a run directory that
/// holds a different run (without resume/force), a resume whose config or world size differs,
/// micro-batches per step not divisible by WORLD_SIZE, bad WORLD_SIZE/RANK/MASTER_* variables.
TrainResult run_training(const TrainOptions& options, std::ostream& log);

/// The K-pass options of one training step (SPEC §5–6): `passes`, the run's jitter, mixin,
/// detach, activation checkpointing and λ, and the z-loss only in the WSD cooldown. The
/// generator is left unset.
PassOptions training_pass_options(const TrainConfig& config, int64_t passes, bool cooldown);

}  // namespace fbt
