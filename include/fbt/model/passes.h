// The K-pass training forward ("temporal parallelism", SPEC §5, paper §3.3, Fig. 9).
#pragma once
#include <functional>
#include <vector>

#include <torch/types.h>

#include "fbt/model/model.h"

namespace fbt {

/// Options of one K-pass forward. Noise and mixin are training-time devices: evaluation and
/// the exactness tests pass jitter = 0 and mixin_prob = 0.
struct PassOptions {
  int64_t passes = 1;               ///< K ≥ 1; pass 1 is standard teacher forcing
  double jitter = 0.0;              ///< σ of Uniform(-σ, σ) noise added to the carried state (paper: 0.02)
  double mixin_prob = 0.0;          ///< per sequence and pass ≥ 2: probability of a plain prefix
  bool mixin_per_sequence = false;  ///< one prefix draw per sequence for all passes (else one per pass)
  bool detach = false;              ///< stop gradients between passes (ablation; paper: off)
  bool checkpoint = false;          ///< recompute each pass's stack in backward (activation checkpointing)
  double later_weight = 1.0;        ///< λ in L1 + λ·mean(L2..LK)
  double z_loss = 0.0;              ///< coefficient of mean(logsumexp(logits)²) added to every pass's loss
  bool keep_logits = false;         ///< return each pass's logits [B,T,V]
  bool keep_states = false;         ///< return each pass's feedback states [B,T,D]
  /// Optional [B] int64: positions t < plain_prefix[b] are plain in every pass (overrides the
  /// random mixin). Used for "plain prompt, then fused" scoring and the fused(k) prefill.
  torch::Tensor plain_prefix;
  /// Generator for jitter and mixin draws; the default CPU generator when undefined.
  c10::optional<at::Generator> generator;
};

/// Results of a K-pass forward.
struct PassOutput {
  std::vector<torch::Tensor> losses;    ///< per pass: mean cross-entropy in nats/token (scalar)
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

/// One pass of the K-pass recurrence over a span of positions [B,T]: `pass(k, before)` runs pass k
/// (1-based). For k = 1 `before` is undefined and every position takes its plain input; for k ≥ 2
/// before [B,T,D] holds, at position t, pass k−1's feedback state at t−1 (the input each position
/// fuses with where it is not plain). Returns pass k's feedback states [B,T,D]; for k = K it may
/// return an undefined tensor (nothing reads it).
using PassStep = std::function<torch::Tensor(int64_t k, const torch::Tensor& before)>;

/// The K-pass recurrence (SPEC §5, paper §3.3), the one loop that training (forward_passes),
/// held-out loss, scoring, the probes and every prefill (whole or chunked, libtorch or CpuDecoder)
/// run: pass 1 plain, then pass k fed pass k−1's states moved one position right.
/// `carry` continues a sequence a span at a time (chunked prefill): nullptr, or an empty vector,
/// for a span that starts the sequence (zeros before position 0, which is plain); otherwise its
/// K−1 entries [B,1,D] are each pass's state just before the span. On return it holds each pass's
/// state at the span's last position. Throws fbt::Error if passes < 1.
void run_passes(int64_t passes, const PassStep& pass, std::vector<torch::Tensor>* carry = nullptr);

}  // namespace fbt
