// A request's choices on the engine (see choice_runner.h).
#include "fbt/serve/choice_runner.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>

#include "fbt/serve/api_error.h"

namespace fbt {

/// Events from the engine thread, in order.
struct ChoiceRunner::Channel {
  struct Event {
    size_t choice;
    std::optional<TokenEvent> token;  ///< a token, or (nullopt) the end of the sequence
    FinishReason reason = FinishReason::Length;
  };
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<Event> events;

  void push(Event e) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      events.push_back(std::move(e));
    }
    ready.notify_one();
  }
};

ChoiceRunner::ChoiceRunner(Engine& engine, const Tokenizer& tokenizer, const GenerationParams& params,
                           const std::vector<std::vector<int64_t>>& prompts, std::vector<int64_t> stop_tokens,
                           int64_t top_logprobs)
    : engine_(engine), channel_(std::make_shared<Channel>()) {
  for (const auto& prompt : prompts)
    for (int64_t i = 0; i < params.n; ++i) {
      SequenceRequest r;
      r.prompt = prompt;
      r.decoding = params.decoding;
      r.sampling = params.sampling;
      r.sampling.seed = params.sampling.seed + static_cast<uint64_t>(i);
      r.max_new_tokens = params.max_tokens;
      r.stop_tokens = stop_tokens;
      r.top_logprobs = top_logprobs;
      r.report_stop_token = top_logprobs >= 0;
      requests_.push_back(std::move(r));
      texts_.emplace_back(tokenizer, params.stop);
    }
  reasons_.resize(requests_.size());
  finished_.resize(requests_.size(), false);
}

ChoiceRunner::~ChoiceRunner() { cancel_all(); }

void ChoiceRunner::start() {
  try {
    for (size_t i = 0; i < requests_.size(); ++i) {
      SequenceCallbacks callbacks;
      callbacks.on_token = [channel = channel_, i](const TokenEvent& t) { channel->push({i, t}); };
      callbacks.on_finish = [channel = channel_, i](FinishReason reason) { channel->push({i, std::nullopt, reason}); };
      ids_.push_back(engine_.submit(requests_[i], std::move(callbacks)));
    }
  } catch (const Error&) {
    cancel_all();
    rethrow_engine_refusal(std::current_exception());
  }
}

void rethrow_engine_refusal(std::exception_ptr refusal) {
  try {
    std::rethrow_exception(refusal);
  } catch (const BadRequest& e) {  // openai_request.cpp's checks come first; this is the engine's own
    throw bad_field(openai_param(e.field), e.problem);
  } catch (const QueueFull& e) {
    throw ApiError(429, std::string("the server is busy: ") + e.what() + "; retry later", "", "rate_limit_error");
  } catch (const ShuttingDown&) {
    throw ApiError(503, "the server is shutting down", "", "server_error");
  }
}

PromptLogprobs score_on_engine(Engine& engine, ScoringRequest request) {
  struct Result {
    std::promise<void> done;
    PromptLogprobs scored;
    FinishReason reason = FinishReason::Error;
  };
  auto result = std::make_shared<Result>();  // the callbacks may outlive this call only on error paths
  auto done = result->done.get_future();
  ScoringCallbacks callbacks;
  callbacks.on_scored = [result](const PromptLogprobs& scored) { result->scored = scored; };
  callbacks.on_finish = [result](FinishReason reason) {
    result->reason = reason;
    result->done.set_value();
  };
  try {
    engine.submit_scoring(std::move(request), std::move(callbacks));
  } catch (const Error&) {
    rethrow_engine_refusal(std::current_exception());
  }
  done.wait();
  if (result->reason == FinishReason::Cancelled) throw ApiError(503, "the server is shutting down", "", "server_error");
  if (result->reason != FinishReason::Length)
    throw ApiError(500, "scoring the prompt failed on the server (see its log)", "", "server_error");
  return std::move(result->scored);
}

void ChoiceRunner::cancel_all() {
  for (size_t i = 0; i < ids_.size(); ++i)
    if (!finished_[i]) engine_.cancel(ids_[i]);
}

bool ChoiceRunner::done() const {
  return ids_.size() == requests_.size() && std::all_of(finished_.begin(), finished_.end(), [](bool f) { return f; });
}

int64_t ChoiceRunner::generated_tokens() const {
  int64_t total = 0;
  for (const auto& t : texts_) total += static_cast<int64_t>(t.tokens().size());
  return total;
}

std::optional<ChoiceUpdate> ChoiceRunner::next(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    Channel::Event e;
    {
      std::unique_lock<std::mutex> lock(channel_->mutex);
      if (!channel_->ready.wait_until(lock, deadline, [&] { return !channel_->events.empty(); })) return std::nullopt;
      e = std::move(channel_->events.front());
      channel_->events.pop_front();
    }
    const size_t i = e.choice;
    if (!e.token) finished_[i] = true;
    if (!reasons_[i].empty()) continue;  // ended by a stop string: later events change nothing
    ChoiceUpdate u;
    u.choice = i;
    if (e.token && e.token->stop) {  // reported for its log-probabilities only: no text
      u.token = std::move(e.token);
    } else if (e.token) {
      u.text = texts_[i].push(e.token->token);
      u.token = std::move(e.token);
      if (texts_[i].stopped()) {
        engine_.cancel(ids_[i]);
        reasons_[i] = "stop";
      }
    } else {
      u.text = texts_[i].finish();
      reasons_[i] = finish_reason_name(e.reason);
    }
    u.finish_reason = reasons_[i];
    return u;
  }
}

}  // namespace fbt
