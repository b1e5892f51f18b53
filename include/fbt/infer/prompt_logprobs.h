// Teacher-forced log-probabilities of a prompt's own tokens in a decoding mode: the `echo` +
// `logprobs` of OpenAI's /v1/completions, which lm-evaluation-harness's local-completions model
// scores multiple-choice and cloze tasks with.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "fbt/infer/decode.h"
#include "fbt/model/model.h"

namespace fbt {

/// Per-position log-probabilities of tokens [T] under `mode`.
struct PromptLogprobs {
  /// [T]: logprob[t] = log p(tokens[t] | tokens[<t]) in nats for t ≥ 1; logprob[0] is NaN (the
  /// first token has no prediction; OpenAI reports null there).
  std::vector<float> logprob;
  /// [T]: top[t] = the top_n most likely tokens at position t with their log-probabilities, best
  /// first (ties: lower token id first); top[0] is empty.
  std::vector<std::vector<std::pair<int64_t, float>>> top;
};

/// Scores tokens [T] (1 ≤ T ≤ context, ids in [0, vocab)) teacher forced, no grad:
///  - Standard: one plain forward (the logits of `fbt eval`'s standard mode).
///  - Fused(k): forward_passes with k+1 passes, no jitter or mixin, the last pass's logits (the
///    definition ModelScorer and `fbt eval --mode fused` use).
///  - Soft: sequential_logits, the exact soft recurrence (every position after the first and after
///    document separators fused with the previous position's state).
/// Throws fbt::Error for an empty or over-long sequence, an id outside the vocabulary, top_n < 0
/// or above the vocabulary size, or an invalid `decoding` (Decoding::problem). Safe to call while
/// an Engine decodes on the same model (no module state is written).
PromptLogprobs prompt_logprobs(FBT& model, const std::vector<int64_t>& tokens, const Decoding& decoding,
                               int64_t top_n);

}  // namespace fbt
