// A training checkpoint: one step directory (run_dir.h) holding the weights, the optimiser state
// and trainer.json (counters, RNG and loader state), read back with every field checked, and the
// choice of the checkpoint `fbt train --resume` continues from (the newest intact one).
#pragma once
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fbt/io/checkpoint.h"
#include "fbt/io/safetensors.h"

namespace fbt {

/// What trainer.json records: the run's counters after `step` steps and the state that makes a
/// resumed run repeat an uninterrupted one (pass-schedule RNG, jitter/mixin generators, loader).
struct TrainerState {
  int64_t step = 0;                           ///< optimiser steps completed (skipped ones included)
  int64_t tokens = 0;                         ///< training tokens of the applied steps
  int64_t token_equivalent = 0;               ///< Σ tokens × passes
  int64_t consecutive_bad = 0;                ///< non-finite steps in a row at the end
  std::map<int64_t, int64_t> pass_counts;     ///< applied steps per K
  double wall_s = 0;                          ///< wall-clock seconds of the run up to this checkpoint
  std::string pass_rng;                       ///< std::mt19937_64 state, as its operator<< writes it
  std::vector<std::string> torch_generators;  ///< CPU generator state per rank, hex
  nlohmann::json loader;                      ///< BatchLoader::state()
  int64_t world_size = 1;                     ///< processes of the run that wrote it

  /// trainer.json's object, with "checksum": the sha256 of the compact dump of the other fields.
  nlohmann::json to_json() const;
  /// Parses and checks trainer.json's object: every field present with its JSON type, counters
  /// >= 0, step >= 1, pass_rng a std::mt19937_64 state, generators hex, and the checksum when
  /// present (files written before it existed have none). Throws fbt::Error naming `path` and
  /// the field.
  static TrainerState from_json(const nlohmann::json& j, const std::string& path);
};

/// Decodes the hex of a CPU generator state (TrainerState::torch_generators) to uint8 [N];
/// throws fbt::Error naming `what` for odd length or a non-hex digit.
torch::Tensor generator_state_from_hex(const std::string& hex, const std::string& what);
/// uint8 [N] -> lowercase hex.
std::string generator_state_to_hex(const torch::Tensor& bytes);

/// One step directory read into memory and checked: both safetensors files (size, header and
/// checksum: safetensors.h), trainer.json (TrainerState::from_json), and that all three belong
/// to the same step.
struct TrainingCheckpoint {
  std::string dir;
  TensorFile model, optimizer;
  CheckpointInfo info;  ///< model.safetensors' metadata
  TrainerState trainer;
};

/// Reads the step directory `dir`. Throws fbt::Error naming the file at fault.
TrainingCheckpoint read_training_checkpoint(const std::string& dir);

/// The checkpoint `--resume` continues from: the step directory RUNDIR/latest names, or, when
/// it is damaged (any file missing, truncated, corrupt or inconsistent), the newest intact
/// older one; when `latest` is empty or names no directory, the newest intact step directory.
/// Each checkpoint passed over and a bad `latest` are reported on `warnings` ("warning: ...").
/// Throws fbt::Error listing every step directory tried and what is wrong with it when none
/// is intact, or saying the run has no checkpoint yet.
TrainingCheckpoint read_resume_checkpoint(const std::string& run_dir, std::ostream& warnings);

/// Step directories of RUNDIR (step-NNNNNNN, complete: not *.tmp), newest first.
std::vector<std::string> step_dirs_newest_first(const std::string& run_dir);

}  // namespace fbt
