// Training run settings: optimiser, LR schedule, K-pass schedule (SPEC §5), logging, checkpoints.
#pragma once
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "fbt/model/config.h"
#include "fbt/model/precision.h"

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

/// The optimiser recipe (SPEC §6): NorMuon for hidden matrices + Adam for the rest (paper), or
/// AdamW for every parameter (ablation).
enum class OptimizerKind { NorMuon, AdamW };
/// Learning-rate schedule: warmup-stable-decay (paper) or warmup + cosine (ablation).
enum class LrSchedule { WSD, Cosine };
/// Shape of the WSD cooldown from 1 to 0 over progress p ∈ [0, 1]: 1 − p or 1 − sqrt(p).
enum class CooldownShape { Linear, OneMinusSqrt };
/// How often the prefix mixin draws a sequence's plain prefix (SPEC §5): anew in every
/// pass ≥ 2 (per_pass, the default), or once per sequence for all its passes (per_sequence:
/// then SPEC §5's exactness for t < p + k − 1 holds for the training forward too).
enum class MixinDraw { PerPass, PerSequence };

template <>
const EnumNames<OptimizerKind>& enum_names<OptimizerKind>();
template <>
const EnumNames<LrSchedule>& enum_names<LrSchedule>();
template <>
const EnumNames<CooldownShape>& enum_names<CooldownShape>();
template <>
const EnumNames<MixinDraw>& enum_names<MixinDraw>();

/// Upper bounds of TrainConfig's settings (TrainConfig::validate): counts of steps or tokens,
/// sequences per micro-batch, tokens per sequence, and real-valued factors (learning rates, decay,
/// z-loss, jitter, λ, clip): each far from int64 overflow or fp32's range.
constexpr int64_t kMaxCount = int64_t{1} << 40;
constexpr int64_t kMaxBatchSize = int64_t{1} << 24;
constexpr int64_t kMaxSequence = int64_t{1} << 24;
constexpr double kMaxSettingValue = 1e6;

/// Run-time settings of `fbt train` (the model's are in ModelConfig). Defaults are the paper's
/// recipe (SPEC §5–6) except the batch, which `preset("1b")` sets to the paper's.
struct TrainConfig {
  int64_t steps = 200;       ///< optimiser steps
  int64_t batch_size = 8;    ///< sequences per forward (micro-batch)
  int64_t seq_len = 0;       ///< tokens per sequence; 0 = the model context
  int64_t batch_tokens = 0;  ///< tokens per optimiser step, reached by gradient accumulation over
                             ///< batch_tokens / (batch_size · seq_len) micro-batches; 0 = one
                             ///< micro-batch per data-parallel process
  OptimizerKind optimizer = OptimizerKind::NorMuon;
  double lr = 5e-4;                  ///< peak lr of Adam (normuon recipe) or of AdamW (all parameters)
  double beta1 = 0.9, beta2 = 0.95;  ///< Adam/AdamW betas
  double adam_eps = 1e-10;
  double weight_decay = 0.1;  ///< AdamW only (matrices); Adam in the normuon recipe has none
  double normuon_lr = 1e-2;   ///< peak lr of NorMuon
  double fusion_lr = 0.0;     ///< > 0: the fusion (W_U, W_G) and the input-norm gain form their own
                              ///< Adam group with this peak lr and no weight decay; 0: they stay
                              ///< in the recipe's groups (warm starts give the new weights more)
  double normuon_weight_decay = 0.01;
  double normuon_momentum = 0.95;
  double normuon_beta2 = 0.95;
  int64_t ns_steps = 5;  ///< Newton–Schulz iterations
  LrSchedule schedule = LrSchedule::WSD;
  int64_t warmup_steps = 200;       ///< linear warmup (both schedules)
  double cooldown_fraction = 0.25;  ///< WSD: the last fraction of steps decays to zero
  CooldownShape cooldown_shape = CooldownShape::Linear;
  double min_lr_fraction = 0.1;  ///< cosine: decays to lr · min_lr_fraction
  double z_loss = 1e-5;          ///< WSD cooldown only: z_loss · mean(logsumexp(logits)²) per pass
  bool adamc = true;             ///< WSD cooldown only: weight decay × lr_t / lr_peak
  double grad_clip = 0.0;        ///< global-norm clip; 0 = off (paper)
  Precision precision = Precision::Auto;
  uint64_t seed = 1337;
  PassSchedule pass_schedule;
  double jitter = 0.02;     ///< σ of the state noise in passes ≥ 2 (SPEC §5)
  double mixin_prob = 0.3;  ///< prefix-mixin probability per sequence (and pass, if per_pass)
  MixinDraw mixin_draw = MixinDraw::PerPass;
  bool detach = false;  ///< stop gradients between passes (ablation)
  bool activation_checkpointing = false;
  double later_weight = 1.0;       ///< λ
  int64_t eval_every = 100;        ///< steps between validations; 0 = only at the end
  int64_t eval_tokens = 32768;     ///< validation tokens per evaluation (windows spread over val)
  int64_t checkpoint_every = 100;  ///< steps between checkpoints (and one at the end)
  int64_t max_bad_steps = 10;      ///< consecutive non-finite losses before stopping with an error
  int64_t log_every = 10;          ///< steps between plain progress lines (non-terminal output)

  template <class F>
  void visit(F&& f) {
    f("steps", steps);
    f("batch_size", batch_size);
    f("seq_len", seq_len);
    f("batch_tokens", batch_tokens);
    f("optimizer", optimizer);
    f("lr", lr);
    f("beta1", beta1);
    f("beta2", beta2);
    f("adam_eps", adam_eps);
    f("weight_decay", weight_decay);
    f("normuon_lr", normuon_lr);
    f("fusion_lr", fusion_lr);
    f("normuon_weight_decay", normuon_weight_decay);
    f("normuon_momentum", normuon_momentum);
    f("normuon_beta2", normuon_beta2);
    f("ns_steps", ns_steps);
    f("schedule", schedule);
    f("warmup_steps", warmup_steps);
    f("cooldown_fraction", cooldown_fraction);
    f("cooldown_shape", cooldown_shape);
    f("min_lr_fraction", min_lr_fraction);
    f("z_loss", z_loss);
    f("adamc", adamc);
    f("grad_clip", grad_clip);
    f("precision", precision);
    f("seed", seed);
    f("pass_schedule", pass_schedule);
    f("jitter", jitter);
    f("mixin_prob", mixin_prob);
    f("mixin_draw", mixin_draw);
    f("detach", detach);
    f("activation_checkpointing", activation_checkpointing);
    f("later_weight", later_weight);
    f("eval_every", eval_every);
    f("eval_tokens", eval_tokens);
    f("checkpoint_every", checkpoint_every);
    f("max_bad_steps", max_bad_steps);
    f("log_every", log_every);
  }

  /// Training settings of a model preset: the defaults (the paper's recipe); for "small" the
  /// winner of the CPU-scale Setting-A sweep (docs/results.md): K=2/3 (0.88/0.12) on every step,
  /// Adam lr 3e-3, 100 warmup steps; for "1b" the paper's scale (Appendix A, SPEC §6):
  /// sequences of 8192 tokens, micro-batches of 4, 294,912 tokens (36 sequences, the multiple
  /// of 8192 nearest 300K) per step by accumulation, 339,085 steps (100B tokens). Throws
  /// fbt::Error for an unknown name.
  static TrainConfig preset(const std::string& name);

  /// Training settings of a warm start (`fbt train --init-from`): continued training of a
  /// pretrained model (SPEC §5 "switch feedback on late", from a standard checkpoint as the
  /// first author's reproduction does) with the feedback phase of the recipe from step 0:
  /// K=2 (0.88) / K=3 (0.12) on every step, jitter 0.02, prefix mixin off (the reproduction's
  /// choice); AdamW at lr 1e-4 with weight decay 0.01 for the pretrained weights (a fine-tuning
  /// lr, a small fraction of the 1e-3–3e-3 peaks such models are pretrained with: NorMuon's
  /// fixed-size updates and pretraining lrs would move them far from the checkpoint before
  /// the fusion is useful), and a separate Adam group at fusion_lr 1e-5 for the fusion and the
  /// input norm (kept apart as the reproduction does; 1e-5 is the residual fusion's, which
  /// starts as the base model: the SmolLM2 sweep of docs/results.md measured 1e-3 breaking the
  /// fused modes by +2.7 nats in 10 steps and 1e-4 costing 0.03; a `glu` warm start, whose fused
  /// modes start far off, wants ~1e-3 via --set train.fusion_lr); 20 warmup steps, WSD with
  /// the usual 25% cooldown; 200 steps of 8 sequences of min(512, `context`) tokens.
  static TrainConfig warm_start(int64_t context);

  /// Training settings of supervised fine-tuning (`fbt train --init-from` on a conversation
  /// dataset, sft_data.h): warm_start's, with K = 3 on every step (the paper's post-training
  /// "with three forward passes throughout" and the first author's SFT), jitter 0.02, prefix
  /// mixin off, and conversations of up to `context` tokens (seq_len = context).
  static TrainConfig sft(int64_t context);

  /// Multiplier of every group's peak lr at 0-based `step` (SPEC §6). Warmup: (step+1)/W for
  /// step < W. WSD: 1 until the cooldown start S = steps − C, C = round(cooldown_fraction ·
  /// steps); then 1 − p (linear) or 1 − sqrt(p) with p = (step − S)/C, reaching 0 at step =
  /// steps. Cosine: min_lr_fraction + (1 − min_lr_fraction)·(1 + cos(π q))/2 with q = (step −
  /// W)/(steps − W) clamped to [0, 1]. Both: the minimum of the warmup ramp and the decay.
  double lr_factor(int64_t step) const;
  /// True from the WSD cooldown start S on (never for cosine): z-loss and AdamC apply.
  bool in_cooldown(int64_t step) const;
  /// Micro-batches per optimiser step, over all `world_size` data-parallel processes, for
  /// sequences of `seq_tokens` tokens: batch_tokens / (batch_size · seq_tokens), or without
  /// batch_tokens one micro-batch per process (`world_size`: the global batch is then world_size ·
  /// batch_size sequences). Throws fbt::Error naming train.batch_tokens if it is not a multiple
  /// of batch_size · seq_tokens.
  int64_t accumulation(int64_t seq_tokens, int64_t world_size = 1) const;
  /// Throws fbt::Error naming the setting ("train.lr must be in (0, 1e+06] (got 1e+39)") for a
  /// value outside its range: steps in [1, kMaxCount], batch_size in [1, kMaxBatchSize], seq_len in
  /// [0, kMaxSequence], batch_tokens, warmup_steps, eval/checkpoint intervals in [0, kMaxCount];
  /// learning rates, weight decays, z_loss, grad_clip, jitter, later_weight finite in [0,
  /// kMaxSettingValue] (learning rates > 0); betas and momentum in [0, 1); fractions and
  /// mixin_prob in [0, 1]; adam_eps in (0, 1]; ns_steps in [1, 1000]; a valid pass schedule.
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

/// Refuses a CPU training run that cannot fit in `memory_bytes` (the machine's RAM) before
/// anything is allocated: a process that overcommits is killed by the kernel, not given an
/// error. Lower bounds only: the weights, their gradients and one optimiser moment (3 x 4 bytes
/// per parameter), and per micro-batch of batch_size x `seq_tokens` tokens the fp32 logits and
/// their log-softmax (2 x 4 x vocab_size bytes per token). Throws fbt::Error naming the settings
/// that size the larger part (model.* or train.batch_size / train.seq_len) and both estimates.
void check_training_memory(const RunConfig& rc, int64_t seq_tokens, int64_t memory_bytes);

// PassSchedule is a structured field of TrainConfig: JSON conversion for json_fields.h.
void to_json(nlohmann::json& j, const PassSchedule& s);
void from_json(const nlohmann::json& j, PassSchedule& s);

}  // namespace fbt
