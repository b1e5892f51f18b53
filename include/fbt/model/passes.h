// The K-pass training forward ("temporal parallelism", SPEC §5, paper §3.3, Fig. 9).
#pragma once
#include <vector>

#include <torch/types.h>

#include "fbt/model/model.h"

namespace fbt {

/// Options of one K-pass forward. Noise and mixin are training-time devices: evaluation and
/// the exactness tests pass jitter = 0 and mixin_prob = 0.
struct PassOptions {
  int64_t passes = 1;          ///< K ≥ 1; pass 1 is standard teacher forcing
  double jitter = 0.0;         ///< σ of Uniform(-σ, σ) noise added to the carried state (paper: 0.02)
  double mixin_prob = 0.0;     ///< per sequence and pass ≥ 2: probability of a plain prefix
  bool mixin_per_sequence = false;  ///< one prefix draw per sequence for all passes (else one per pass)
  bool detach = false;         ///< stop gradients between passes (ablation; paper: off)
  bool checkpoint = false;     ///< recompute each pass's stack in backward (activation checkpointing)
  double later_weight = 1.0;   ///< λ in L1 + λ·mean(L2..LK)
  double z_loss = 0.0;         ///< coefficient of mean(logsumexp(logits)²) added to every pass's loss
  bool keep_logits = false;    ///< return each pass's logits [B,T,V]
  bool keep_states = false;    ///< return each pass's feedback states [B,T,D]
  /// Optional [B] int64: positions t < plain_prefix[b] are plain in every pass (overrides the
  /// random mixin). Used for "plain prompt, then fused" scoring and the fused(k) prefill.
  torch::Tensor plain_prefix;
  /// Generator for jitter and mixin draws; the default CPU generator when undefined.
  c10::optional<at::Generator> generator;
};

/// Results of a K-pass forward.
struct PassOutput {
  std::vector<torch::Tensor> losses;  ///< per pass: mean cross-entropy in nats/token (scalar)
  std::vector<torch::Tensor> z_losses;  ///< per pass: z_loss · mean(logsumexp²) (scalar), if z_loss > 0
  torch::Tensor loss;  ///< L1 + λ·mean(L2..LK), L_k = cross-entropy + z-loss (scalar); undefined without targets
  std::vector<torch::Tensor> logits;  ///< per pass [B,T,V], if keep_logits
  std::vector<torch::Tensor> states;  ///< per pass feedback states h_k [B,T,D], if keep_states
};

/// K-pass forward over tokens [B,T] (SPEC §5):
///   h1 = Stack(plain(e)); for k = 2..K: u = fuse(shift_right(h_{k-1} + noise), e), with
///   position 0, document starts and the (mixin) plain prefix kept plain; h_k = Stack(u).
/// `targets` [B,T] int64 (next tokens; -1 is ignored) gives per-pass losses; pass an undefined
/// tensor to get only logits/states. Without noise and mixin, pass k at position t equals the
/// sequential soft recurrence exactly for t < k (0-based); with a plain prefix p, for t < p+k-1.
/// Throws fbt::Error if K < 1 or T exceeds the model context.
PassOutput forward_passes(FBT& model, const torch::Tensor& tokens, const torch::Tensor& targets,
                          const PassOptions& options);

/// Feedback states for the next pass: shift_right(h) [B,T,D] with zeros at position 0.
torch::Tensor shift_right(const torch::Tensor& h);

/// The stack input of a pass after the first (SPEC §4–5; FBT::feedback_input): position t takes
/// fuse(state[t-1], e_n[t]) unless plain[b,t] is true, where it takes the plain input (e_n[t];
/// RMSNorm_in(e_n[t]) with model.input_norm = listing3). e_n [B,T,D] is FBT::plain_input (the
/// normalised embedding, or the raw one for block llama and for listing3), state [B,T,D] the
/// previous pass's feedback states (unshifted), plain [B,T] bool (FBT::plain_positions, possibly
/// with a plain prefix). Returns [B,T,D].
torch::Tensor fused_pass_input(FBT& model, const torch::Tensor& e_n, const torch::Tensor& state,
                               const torch::Tensor& plain);

}  // namespace fbt
