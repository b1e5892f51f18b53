// Training run settings: optimiser, LR schedule, K-pass schedule (SPEC §5), logging, checkpoints.
#pragma once
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "fbt/config.h"

namespace fbt {

/// One phase of the pass schedule: until `until_fraction` of the steps, each batch runs K
/// passes with probability passes_probabilities[K].
struct PassPhase {
  double until_fraction = 1.0;
  std::map<int64_t, double> passes_probabilities{{1, 1.0}};
};

/// The per-batch choice of K (SPEC §5 "pass schedule"). Default: K=1 until 75% of the steps,
/// then K=2 with probability 0.88 and K=3 with 0.12 (the paper's 75/22/3 overall).
struct PassSchedule {
  std::vector<PassPhase> phases{{0.75, {{1, 1.0}}}, {1.0, {{2, 0.88}, {3, 0.12}}}};

  /// K for step `step` of `total_steps`, drawn from `rng` (one uniform draw per call).
  int64_t draw(int64_t step, int64_t total_steps, std::mt19937_64& rng) const;
  /// Expected passes per step over the whole run (token-equivalent compute / tokens).
  double expected_passes() const;
  /// Throws fbt::Error naming `what` if phases are unsorted, do not end at 1, or a phase's
  /// probabilities are negative, do not sum to 1, or name K < 1.
  void validate(const std::string& what) const;
  nlohmann::json to_json() const;
  static PassSchedule from_json(const nlohmann::json& j, const std::string& what);
};

/// Run-time settings of `fbt train` (the model's are in ModelConfig).
struct TrainConfig {
  int64_t steps = 200;
  int64_t batch_size = 8;        ///< sequences per step
  int64_t seq_len = 0;           ///< tokens per sequence; 0 = the model context
  std::string optimizer = "adamw";
  double lr = 1e-3;              ///< peak learning rate
  double min_lr_fraction = 0.1;  ///< cosine decays to lr · min_lr_fraction
  int64_t warmup_steps = 20;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95;
  double grad_clip = 1.0;        ///< global-norm clip; 0 = off
  uint64_t seed = 1337;
  PassSchedule pass_schedule;
  double jitter = 0.02;          ///< σ of the state noise in passes ≥ 2 (SPEC §5)
  double mixin_prob = 0.3;       ///< prefix-mixin probability per sequence and pass
  bool detach = false;           ///< stop gradients between passes (ablation)
  bool activation_checkpointing = false;
  double later_weight = 1.0;     ///< λ
  int64_t eval_every = 100;      ///< steps between validations; 0 = only at the end
  int64_t eval_tokens = 32768;   ///< validation tokens per evaluation
  int64_t checkpoint_every = 100;  ///< steps between checkpoints (and one at the end)
  int64_t max_bad_steps = 10;    ///< consecutive non-finite losses before stopping with an error
  int64_t log_every = 10;        ///< steps between plain progress lines (non-terminal output)

  template <class F>
  void visit(F&& f) {
    f("steps", steps);
    f("batch_size", batch_size);
    f("seq_len", seq_len);
    f("optimizer", optimizer);
    f("lr", lr);
    f("min_lr_fraction", min_lr_fraction);
    f("warmup_steps", warmup_steps);
    f("weight_decay", weight_decay);
    f("beta1", beta1);
    f("beta2", beta2);
    f("grad_clip", grad_clip);
    f("seed", seed);
    f("pass_schedule", pass_schedule);
    f("jitter", jitter);
    f("mixin_prob", mixin_prob);
    f("detach", detach);
    f("activation_checkpointing", activation_checkpointing);
    f("later_weight", later_weight);
    f("eval_every", eval_every);
    f("eval_tokens", eval_tokens);
    f("checkpoint_every", checkpoint_every);
    f("max_bad_steps", max_bad_steps);
    f("log_every", log_every);
  }
  /// Learning rate at `step`: linear warmup to lr, then cosine to lr · min_lr_fraction.
  double lr_at(int64_t step) const;
  /// Throws fbt::Error naming the field for an inconsistent setting.
  void validate() const;
};

/// A whole run's configuration: {"model": {...}, "train": {...}} in JSON.
struct RunConfig {
  ModelConfig model;
  TrainConfig train;

  nlohmann::json to_json() const;
  /// `spec` is a preset name (debug, small, 1b: model preset with default training settings)
  /// or a JSON file {"model": PRESET-or-object, "train": object}; unknown keys are errors.
  static RunConfig load(const std::string& spec);
  /// Applies one `--set key=value`: key is `model.FIELD` or `train.FIELD` (or a bare FIELD if
  /// it names exactly one), value parsed as JSON (bare words as strings). Throws fbt::Error
  /// naming the key for an unknown key or a value of the wrong type.
  void set(const std::string& assignment);
};

// PassSchedule is a structured field of TrainConfig: JSON conversion for json_fields.h.
void to_json(nlohmann::json& j, const PassSchedule& s);
void from_json(const nlohmann::json& j, PassSchedule& s);

}  // namespace fbt
