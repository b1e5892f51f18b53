// Validation loss vs number of fused prefill passes (SPEC §8, paper Fig. 4) on a token shard.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "fbt/data.h"
#include "fbt/model.h"
#include "fbt/tokenizer.h"

namespace fbt {

/// One evaluated mode.
struct LossResult {
  std::string name;       ///< "passes=p" (loss after p fused prefill passes) or "sequential"
  double nats_per_token;  ///< mean next-token cross-entropy, nats per target token
  double bits_per_byte;   ///< total nats / ln 2 / UTF-8 bytes of the targets (NaN if 0 bytes)
  int64_t tokens;         ///< target tokens scored
};

struct LossEvalOptions {
  int64_t max_tokens = 65536;  ///< target tokens to score at most (< 0: the whole shard)
  int64_t passes = 2;          ///< K: report p = 0..K fused prefill passes
  bool sequential = false;     ///< also score the exact sequential soft recurrence
  int64_t batch = 8;           ///< windows per forward
};

/// Scores `model` on `shard` with non-overlapping windows of T = model context tokens
/// (SequentialLoader: window w predicts tokens[wT+1, wT+T+1); the tail shorter than T is skipped).
/// Returns K+1 results "passes=0".."passes=K", then "sequential" if requested, all on the same
/// windows. passes=0 is the standard forward; passes=p is the last of p+1 passes of
/// forward_passes without jitter or mixin (pass k is the recurrence after k-1 fused passes), all
/// from one forward_passes call per batch. "sequential" is sequential_logits (exact soft
/// recurrence, T cached steps per window).
///
/// Bytes for bits per byte are exact: the scored targets form the contiguous range
/// tokens[1, nT+1), decoded with `tokenizer` (separators decode to nothing, as in meta.json's
/// split bytes). The range is decoded in chunks of 2^20 tokens cut after a separator; only a
/// character spelled by byte-fallback pieces across a cut in a chunk without any separator can
/// be miscounted. Runs in eval mode under torch::NoGradGuard on the model's device; restores the
/// model's training flag. Throws fbt::Error if passes < 0, batch < 1, the shard's vocab differs
/// from the model's, or the shard holds no full window.
std::vector<LossResult> evaluate_loss(FBT& model, const TokenShard& shard, const Tokenizer& tokenizer,
                                      const LossEvalOptions& options);

}  // namespace fbt
