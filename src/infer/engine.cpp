// Engine: the continuous-batching scheduler of engine.h.
#include "fbt/infer/engine.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>

#include <ATen/CPUGeneratorImpl.h>

#include "fbt/infer/decode_backend.h"
#include "fbt/infer/prompt_prefill.h"

namespace fbt {

std::string finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "error";
}

std::string request_field_name(RequestField field) {
  switch (field) {
    case RequestField::Prompt: return "prompt";
    case RequestField::MaxNewTokens: return "max_new_tokens";
    case RequestField::FusedPasses: return "fused_passes";
    case RequestField::Temperature: return "sampling.temperature";
    case RequestField::TopK: return "sampling.top_k";
    case RequestField::TopP: return "sampling.top_p";
    case RequestField::TopN: return "top_n";
  }
  throw Error("internal: request field without a name");
}

namespace {

/// Checks a prompt of `limit` tokens at most against `config`; throws BadRequest naming it.
void check_prompt_tokens(const std::vector<int64_t>& prompt, int64_t limit, const std::string& too_long,
                         const ModelConfig& config) {
  const int64_t n = prompt.size();
  if (n == 0) throw BadRequest(RequestField::Prompt, "it is empty");
  if (n > limit) throw BadRequest(RequestField::Prompt, std::to_string(n) + " tokens " + too_long);
  for (int64_t t : prompt)
    if (t < 0 || t >= config.vocab_size)
      throw BadRequest(RequestField::Prompt, "token id " + std::to_string(t) + " outside the vocabulary [0, " +
                                                 std::to_string(config.vocab_size) + ")");
}

/// Checks every field of `r` against `config`; throws BadRequest naming the field.
void check_request(const SequenceRequest& r, const ModelConfig& config) {
  using F = RequestField;
  check_prompt_tokens(r.prompt, config.context - 1,
                      "leave no room to generate in the model context of " + std::to_string(config.context) + " tokens",
                      config);
  if (r.max_new_tokens < 1)
    throw BadRequest(F::MaxNewTokens, "must be >= 1 (got " + std::to_string(r.max_new_tokens) + ")");
  if (const auto p = r.decoding.problem(); !p.empty()) throw BadRequest(F::FusedPasses, p);
  if (const auto problem = temperature_problem(r.sampling.temperature); !problem.empty())
    throw BadRequest(F::Temperature, problem);
  if (const auto problem = top_k_problem(r.sampling.top_k); !problem.empty()) throw BadRequest(F::TopK, problem);
  if (const auto problem = top_p_problem(r.sampling.top_p); !problem.empty()) throw BadRequest(F::TopP, problem);
}

/// Checks every field of a scoring request against `config`; throws BadRequest naming the field.
void check_request(const ScoringRequest& r, const ModelConfig& config) {
  check_prompt_tokens(r.prompt, config.context,
                      "exceed the model context of " + std::to_string(config.context) + " tokens", config);
  if (const auto p = r.decoding.problem(); !p.empty()) throw BadRequest(RequestField::FusedPasses, p);
  if (r.top_n < 0 || r.top_n > config.vocab_size)
    throw BadRequest(RequestField::TopN, "must lie in [0, " + std::to_string(config.vocab_size) + "] (got " +
                                             std::to_string(r.top_n) + ")");
}

}  // namespace

struct Engine::State {
  /// One submitted sequence; owned by the queue, then by the scheduler's active list. (Nested:
  /// a field of an anonymous-namespace type draws -Wsubobject-linkage in a unity build.)
  struct Sequence {
    uint64_t id = 0;
    SequenceRequest request;
    SequenceCallbacks callbacks;
    at::Generator generator;
    std::optional<PromptPrefill> prefill;  ///< created on admission; its cache is the decode cache
    int64_t generated = 0;                 ///< tokens reported so far
    int64_t next_token = -1;               ///< the sampled token the next decode step feeds (-1: prefilling)
    bool admitted = false;                 ///< in the batch (counted in EngineStats::active)
    bool finished = false;
    /// A scoring task instead of a sequence to generate (`request` and `callbacks.on_token` unused).
    std::optional<ScoringRequest> scoring;
    std::function<void(const PromptLogprobs&)> on_scored;
  };
  FBT model = nullptr;
  EngineOptions options;
  std::shared_ptr<DecodeBackend> backend;  ///< the batch-invariant CPU step where the model allows it
  mutable std::mutex mu;
  std::condition_variable wake;  ///< work arrived, a cancel, or stop
  std::condition_variable idle;  ///< a sequence finished (drain waits on it)
  // Guarded by mu:
  std::deque<std::unique_ptr<Sequence>> queue;
  std::unordered_set<uint64_t> cancels;
  bool draining = false, stopping = false;
  uint64_t next_id = 1;
  int64_t pending = 0;  ///< submitted sequences whose on_finish has not returned yet
  EngineStats stats;
  // The scheduler thread's own:
  std::vector<std::unique_ptr<Sequence>> active;
  std::thread thread;

  void loop();
  bool take_work();
  void prefill_one();
  void score(Sequence& s);
  uint64_t enqueue(std::unique_ptr<Sequence> s);
  void decode_active();
  int64_t on_logits(Sequence& s, const torch::Tensor& logits);
  void finish(Sequence& s, FinishReason reason);
  void finish_all(std::vector<std::unique_ptr<Sequence>>& sequences, FinishReason reason);
  void reap();
  void count(int64_t prompt_tokens, int64_t generated, double seconds);
};

void Engine::State::count(int64_t prompt_tokens, int64_t generated, double seconds) {
  std::lock_guard lock(mu);
  stats.prompt_tokens += prompt_tokens;
  stats.generated_tokens += generated;
  stats.busy_seconds += seconds;
}

void Engine::State::finish(Sequence& s, FinishReason reason) {
  if (s.finished) return;
  s.finished = true;
  {  // the counters first: what on_finish tells others is then already in stats()
    std::lock_guard lock(mu);
    stats.finished += 1;
    if (s.admitted) stats.active -= 1;
  }
  try {
    if (s.callbacks.on_finish) s.callbacks.on_finish(reason);
  } catch (const std::exception& e) {
    std::cerr << "fbt engine: sequence " << s.id << ": on_finish threw: " << e.what() << "\n";
  }
  std::lock_guard lock(mu);
  pending -= 1;
  idle.notify_all();
}

void Engine::State::finish_all(std::vector<std::unique_ptr<Sequence>>& sequences, FinishReason reason) {
  for (auto& s : sequences) finish(*s, reason);
}

/// Drops finished sequences from the active list, freeing their caches.
void Engine::State::reap() {
  active.erase(std::remove_if(active.begin(), active.end(), [](const auto& s) { return s->finished; }), active.end());
}

/// Waits for work; applies cancels; admits queued sequences into free batch slots. Returns false
/// when the engine stops.
bool Engine::State::take_work() {
  std::vector<std::unique_ptr<Sequence>> cancelled_queued;
  std::unordered_set<uint64_t> cancels_now;
  {
    std::unique_lock lock(mu);
    wake.wait(lock, [&] { return stopping || !queue.empty() || !active.empty(); });
    if (stopping) return false;
    cancels_now.swap(cancels);
    for (auto it = queue.begin(); it != queue.end();) {
      if (cancels_now.count((*it)->id)) {
        cancelled_queued.push_back(std::move(*it));
        it = queue.erase(it);
      } else {
        ++it;
      }
    }
    while (int64_t(active.size()) < options.max_batch && !queue.empty()) {
      queue.front()->admitted = true;
      active.push_back(std::move(queue.front()));
      queue.pop_front();
    }
    stats.queued = queue.size();
    stats.active = active.size();
  }
  finish_all(cancelled_queued, FinishReason::Cancelled);
  for (auto& s : active)
    if (cancels_now.count(s->id)) finish(*s, FinishReason::Cancelled);
  reap();
  return true;
}

/// Samples `s`'s next token from logits [V] (or [1,V]), reports it, and finishes `s` where it ends.
/// Returns the tokens generated: 1, or 0 for a stop token.
int64_t Engine::State::on_logits(Sequence& s, const torch::Tensor& logits) {
  // [1,V] in storage of its own: softmax over a view into the batch's logits would start at another
  // alignment for each row, and vectorised reductions round differently at other alignments.
  const auto row = logits.to(torch::kCPU, torch::kFloat).view({1, -1}).clone();
  const int64_t token = sample_tokens(row, s.request.sampling, s.generator).item<int64_t>();
  const auto& stops = s.request.stop_tokens;
  const bool stop = std::find(stops.begin(), stops.end(), token) != stops.end();
  if (stop && !s.request.report_stop_token) {
    finish(s, FinishReason::Stop);
    return 0;
  }
  TokenEvent event;
  event.token = token;
  event.index = s.generated;
  event.stop = stop;
  if (!stop) s.generated += 1;
  if (s.request.top_logprobs >= 0) {
    auto logprobs = torch::log_softmax(row, -1).view({-1});  // [V]
    event.logprob = logprobs[token].item<float>();
    if (s.request.top_logprobs > 0) {
      auto [values, ids] = logprobs.sort(/*stable=*/true, /*dim=*/0, /*descending=*/true);  // ties: lower id first
      const int64_t n = std::min<int64_t>(s.request.top_logprobs, values.numel());
      for (int64_t i = 0; i < n; ++i) event.top.emplace_back(ids[i].item<int64_t>(), values[i].item<float>());
    }
  }
  try {
    if (s.callbacks.on_token) s.callbacks.on_token(event);
  } catch (const std::exception& e) {
    std::cerr << "fbt engine: sequence " << s.id << ": on_token threw: " << e.what() << "\n";
    finish(s, FinishReason::Cancelled);
    return !stop;
  }
  const int64_t total = int64_t(s.request.prompt.size()) + s.generated;
  if (stop)
    finish(s, FinishReason::Stop);
  else if (s.generated == s.request.max_new_tokens || total == model->config().context)
    finish(s, FinishReason::Length);
  else
    s.next_token = token;
  return !stop;
}

/// One prefill chunk of the oldest sequence still prefilling; its first token once the prompt is in.
void Engine::State::prefill_one() {
  auto it = std::find_if(active.begin(), active.end(), [](const auto& s) { return !s->finished && s->next_token < 0; });
  if (it == active.end()) return;
  Sequence& s = **it;
  if (s.scoring) return score(s);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (!s.prefill) {
      const auto& r = s.request;
      const int64_t n = r.prompt.size();
      // Slots for the prompt and every generated token but the last (never fed); n < context.
      const int64_t capacity = std::min(model->config().context, n + r.max_new_tokens - 1);
      s.prefill.emplace(model, r.prompt, r.decoding, capacity, backend);
    }
    const int64_t before = s.prefill->prefilled();
    auto logits = s.prefill->run(options.prefill_chunk);
    const int64_t generated = logits.defined() ? on_logits(s, logits) : 0;
    count(s.prefill->prefilled() - before, generated,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  } catch (const std::exception& e) {
    std::cerr << "fbt engine: sequence " << s.id << ": prefill failed: " << e.what() << "\n";
    finish(s, FinishReason::Error);
  }
}

/// Runs scoring task `s` whole and finishes it.
void Engine::State::score(Sequence& s) {
  const auto t0 = std::chrono::steady_clock::now();
  PromptLogprobs scored;
  try {
    scored = prompt_logprobs(*backend, s.scoring->prompt, s.scoring->decoding, s.scoring->top_n);
  } catch (const std::exception& e) {
    std::cerr << "fbt engine: scoring task " << s.id << " failed: " << e.what() << "\n";
    return finish(s, FinishReason::Error);
  }
  count(int64_t(s.scoring->prompt.size()), 0,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  try {
    if (s.on_scored) s.on_scored(scored);
  } catch (const std::exception& e) {
    std::cerr << "fbt engine: scoring task " << s.id << ": on_scored threw: " << e.what() << "\n";
    return finish(s, FinishReason::Cancelled);
  }
  finish(s, FinishReason::Length);
}

/// One batched decode step over every sequence that has a token to feed.
void Engine::State::decode_active() {
  std::vector<Sequence*> rows;
  for (auto& s : active)
    if (!s->finished && s->next_token >= 0) rows.push_back(s.get());
  if (rows.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    std::vector<int64_t> ids;
    std::vector<DecodeMode> modes;
    std::vector<KVCache*> caches;
    for (auto* s : rows) {
      ids.push_back(s->next_token);
      modes.push_back(s->request.decoding.mode);
      caches.push_back(&s->prefill->cache());
    }
    const torch::Tensor logits = backend->step(torch::tensor(ids, torch::kLong), modes, caches);  // [B,V]
    int64_t generated = 0;
    for (size_t b = 0; b < rows.size(); ++b) generated += on_logits(*rows[b], logits[b]);
    count(0, generated, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  } catch (const std::exception& e) {
    std::cerr << "fbt engine: decode step failed: " << e.what() << "\n";
    for (auto* s : rows) finish(*s, FinishReason::Error);
  }
}

void Engine::State::loop() {
  torch::InferenceMode inference;
  while (take_work()) {
    prefill_one();
    decode_active();
    reap();
  }
  std::vector<std::unique_ptr<Sequence>> left;
  {
    std::lock_guard lock(mu);
    for (auto& s : queue) left.push_back(std::move(s));
    queue.clear();
  }
  finish_all(left, FinishReason::Cancelled);
  finish_all(active, FinishReason::Cancelled);
  active.clear();
  std::lock_guard lock(mu);
  stats.queued = 0;
}

Engine::Engine(FBT model, const EngineOptions& options) : state_(std::make_unique<State>()) {
  // In EngineOptions' words: `fbt serve` checks its flags (--max-batch, ...) before it gets here.
  if (options.max_batch < 1) throw Error("max_batch must be >= 1 (got " + std::to_string(options.max_batch) + ")");
  if (options.max_queue < 0) throw Error("max_queue must be >= 0 (got " + std::to_string(options.max_queue) + ")");
  if (options.prefill_chunk < 1)
    throw Error("prefill_chunk must be >= 1 (got " + std::to_string(options.prefill_chunk) + ")");
  model->eval();
  state_->model = model;
  state_->options = options;
  CpuDecoderOptions cpu{/*batch_invariant=*/true, options.weights};
  cpu.prequantized = options.prequantized;
  state_->backend = make_decode_backend(model, cpu);  // int8/int4: throws where the model cannot
  state_->thread = std::thread([s = state_.get()] { s->loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
  }
  state_->wake.notify_all();
  state_->thread.join();
}

uint64_t Engine::submit(SequenceRequest request, SequenceCallbacks callbacks) {
  check_request(request, state_->model->config());
  auto s = std::make_unique<State::Sequence>();
  s->generator = at::make_generator<at::CPUGeneratorImpl>(request.sampling.seed);
  s->request = std::move(request);
  s->callbacks = std::move(callbacks);
  return state_->enqueue(std::move(s));
}

uint64_t Engine::submit_scoring(ScoringRequest request, ScoringCallbacks callbacks) {
  check_request(request, state_->model->config());
  auto s = std::make_unique<State::Sequence>();
  s->scoring = std::move(request);
  s->on_scored = std::move(callbacks.on_scored);
  s->callbacks.on_finish = std::move(callbacks.on_finish);
  return state_->enqueue(std::move(s));
}

/// Queues `s` (a checked sequence or scoring task); throws ShuttingDown or QueueFull.
uint64_t Engine::State::enqueue(std::unique_ptr<Sequence> s) {
  std::lock_guard lock(mu);
  if (draining || stopping) throw ShuttingDown("the server is shutting down");
  // Room: max_queue waiting beyond the batch slots still free.
  const int64_t free_slots = std::max<int64_t>(0, options.max_batch - stats.active);
  if (int64_t(queue.size()) >= options.max_queue + free_slots)
    throw QueueFull("the queue is full (" + std::to_string(options.max_queue) + " waiting)");
  s->id = next_id++;
  const uint64_t id = s->id;
  queue.push_back(std::move(s));
  stats.submitted += 1;
  pending += 1;
  stats.queued = queue.size();
  wake.notify_all();
  return id;
}

void Engine::cancel(uint64_t id) {
  {
    std::lock_guard lock(state_->mu);
    state_->cancels.insert(id);
  }
  state_->wake.notify_all();
}

void Engine::drain() {
  std::unique_lock lock(state_->mu);
  state_->draining = true;
  state_->idle.wait(lock, [&] { return state_->pending == 0; });
}

EngineStats Engine::stats() const {
  std::lock_guard lock(state_->mu);
  return state_->stats;
}

const ModelConfig& Engine::config() const { return state_->model->config(); }

}  // namespace fbt
