// Held-out loss vs number of fused prefill passes (SPEC §8, paper Fig. 4) on a token shard or on
// SFT conversations: the training run's validation and `fbt eval-loss` (whose decoding rows,
// eval/loss.h, come in as LossRow).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fbt/data/sft_data.h"
#include "fbt/data/shards.h"
#include "fbt/data/tokenizer.h"
#include "fbt/model/model.h"

namespace fbt {

/// One evaluated mode.
struct LossResult {
  std::string name;  ///< "passes=p" (loss after p fused prefill passes), "sequential", "decode standard", "decode soft"
  double nats_per_token;  ///< mean next-token cross-entropy, nats per target token
  double bits_per_byte;   ///< total nats / ln 2 / UTF-8 bytes of the targets (NaN if 0 bytes)
  int64_t tokens;         ///< target tokens scored
};

/// A further row of evaluate_loss: `logits` maps a batch of windows inputs [b,T] (int64, on the
/// model's device) to logits [b,T,V] scored against the same targets as the passes.
struct LossRow {
  std::string name;  ///< the row's LossResult::name, e.g. "sequential" (eval/loss.h)
  std::function<torch::Tensor(const torch::Tensor& inputs)> logits;
};

struct LossEvalOptions {
  int64_t max_tokens = 65536;  ///< target tokens to score at most (< 0: the whole shard)
  int64_t passes = 2;          ///< K: report p = 0..K fused prefill passes
  int64_t batch = 8;           ///< windows per forward
  int64_t context = 0;         ///< window length T; 0 = the model context
  /// Also score these rows (eval/loss.h: the sequential soft recurrence, teacher-forced decoding)
  std::vector<LossRow> rows;
};

/// Scores `model` on `shard` with non-overlapping windows of T = options.context (default: the model
/// context) tokens
/// (SequentialLoader: window w predicts tokens[wT+1, wT+T+1); the tail shorter than T is skipped).
/// Returns K+1 results "passes=0".."passes=K", then one per options.rows in order, all on the same
/// windows. passes=0 is the standard forward; passes=p is the last of p+1 passes of
/// forward_passes without jitter or mixin (pass k is the recurrence after k-1 fused passes), all
/// from one forward_passes call per batch.
///
/// Bits per byte divide by the UTF-8 bytes of exactly the scored targets: window w's target
/// tokens [s_w+1, s_w+T+1) (SequentialLoader::window_start; the windows are spread over the
/// shard, not a prefix of it), each window's bytes being the decoded length of its targets
/// after one context token minus that token's own (separators decode to nothing, as in
/// meta.json's split bytes). A character spelled by byte-fallback pieces that straddle a window
/// edge can be counted as U+FFFD. Runs in eval mode under torch::NoGradGuard on the model's
/// device; restores the model's training flag. Throws fbt::Error if passes < 0, batch < 1, the shard's vocab differs
/// from the model's, or the shard holds no full window.
std::vector<LossResult> evaluate_loss(FBT& model, const TokenShard& shard, const Tokenizer& tokenizer,
                                      const LossEvalOptions& options);

/// The SFT validation loss: mean cross-entropy (nats) over the scored (assistant) target tokens of
/// the conversations of `data`, in the order stored, `batch` per forward (SftData::batch: each cut
/// to seq + 1 tokens, padded with `pad_id`), until at least `max_tokens` input tokens have been
/// scored (< 0: all). Returns passes + 1 values: [0] the standard forward, [p] after p fused
/// passes (forward_passes without jitter or mixin, as evaluate_loss). Runs in eval mode without
/// grad on the model's device. Throws fbt::Error if batch < 1 or no scored token was seen.
std::vector<double> evaluate_conversation_loss(FBT& model, const SftData& data, int64_t batch, int64_t seq,
                                               int64_t pad_id, int64_t passes, int64_t max_tokens);

/// One point of the contraction diagnostic (paper Fig. 3 and 10).
struct ContractionPoint {
  int64_t passes;          ///< k fused passes after the plain one (0 = the standard forward)
  double nats_per_token;   ///< loss of the logits after k fused passes
  double bits_per_byte;    ///< the same in bits per UTF-8 byte of the targets
  double relative_change;  ///< mean over positions of ‖h^(k) − h^(k−1)‖₂ / ‖h^(k−1)‖₂ (NaN for k = 0)
};

/// Iterates the fused-pass map up to `max_passes` times on the windows evaluate_loss scores
/// (same max_tokens, batch), without noise or mixin: h^(0) is the feedback state of the plain
/// forward and h^(k) = feedback_state(Stack(fuse(e_n, h^(k−1) one position right))) (run_passes). Reports, for
/// every k = 0..max_passes, the loss of pass k's logits (identical to evaluate_loss's
/// "passes=k") and the mean relative change of the feedback state, averaged over all T
/// positions of all windows (positions t < k are fixed points: their change is 0). A map that
/// contracts drives the change to 0 and the loss to the sequential recurrence's; one that does
/// not keeps changing or diverges. Memory is that of one pass: only h^(k−1) is kept, so 1000
/// passes are possible. Same errors as evaluate_loss (max_passes < 0 instead of passes < 0).
std::vector<ContractionPoint> contraction_curve(FBT& model, const TokenShard& shard, const Tokenizer& tokenizer,
                                                int64_t max_passes, const LossEvalOptions& options);

}  // namespace fbt
