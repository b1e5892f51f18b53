// Batched text generation: sampling (greedy, temperature, top-k, top-p) over the decoding modes.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "fbt/infer/decode.h"
#include "fbt/infer/decode_backend.h"

namespace fbt {

class CpuDecoder;

/// Sampling temperatures other than 0 (greedy) must lie in [kMinTemperature, kMaxTemperature]:
/// logits / T must stay finite in fp32 (a smaller T overflows to inf, and the probabilities to
/// NaN) and T must itself be an fp32 number.
constexpr double kMinTemperature = 1e-6, kMaxTemperature = 1e6;
/// True for 0 and for a finite T in [kMinTemperature, kMaxTemperature].
bool temperature_in_range(double t);
/// What is wrong with `t` as a temperature ("must be 0 (greedy) or in [1e-06, 1e+06] (got -1)"),
/// or "" when temperature_in_range(t); callers prefix the flag or field.
std::string temperature_problem(double t);
/// Throws fbt::Error naming `flag` (e.g. "--temperature") unless temperature_in_range(t).
void check_temperature(double t, const std::string& flag);

/// The one rule for top_k, of `fbt generate --top-k` and of serve's `top_k`: k >= 1 keeps the k
/// most likely tokens; 0 and -1 keep them all (-1 is "off" in vLLM and the OpenAI-compatible
/// servers that take top_k, 0 in transformers). Below kMinTopK is an error.
constexpr int64_t kMinTopK = -1;
/// What is wrong with `k` as a top_k ("must be >= 1, or 0 or -1 for all tokens (got -2)"), or ""
/// when it is fine; callers prefix the flag or field.
std::string top_k_problem(int64_t k);
/// What is wrong with `p` as a top_p ("must be in (0, 1] (got 0)"), or "" when it is in (0, 1].
std::string top_p_problem(double p);

/// Next-token sampling. temperature 0 is greedy (argmax); otherwise softmax(logits / T)
/// restricted to the top_k tokens (0 or -1 = all: top_k_problem) and to the smallest set whose
/// probability reaches top_p (1 = all). The paper evaluates without top-k/top-p.
struct SamplingOptions {
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;

  /// Throws fbt::Error naming the flag (--temperature, --top-k, --top-p) unless the temperature
  /// passes check_temperature, top_k passes top_k_problem and top_p is in (0, 1]. Callers check
  /// before any work.
  void validate() const;
};

/// Draws one token per row from logits [B,V] -> int64 [B] (on the logits' device).
/// Throws fbt::Error for options that fail SamplingOptions::validate.
torch::Tensor sample_tokens(const torch::Tensor& logits, const SamplingOptions& options, at::Generator& generator);

struct GenerationOptions {
  Decoding decoding;            ///< Standard, Soft or Fused(k) (checked by generate)
  int64_t max_new_tokens = 64;  ///< per sequence; generation also stops at the model context
  SamplingOptions sampling;
  int64_t eos_id = -1;  ///< a row stops after emitting this token (-1: never)
  /// EOS is never sampled (its logit set to −inf), so every row runs max_new_tokens (or to the
  /// context), as llama.cpp's --ignore-eos: samples long enough to compare the modes
  bool ignore_eos = false;
  int64_t pad_id = 0;  ///< token used for left padding (never attended)
  /// Streaming: called for every generated token (EOS excluded) with (row, token).
  std::function<void(int64_t, int64_t)> on_token;
  /// Stop hook (may be empty): asked after each step's tokens are emitted, before the next decode
  /// step; when it returns true generation ends and returns what was generated so far (`fbt chat`
  /// stops a reply on Ctrl-C this way). It must be cheap: it runs once per token.
  std::function<bool()> should_stop;
  /// The decoding backend, built once by the caller (e.g. a CpuDecoder with int8 weights,
  /// decode_backend.h); empty: make_decode_backend(model) per call.
  std::shared_ptr<DecodeBackend> backend;
};

/// Generates continuations of `prompts` (token ids, different lengths allowed, each non-empty)
/// in lockstep: prompts are left-padded, prefilled in the chosen mode, then decoded one token
/// per step. Returns the generated tokens per row (without the prompt, without EOS).
/// Throws fbt::Error for an empty prompt or one that does not fit the model context.
std::vector<std::vector<int64_t>> generate(FBT& model, const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerationOptions& options);

}  // namespace fbt
