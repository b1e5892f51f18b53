// Batched text generation: sampling (greedy, temperature, top-k, top-p) over the decoding modes.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <torch/types.h>

#include "fbt/infer/decode.h"

namespace fbt {

/// Next-token sampling. temperature 0 is greedy (argmax); otherwise softmax(logits / T)
/// restricted to the top_k tokens (0 = all) and to the smallest set whose probability reaches
/// top_p (1 = all). The paper evaluates without top-k/top-p.
struct SamplingOptions {
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
};

/// Draws one token per row from logits [B,V] -> int64 [B] (on the logits' device).
/// Throws fbt::Error for temperature < 0, top_k < 0 or top_p outside (0, 1].
torch::Tensor sample_tokens(const torch::Tensor& logits, const SamplingOptions& options,
                            at::Generator& generator);

struct GenerationOptions {
  DecodeMode mode = DecodeMode::Standard;
  int64_t fused_passes = 1;    ///< k of Fused(k)
  int64_t max_new_tokens = 64; ///< per sequence; generation also stops at the model context
  SamplingOptions sampling;
  int64_t eos_id = -1;         ///< a row stops after emitting this token (-1: never)
  int64_t pad_id = 0;          ///< token used for left padding (never attended)
  /// Streaming: called for every generated token (EOS excluded) with (row, token).
  std::function<void(int64_t, int64_t)> on_token;
};

/// Generates continuations of `prompts` (token ids, different lengths allowed, each non-empty)
/// in lockstep: prompts are left-padded, prefilled in the chosen mode, then decoded one token
/// per step. Returns the generated tokens per row (without the prompt, without EOS).
/// Throws fbt::Error for an empty prompt or one that does not fit the model context.
std::vector<std::vector<int64_t>> generate(FBT& model, const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerationOptions& options);

}  // namespace fbt
