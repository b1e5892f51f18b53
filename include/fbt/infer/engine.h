// Continuous batching for serving (paper App. D): sequences join and leave a running decode batch
// between steps, each with its own KV cache, feedback state h_prev and sampler.
//
// The engine owns one scheduler thread. Every iteration it (1) admits queued sequences while fewer
// than max_batch are active, (2) runs one prefill chunk of at most prefill_chunk prompt tokens for
// the oldest sequence still prefilling, and (3) runs one batched decode step over every sequence
// that has finished its prefill. A sequence's results do not depend on which others share its
// batch: its prefill runs alone (B = 1, fixed chunking), the batched decode step computes every row
// with batch-invariant kernels (CpuDecoder's batch-invariant mode; on other models one decode_step
// per row), and each sequence samples with its own generator seeded by its own seed.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fbt/infer/cpu_decoder.h"
#include "fbt/infer/generate.h"
#include "fbt/infer/prompt_logprobs.h"
#include "fbt/model/model.h"
#include "fbt/util/error.h"

namespace fbt {

/// One sequence to generate.
struct SequenceRequest {
  std::vector<int64_t> prompt;       ///< token ids, 1..context-1 of them, each in [0, vocab)
  Decoding decoding;                 ///< Standard, Soft or Fused(k) (Decoding::problem checked by submit)
  SamplingOptions sampling;          ///< temperature / top_k / top_p / seed of this sequence's own generator
  int64_t max_new_tokens = 16;       ///< ≥ 1; generation also stops at the model context
  std::vector<int64_t> stop_tokens;  ///< sampling one ends the sequence: EOS, end of turn
  int64_t top_logprobs = -1;         ///< < 0: no log-probabilities; n ≥ 0: each token's and the n most likely
  /// Report a sampled stop token too (TokenEvent::stop set), with its log-probabilities: OpenAI
  /// completions with `logprobs` list it (empty text), and lm-evaluation-harness's local-completions
  /// drops the last entry of token_logprobs as the generated one. Off: stop tokens are not reported.
  bool report_stop_token = false;
};

/// A prompt to score teacher forced: the echo + logprobs of /v1/completions, prompt_logprobs
/// (prompt_logprobs.h) run by the engine on its own backend (a quantised run's weights included).
struct ScoringRequest {
  std::vector<int64_t> prompt;  ///< token ids, 1..context of them, each in [0, vocab)
  Decoding decoding;            ///< Standard, Soft or Fused(k) (Decoding::problem checked by submit_scoring)
  int64_t top_n = 0;            ///< alternatives per position, in [0, vocab]
};

/// One generated token.
struct TokenEvent {
  int64_t token = 0;
  int64_t index = 0;     ///< 0 for the first generated token of the sequence
  float logprob = 0.0f;  ///< log p(token) under the sampling distribution's logits (log-softmax of the
                         ///< raw logits, before temperature); 0 when top_logprobs < 0
  std::vector<std::pair<int64_t, float>> top;  ///< the top_logprobs most likely (token, logprob), best first
  bool stop = false;  ///< a stop token (reported only with SequenceRequest::report_stop_token); the last event
};

enum class FinishReason {
  Stop,       ///< a stop token was sampled
  Length,     ///< max_new_tokens reached, or the model context is full
  Cancelled,  ///< Engine::cancel (client gone, stop string found by the caller, shutdown)
  Error,      ///< the model step threw (out of memory, ...); the message went to stderr
};

/// "stop", "length", "cancelled" or "error" (OpenAI's finish_reason for the first two).
std::string finish_reason_name(FinishReason reason);

/// Called on the engine thread. They must be quick (they delay every other sequence) and may call
/// Engine::cancel but nothing else of the engine. on_finish is called exactly once per submitted
/// sequence, after its last on_token.
struct SequenceCallbacks {
  std::function<void(const TokenEvent&)> on_token;
  std::function<void(FinishReason)> on_finish;
};

/// Called on the engine thread, as SequenceCallbacks: on_scored once with the result, then
/// on_finish(Length); or on_finish(Cancelled / Error) alone.
struct ScoringCallbacks {
  std::function<void(const PromptLogprobs&)> on_scored;
  std::function<void(FinishReason)> on_finish;
};

struct EngineOptions {
  int64_t max_batch = 16;       ///< sequences decoded together at most (≥ 1)
  int64_t max_queue = 64;       ///< sequences waiting for a batch slot at most (≥ 0)
  int64_t prefill_chunk = 256;  ///< prompt tokens per prefill call (≥ 1); longer prompts are chunked
  /// Weights of the batch-invariant CPU step, used where the model allows it (Int8, Int4: the Engine
  /// constructor throws fbt::Error naming --weights where it does not).
  DecodeWeights weights = DecodeWeights::Fp32;
  /// A quantised run's matrix products (CpuDecoderOptions::prequantized): the step reads them.
  std::shared_ptr<const QuantizedWeights> prequantized = nullptr;
};

/// A consistent snapshot of the engine's counters (for GET /metrics).
struct EngineStats {
  int64_t queued = 0;            ///< sequences waiting for a slot
  int64_t active = 0;            ///< sequences prefilling or decoding
  int64_t submitted = 0;         ///< sequences accepted since start
  int64_t finished = 0;          ///< sequences finished since start (any reason)
  int64_t prompt_tokens = 0;     ///< prompt tokens prefilled since start
  int64_t generated_tokens = 0;  ///< tokens generated since start (stop tokens excluded)
  double busy_seconds = 0;       ///< wall time spent in prefill and decode calls
};

/// The SequenceRequest member a refused request has wrong (BadRequest::field).
enum class RequestField { Prompt, MaxNewTokens, FusedPasses, Temperature, TopK, TopP, TopN };
/// The member's name in the engine's words: "prompt", "max_new_tokens", "fused_passes",
/// "sampling.temperature", "sampling.top_k", "sampling.top_p", "top_n" (ScoringRequest).
std::string request_field_name(RequestField field);

/// Thrown by Engine::submit for a request it refuses, in the engine's words: what() is
/// "FIELD: PROBLEM" with FIELD = request_field_name(field). A server maps `field` to its API's
/// name and keeps `problem` (serve/choice_runner.h: OpenAI's max_tokens, fbt_fused_passes, ...).
struct BadRequest : Error {
  BadRequest(RequestField field, const std::string& problem)
      : Error(request_field_name(field) + ": " + problem), field(field), problem(problem) {}
  RequestField field;
  std::string problem;  ///< what is wrong, without the field ("must be >= 1 (got 0)")
};

/// Thrown by Engine::submit when max_queue sequences already wait (HTTP 429/503).
struct QueueFull : Error {
  using Error::Error;
};

/// Thrown by Engine::submit after drain() began (HTTP 503).
struct ShuttingDown : Error {
  using Error::Error;
};

class Engine {
 public:
  /// Starts the scheduler thread on `model` (eval mode, no grad). Throws fbt::Error for options
  /// outside their ranges (naming the field).
  Engine(FBT model, const EngineOptions& options);
  /// Cancels what is left (on_finish(Cancelled)) and joins the scheduler thread.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Checks `request` (throws fbt::Error naming the field: prompt empty or too long for the context,
  /// a token outside the vocabulary, max_new_tokens < 1, fused_passes < 1, sampling options) and
  /// queues it. Thread-safe. Returns the sequence's id. Throws QueueFull or ShuttingDown.
  uint64_t submit(SequenceRequest request, SequenceCallbacks callbacks);

  /// Checks `request` (throws BadRequest naming the field: prompt empty, longer than the context or
  /// with a token outside the vocabulary, fused_passes, top_n outside [0, vocab]) and queues it as a
  /// task that holds a batch slot while it runs (admitted, counted and cancelled as a sequence; it
  /// runs whole, between two decode steps, where a sequence would run a prefill chunk). Thread-safe.
  /// Returns its id (for cancel). Throws QueueFull or ShuttingDown.
  uint64_t submit_scoring(ScoringRequest request, ScoringCallbacks callbacks);

  /// Ends sequence `id` before its next step (its slot and cache are freed at once); on_finish(Cancelled)
  /// follows unless it already finished. Thread-safe; unknown or finished ids are ignored.
  void cancel(uint64_t id);

  /// Refuses new sequences (submit throws ShuttingDown) and blocks until every queued and active
  /// sequence has finished. Thread-safe.
  void drain();

  EngineStats stats() const;
  const ModelConfig& config() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace fbt
