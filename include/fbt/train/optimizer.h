// The training optimiser: parameter groups by a documented rule, NorMuon + Adam (the paper's
// recipe, SPEC §6) or AdamW for every parameter (ablation), with schedule-scaled lr and wd.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <torch/optim/adamw.h>

#include "fbt/io/safetensors.h"
#include "fbt/model/model.h"
#include "fbt/train/normuon.h"
#include "fbt/train/train_config.h"

namespace fbt {

/// One group of parameters sharing an update rule and peak hyper-parameters.
struct ParamGroup {
  std::string name;  ///< "normuon", "adam", "adamw_decay" or "adamw_no_decay"
  std::string rule;  ///< which parameters, in words (printed at the start of a run)
  std::vector<std::pair<std::string, torch::Tensor>> params;  ///< (name, parameter)
  double lr = 0, weight_decay = 0;                            ///< peak values, before the schedule's factors
};

/// The grouping rule (SPEC §6). optimizer = normuon:
///   "normuon": every 2-D weight except the embedding `embedding.weight` and an untied head
///              `lm_head.weight` — attention wq, wk, wv, wo and the per-head gate, MLP w_gate,
///              w_up, w_down, fusion w_u, w_g; lr = normuon_lr, wd = normuon_weight_decay;
///   "adam":    everything else — embedding and head, every RMSNorm gain and (Llama family)
///              attention bias; lr = lr, wd 0.
/// optimizer = adamw: "adamw_decay" (every parameter with ≥ 2 dims, wd = weight_decay) and
/// "adamw_no_decay" (1-D gains), both lr = lr. With fusion_lr > 0 (warm starts), "fusion" (Adam,
/// lr = fusion_lr, wd 0) takes the fusion's W_U, W_G and the input-norm gain out of the groups
/// above. Every parameter is in exactly one group; empty groups are dropped.
std::vector<ParamGroup> group_parameters(FBT& model, const TrainConfig& config);

/// The optimiser of a training run over group_parameters(model, config).
class TrainingOptimizer {
 public:
  TrainingOptimizer(FBT& model, const TrainConfig& config);

  /// One update of every parameter with a gradient. Each group's lr is its peak lr ×
  /// `lr_factor` (the schedule, TrainConfig::lr_factor) and its weight decay its peak wd ×
  /// `wd_factor` (AdamC in the cooldown: lr_t / lr_peak; 1 otherwise).
  void step(double lr_factor, double wd_factor);

  /// Hands NorMuon's orthogonalisation to `orthogonalize` (no effect without a NorMuon group).
  void set_orthogonalizer(NorMuon::Orthogonalizer orthogonalize);

  const std::vector<ParamGroup>& groups() const { return groups_; }
  /// A table of the groups: name, parameter count, tensors and their shapes, lr, wd, rule.
  std::string describe() const;

  /// State as named tensors for a checkpoint: Adam/AdamW "<param>.exp_avg", ".exp_avg_sq",
  /// ".step"; NorMuon "<param>.momentum", ".row_second_moment".
  NamedTensors state();
  /// Restores state(); throws fbt::Error naming `path` for a missing or misshapen tensor.
  void load_state(const NamedTensors& tensors, const std::string& path);

 private:
  FBT model_;
  std::vector<ParamGroup> groups_;
  std::unique_ptr<torch::optim::AdamW> adam_;  // the Adam/AdamW groups, in order
  std::unique_ptr<NorMuon> normuon_;           // the "normuon" group, if any
};

}  // namespace fbt
