// The choices of one `fbt serve` request on the continuous-batching engine: one sequence per
// (prompt, choice), their tokens handed from the engine thread to the request's thread and turned
// into text there (ChoiceText: stop strings end a choice and cancel its sequence).
#pragma once
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fbt/infer/engine.h"
#include "fbt/serve/completion_text.h"
#include "fbt/serve/openai_request.h"

namespace fbt {

/// What one engine event changed in one choice.
struct ChoiceUpdate {
  size_t choice = 0;
  std::string text;                 ///< text that became final (may be "")
  std::optional<TokenEvent> token;  ///< the generated token, when it is kept (not after a stop string); with
                                    ///< log-probabilities also the sampled stop token (token->stop, text "")
  std::string finish_reason;        ///< non-empty when the choice ended: "stop", "length" (or "cancelled")
};

class ChoiceRunner {
 public:
  /// Choice p·n + i generates from prompts[p] with seed params.sampling.seed + i (params.n = n),
  /// params' mode, passes and max_tokens; a sampled stop token (`stop_tokens`: EOS, end of turn)
  /// ends it, as does one of params.stop in its text. top_logprobs < 0: no log-probabilities;
  /// otherwise a sampled stop token is reported too (as the last update with a token), since
  /// OpenAI's logprobs list it and lm-evaluation-harness reads one entry past the prompt.
  ChoiceRunner(Engine& engine, const Tokenizer& tokenizer, const GenerationParams& params,
               const std::vector<std::vector<int64_t>>& prompts, std::vector<int64_t> stop_tokens,
               int64_t top_logprobs);
  /// Cancels the sequences still running (a client gone, an error): their slots free at once.
  ~ChoiceRunner();
  ChoiceRunner(const ChoiceRunner&) = delete;
  ChoiceRunner& operator=(const ChoiceRunner&) = delete;

  /// Submits every choice. Throws ApiError 429 (rate_limit_error) when the engine's queue is full,
  /// after cancelling the choices already submitted, and 503 when the engine is draining.
  void start();
  /// The next change of a choice, waiting at most `timeout` for the engine; nullopt when none came.
  std::optional<ChoiceUpdate> next(std::chrono::milliseconds timeout);
  /// True once every sequence has finished on the engine and every choice has ended.
  bool done() const;
  /// Cancels every sequence still running.
  void cancel_all();

  size_t size() const { return texts_.size(); }
  const ChoiceText& text(size_t choice) const { return texts_[choice]; }
  /// Tokens kept over all choices (usage's completion_tokens).
  int64_t generated_tokens() const;
  /// The finish_reason of an ended choice ("" while it runs).
  const std::string& finish_reason(size_t choice) const { return reasons_[choice]; }

 private:
  struct Channel;
  Engine& engine_;
  std::vector<SequenceRequest> requests_;
  std::vector<ChoiceText> texts_;
  std::vector<std::string> reasons_;
  std::vector<uint64_t> ids_;
  std::vector<bool> finished_;        ///< on_finish seen
  std::shared_ptr<Channel> channel_;  ///< shared with the engine's callbacks, which may outlive this
};

/// Rethrows `refusal` (caught from Engine::submit or submit_scoring) in API words: BadRequest as a
/// 400 naming the OpenAI parameter (openai_param), QueueFull as 429 (rate_limit_error), ShuttingDown
/// as 503; anything else unchanged.
[[noreturn]] void rethrow_engine_refusal(std::exception_ptr refusal);

/// Scores `request` on the engine (Engine::submit_scoring) and waits for it: the echo + logprobs of
/// /v1/completions, in the engine's queue and batch limit and on its weights. Throws as
/// rethrow_engine_refusal, and ApiError 503 when the task was cancelled (shutdown) or 500 when it
/// failed on the engine.
PromptLogprobs score_on_engine(Engine& engine, ScoringRequest request);

}  // namespace fbt
