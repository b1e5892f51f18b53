// Teacher-forced log-probabilities of a prompt's own tokens in a decoding mode: the `echo` +
// `logprobs` of OpenAI's /v1/completions, which lm-evaluation-harness's local-completions model
// scores multiple-choice and cloze tasks with.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "fbt/infer/decode_backend.h"
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

/// Scores tokens [T] (1 ≤ T ≤ context, ids in [0, vocab)) teacher forced, no grad, through
/// `backend` (so a quantised run's CPU decoder scores with its own weights):
///  - Standard: the plain prefill pass with every position's logits (the logits of `fbt eval`'s
///    standard mode, up to fp32 rounding).
///  - Fused(k): the Fused(k) prefill (k+1 passes through run_passes) with every position's logits
///    of the last pass: forward_passes with k+1 passes, no jitter or mixin (the definition
///    ModelScorer and `fbt eval --mode fused` use).
///  - Soft: the exact soft recurrence, the first token prefilled and every later one fed by a decode
///    step (fused with the previous position's state except after document separators):
///    sequential_logits.
/// Throws fbt::Error for an empty or over-long sequence, an id outside the vocabulary, top_n < 0
/// or above the vocabulary size, or an invalid `decoding` (Decoding::problem). Writes no module
/// state; the serving Engine runs it as a task on its own thread (Engine::submit_scoring).
PromptLogprobs prompt_logprobs(DecodeBackend& backend, const std::vector<int64_t>& tokens, const Decoding& decoding,
                               int64_t top_n);

/// prompt_logprobs through the generic libtorch backend on `model` (torch_backend).
PromptLogprobs prompt_logprobs(FBT& model, const std::vector<int64_t>& tokens, const Decoding& decoding, int64_t top_n);

}  // namespace fbt
