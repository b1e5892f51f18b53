// Log-likelihood scoring of (context, continuation) token requests: the Scorer interface and
// the model-backed scorer in the standard and fused(k) modes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "fbt/infer/decoding.h"
#include "fbt/model/model.h"

namespace fbt {

/// One request: how likely is `continuation` right after `context` (token ids)?
struct ScoreRequest {
  std::vector<int64_t> context;       ///< at least one token
  std::vector<int64_t> continuation;  ///< at least one token
};

/// The answer to one request.
struct ScoreResult {
  double loglik = 0.0;  ///< Σ over continuation tokens of log p(token | everything before), nats
  bool greedy = false;  ///< every continuation token is the argmax of its next-token distribution
};

/// Scores batches of requests. Implemented by ModelScorer, and by fixed stubs in tests.
class Scorer {
 public:
  virtual ~Scorer() = default;
  /// One result per request, in request order.
  virtual std::vector<ScoreResult> score(const std::vector<ScoreRequest>& requests) = 0;
};

/// Scores with an FBT, teacher forced. The scored sequence is context + continuation minus its
/// last token; if that is longer than the model context T, tokens are dropped from the left
/// (lm-eval's (context + continuation)[-(T+1):][:-1]).
///
/// Decoding Standard is one plain forward. Fused(k) (k ≥ 1):
/// forward_passes with k+1 passes, no jitter and no mixin, scored with the last pass's logits
/// (the definition of "passes=k" in evaluate_loss). In the fused passes position 0 and every
/// position right after the document separator take the plain input; every other position,
/// context and continuation alike, takes the fused input from the previous position's state of
/// the previous pass. This is the Jacobi approximation of the soft recurrence after k passes,
/// exact for the first k positions (passes.h), not `fbt generate`'s fused(k) decode (which prefills
/// the context with k passes, then decodes the continuation sequentially).
///
/// Requests are sorted by length and run `batch` at a time, right-padded: attention is causal
/// and the feedback only flows forward, so padding after a row's last token changes none of its
/// real positions. Runs under torch::NoGradGuard in eval mode on the model's device and
/// restores the model's training flag.
class ModelScorer : public Scorer {
 public:
  /// Throws fbt::Error for Soft decoding (scored teacher forced: there is no step to take),
  /// an invalid `decoding` or batch < 1.
  ModelScorer(FBT model, const Decoding& decoding, int64_t batch);
  /// Throws fbt::Error for an empty context or continuation, or a continuation longer than the
  /// model context.
  std::vector<ScoreResult> score(const std::vector<ScoreRequest>& requests) override;
  /// "standard" or "fused(k)".
  std::string mode_name() const { return decoding_.label(); }

 private:
  FBT model_;
  Decoding decoding_;
  int64_t batch_;
};

}  // namespace fbt
