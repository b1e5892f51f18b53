// `fbt train`: the training loop with K-pass batches, validation, checkpoints and exact resume.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace fbt {

/// Everything `fbt train` takes from its command line.
struct TrainOptions {
  std::string config = "small";     ///< preset name or JSON file (RunConfig::load)
  std::vector<std::string> sets;    ///< `--set key=value` overrides, applied in order
  std::string data_dir;             ///< prepared by `fbt prepare` (train.bin, val.bin, meta.json)
  std::string out_dir;              ///< the run directory (layout in run_dir.h)
  int64_t steps = 0;                ///< overrides train.steps when > 0
  bool resume = false;              ///< continue from RUNDIR/latest
  bool force = false;               ///< replace a different run already in out_dir
  std::string device = "cpu";       ///< "cpu" or "cuda"
};

/// Summary of a finished (or interrupted) run.
struct TrainResult {
  int64_t last_step = 0;            ///< steps completed
  bool interrupted = false;         ///< stopped by SIGINT/SIGTERM (checkpoint written)
  std::vector<double> losses;       ///< total loss of every step run in this process (NaN if skipped)
  double val_standard = 0, val_fused1 = 0;  ///< last validation, nats/token
};

/// Runs or resumes a training run (SPEC §5): per step, draws K from the pass schedule, runs
/// the K-pass forward with jitter and prefix mixin, steps the optimiser, appends a line to
/// RUNDIR/metrics.jsonl; validates every eval_every steps (standard and fused(1) val loss,
/// nats/token and bits/byte); checkpoints every checkpoint_every steps, at the end and on
/// SIGINT/SIGTERM (after finishing the step). Non-finite losses skip the update; after
/// max_bad_steps in a row it throws. Progress goes to `log`.
/// Throws fbt::Error for bad input: unknown config keys, missing data, a run directory that
/// holds a different run (without resume/force), a resume whose config differs.
TrainResult run_training(const TrainOptions& options, std::ostream& log);

}  // namespace fbt
