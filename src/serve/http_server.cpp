// `fbt serve`'s HTTP front end on cpp-httplib (see http_server.h). The only source that includes
// httplib.h: CMakeLists.txt gives it the library's compile definitions.
#include "fbt/serve/http_server.h"

#include <httplib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>

#include "fbt/serve/api_error.h"
#include "fbt/serve/chat_page.h"
#include "fbt/serve/choice_runner.h"
#include "fbt/serve/metrics.h"
#include "fbt/serve/openai_response.h"

namespace fbt {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.status == 429 || e.status == 503) res.set_header("Retry-After", "1");
  send_json(res, e.status, error_body(e));
}

/// The state of one server-sent-event stream of a request's choices (stream_events).
struct EventStream {
  std::shared_ptr<ChoiceRunner> runner;
  std::string first;
  std::function<std::string(const ChoiceUpdate&)> format;
  std::function<std::string()> last;
  bool started = false;
  Clock::time_point last_write = Clock::now();

  /// Writes `s` (nothing if empty); false, with the choices cancelled, when the client is gone.
  bool write(httplib::DataSink& sink, const std::string& s) {
    if (s.empty()) return true;
    if (!sink.write(s.data(), s.size())) {
      runner->cancel_all();  // the client is gone: free its slots now
      return false;
    }
    last_write = Clock::now();
    return true;
  }

  /// One call of httplib's chunked content provider: writes what is ready; false ends the response.
  bool step(httplib::DataSink& sink) {
    if (!started) {
      started = true;
      if (!write(sink, first)) return false;
    }
    if (runner->done()) {
      if (!write(sink, last() + sse_done())) return false;
      sink.done();
      return true;
    }
    if (const auto update = runner->next(std::chrono::milliseconds(250))) return write(sink, format(*update));
    if (Clock::now() - last_write > std::chrono::seconds(2)) return write(sink, ": waiting\n\n");
    return true;
  }
};

/// Streams a request's choices as server-sent events: `first` at once, then format(update) for
/// each update (empty strings write nothing), then last() and "data: [DONE]". Without an event for
/// 2 s it writes an SSE comment, so a client that went away is noticed even while the choices wait
/// in the queue; a failed write cancels the choices. `inflight` is held until the stream ends.
void stream_events(httplib::Response& res, std::shared_ptr<ChoiceRunner> runner, std::string first,
                   std::function<std::string(const ChoiceUpdate&)> format, std::function<std::string()> last,
                   std::shared_ptr<void> inflight) {
  auto stream = std::make_shared<EventStream>();
  stream->runner = std::move(runner);
  stream->first = std::move(first);
  stream->format = std::move(format);
  stream->last = std::move(last);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [stream](size_t, httplib::DataSink& sink) {
        try {
          return stream->step(sink);
        } catch (const std::exception&) {  // nothing may escape into httplib's worker thread
          stream->runner->cancel_all();
          return false;
        }
      },
      [inflight](bool) {});
}

/// The last event of a stream: with stream_options.include_usage (`include`) a chunk without
/// choices carrying the usage (OpenAI's form), else nothing.
std::function<std::string()> usage_event(const ResponseHeader& header, bool chat, bool include, int64_t prompt_tokens,
                                         std::shared_ptr<ChoiceRunner> runner) {
  return [=]() -> std::string {
    if (!include) return "";
    return sse_event(
        response_object(header, chat, true, json::array(), usage_json(prompt_tokens, runner->generated_tokens())));
  };
}

/// The numeric host of a socket address, as cpp-httplib writes Request::remote_addr.
std::string numeric_host(const sockaddr_storage& a, socklen_t len) {
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0)
    return "";
  return host;
}

/// The socket of the connection `req` came on: the descriptor whose peer is the request's remote
/// address and port (cpp-httplib 0.11 gives handlers no socket). It stays open, and this
/// connection's, until the handler returns. -1 if none matches (/proc unreadable).
int request_socket(const httplib::Request& req) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    const std::string name = entry.path().filename().string();
    if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc()) continue;
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) continue;
    int port = -1;
    if (peer.ss_family == AF_INET) port = ntohs(reinterpret_cast<const sockaddr_in&>(peer).sin_port);
    if (peer.ss_family == AF_INET6) port = ntohs(reinterpret_cast<const sockaddr_in6&>(peer).sin6_port);
    if (port == req.remote_port && numeric_host(peer, len) == req.remote_addr) return fd;
  }
  return -1;
}

/// Whether the client closed connection `fd` (an orderly close reads as end of file; a reset as
/// an error). Bytes waiting (a pipelined request) or none yet mean it is still there.
bool client_gone(int fd) {
  if (fd < 0) return false;
  char byte;
  const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/// Waits for every update of `runner` (a non-streamed request on `req`'s connection), passing each
/// to `collect`. A client that closes its connection meanwhile (cf. llama.cpp #24496)
/// has its choices cancelled, freeing their slots within a second: returns false, with `res`
/// marked 499 (nginx's "client closed request"; nothing is sent).
bool run_to_end(ChoiceRunner& runner, const httplib::Request& req, httplib::Response& res,
                const std::function<void(const ChoiceUpdate&)>& collect) {
  const int fd = request_socket(req);
  while (!runner.done()) {
    if (const auto update = runner.next(std::chrono::seconds(1))) collect(*update);
    if (client_gone(fd)) {
      runner.cancel_all();
      res.status = 499;
      return false;
    }
  }
  return true;
}

}  // namespace

struct HttpServer::Impl {
  Engine& engine;
  ServedModel served;
  HttpServerOptions options;
  httplib::Server http;
  RequestCounters counters;
  std::atomic<bool> draining{false};
  std::mutex idle_mutex;
  std::condition_variable idle;
  int64_t inflight = 0;

  Impl(Engine& e, const ServedModel& s, HttpServerOptions o) : engine(e), served(s), options(std::move(o)) {}

  /// Counts a request being answered until the returned token is released.
  std::shared_ptr<void> enter() {
    {
      std::lock_guard<std::mutex> lock(idle_mutex);
      ++inflight;
    }
    return std::shared_ptr<void>(nullptr, [this](void*) {
      {
        std::lock_guard<std::mutex> lock(idle_mutex);
        --inflight;
      }
      idle.notify_all();
    });
  }

  using ApiHandler = void (Impl::*)(const httplib::Request&, httplib::Response&, std::shared_ptr<void>);

  /// Registers POST `path`: refused while draining; every exception becomes an error response.
  void post(const std::string& path, ApiHandler handler) {
    http.Post(path, [this, path, handler](const httplib::Request& req, httplib::Response& res) {
      auto token = enter();
      try {
        if (draining) throw ApiError(503, "the server is shutting down", "", "server_error");
        (this->*handler)(req, res, token);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const Error& e) {  // the engine's own checks (a request the parser let through)
        send_error(res, ApiError(400, e.what()));
      } catch (const std::exception& e) {
        send_error(res, ApiError(500, std::string("internal error: ") + e.what(), "", "server_error"));
      }
      counters.count(path, res.status == -1 ? 200 : res.status);
    });
  }

  void routes();
  void completions(const httplib::Request& req, httplib::Response& res, std::shared_ptr<void> inflight);
  void chat(const httplib::Request& req, httplib::Response& res, std::shared_ptr<void> inflight);
  std::vector<TokenLogprob> prompt_entries(const std::vector<int64_t>& prompt, const GenerationParams& p,
                                           int64_t top_n);
};

void HttpServer::Impl::routes() {
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + options.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(
        res, ApiError(401, "missing or wrong API key: send \"Authorization: Bearer KEY\"", "", "authentication_error"));
    counters.count(req.path, 401);
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // an answer of ours
    send_error(res, ApiError(res.status, "no route " + req.method + " " + req.path));
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, ApiError(500, "internal error", "", "server_error"));
  });
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(chat_page_html(), "text/html; charset=utf-8");
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, draining ? 503 : 200, {{"status", draining ? "draining" : "ok"}});
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_metrics(engine.stats(), counters.snapshot()), "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json entry = {{"id", served.name},
                        {"object", "model"},
                        {"created", 0},
                        {"owned_by", "fbt"},
                        {"context_length", served.context}};
    send_json(res, 200, {{"object", "list"}, {"data", json::array({entry})}});
  });
  post("/v1/completions", &Impl::completions);
  post("/v1/chat/completions", &Impl::chat);
}

std::vector<TokenLogprob> HttpServer::Impl::prompt_entries(const std::vector<int64_t>& prompt,
                                                           const GenerationParams& p, int64_t top_n) {
  const auto scored = score_on_engine(engine, ScoringRequest{prompt, p.decoding, top_n});
  const auto offsets = text_offsets(*served.tokenizer, prompt);
  std::vector<TokenLogprob> entries;
  for (size_t t = 0; t < prompt.size(); ++t)
    entries.push_back({prompt[t], scored.logprob[t], scored.top[t], offsets[t]});
  return entries;
}

void HttpServer::Impl::completions(const httplib::Request& req, httplib::Response& res,
                                   std::shared_ptr<void> inflight) {
  const CompletionRequest r = parse_completion_request(req.body, served);
  const auto header = make_header("cmpl-", served.name, r.params.decoding.label());
  const Tokenizer& tokenizer = *served.tokenizer;
  const bool with_logprobs = r.logprobs >= 0;
  const auto n = static_cast<size_t>(r.params.n);
  // Per prompt: what echo puts before the generated text, and where the generated text starts.
  std::vector<std::vector<TokenLogprob>> echoed(r.prompts.size());
  std::vector<int64_t> base(r.prompts.size(), 0);
  int64_t prompt_tokens = 0;
  for (size_t p = 0; p < r.prompts.size(); ++p) {
    prompt_tokens += static_cast<int64_t>(r.prompts[p].size());
    if (!r.echo) continue;
    if (with_logprobs) echoed[p] = prompt_entries(r.prompts[p], r.params, r.logprobs);
    base[p] = utf8_length(r.prompt_texts[p]);
  }
  auto echo_choice = [&](size_t c, const std::string& finish) {
    const size_t p = c / n;
    return completion_choice(static_cast<int64_t>(c), r.echo ? r.prompt_texts[p] : "",
                             with_logprobs ? legacy_logprobs(echoed[p], tokenizer) : json(nullptr), finish);
  };
  if (r.params.max_tokens == 0) {  // scoring only (echo): nothing to generate
    json choices = json::array();
    for (size_t c = 0; c < r.prompts.size() * n; ++c) choices.push_back(echo_choice(c, "length"));
    const json body = response_object(header, false, false, choices, usage_json(prompt_tokens, 0));
    if (!r.params.stream) return send_json(res, 200, body);
    return res.set_content(sse_event(body) + sse_done(), "text/event-stream");
  }
  std::vector<int64_t> stop_tokens;
  if (!r.params.ignore_eos) stop_tokens.push_back(tokenizer.eos_id());
  auto runner = std::make_shared<ChoiceRunner>(engine, tokenizer, r.params, r.prompts, stop_tokens, r.logprobs);
  runner->start();
  // The logprobs entry of the token an update carries: the last kept token of its choice, or the
  // stop token after them.
  auto entry = [runner, base, n](const ChoiceUpdate& u) {
    const auto& text = runner->text(u.choice);
    return TokenLogprob{u.token->token, u.token->logprob, u.token->top,
                        base[u.choice / n] + (u.token->stop ? text.next_offset() : text.offsets().back())};
  };
  if (r.params.stream) {
    std::string first;
    if (r.echo)
      for (size_t c = 0; c < runner->size(); ++c)
        first += sse_event(response_object(header, false, true, json::array({echo_choice(c, "")}), nullptr));
    auto format = [=, &tokenizer](const ChoiceUpdate& u) -> std::string {
      if (u.text.empty() && u.finish_reason.empty() && !(with_logprobs && u.token)) return "";
      const json lp = with_logprobs && u.token ? legacy_logprobs({entry(u)}, tokenizer) : json(nullptr);
      return sse_event(response_object(
          header, false, true,
          json::array({completion_choice(static_cast<int64_t>(u.choice), u.text, lp, u.finish_reason)}), nullptr));
    };
    return stream_events(res, runner, first, format,
                         usage_event(header, false, r.params.include_usage, prompt_tokens, runner), inflight);
  }
  std::vector<std::vector<TokenLogprob>> generated(runner->size());
  if (!run_to_end(*runner, req, res, [&](const ChoiceUpdate& u) {
        if (with_logprobs && u.token) generated[u.choice].push_back(entry(u));
      }))
    return;
  json choices = json::array();
  for (size_t c = 0; c < runner->size(); ++c) {
    const size_t p = c / n;
    json lp = nullptr;
    if (with_logprobs) {
      auto entries = echoed[p];
      entries.insert(entries.end(), generated[c].begin(), generated[c].end());
      lp = legacy_logprobs(entries, tokenizer);
    }
    const std::string text = (r.echo ? r.prompt_texts[p] : "") + runner->text(c).text();
    choices.push_back(completion_choice(static_cast<int64_t>(c), text, lp, runner->finish_reason(c)));
  }
  send_json(res, 200,
            response_object(header, false, false, choices, usage_json(prompt_tokens, runner->generated_tokens())));
}

void HttpServer::Impl::chat(const httplib::Request& req, httplib::Response& res, std::shared_ptr<void> inflight) {
  const ChatRequest r = parse_chat_request(req.body, served);
  const auto header = make_header("chatcmpl-", served.name, r.params.decoding.label());
  std::vector<int64_t> stop_tokens;
  if (!r.params.ignore_eos) {
    stop_tokens.push_back(served.chat->end_of_turn_id());
    if (served.tokenizer->eos_id() != stop_tokens[0]) stop_tokens.push_back(served.tokenizer->eos_id());
  }
  auto runner = std::make_shared<ChoiceRunner>(engine, *served.tokenizer, r.params,
                                               std::vector<std::vector<int64_t>>{r.prompt}, stop_tokens, -1);
  runner->start();
  const auto prompt_tokens = static_cast<int64_t>(r.prompt.size());
  if (r.params.stream) {
    json roles = json::array();
    for (size_t c = 0; c < runner->size(); ++c)
      roles.push_back(chat_delta_choice(static_cast<int64_t>(c), {{"role", "assistant"}, {"content", ""}}, ""));
    auto format = [=](const ChoiceUpdate& u) -> std::string {
      if (u.text.empty() && u.finish_reason.empty()) return "";
      const json delta = u.text.empty() ? json::object() : json{{"content", u.text}};
      return sse_event(response_object(
          header, true, true, json::array({chat_delta_choice(static_cast<int64_t>(u.choice), delta, u.finish_reason)}),
          nullptr));
    };
    return stream_events(res, runner, sse_event(response_object(header, true, true, roles, nullptr)), format,
                         usage_event(header, true, r.params.include_usage, prompt_tokens, runner), inflight);
  }
  if (!run_to_end(*runner, req, res, [](const ChoiceUpdate&) {})) return;
  json choices = json::array();
  for (size_t c = 0; c < runner->size(); ++c)
    choices.push_back(chat_choice(static_cast<int64_t>(c), runner->text(c).text(), runner->finish_reason(c)));
  send_json(res, 200,
            response_object(header, true, false, choices, usage_json(prompt_tokens, runner->generated_tokens())));
}

HttpServer::HttpServer(Engine& engine, const ServedModel& served, HttpServerOptions options)
    : impl_(std::make_unique<Impl>(engine, served, std::move(options))) {
  const auto threads = static_cast<size_t>(impl_->options.threads);
  impl_->http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  impl_->http.set_keep_alive_max_count(1000);
  impl_->http.set_payload_max_length(64u << 20);
  impl_->routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  const auto& o = impl_->options;
  errno = 0;
  const int port =
      o.port == 0 ? impl_->http.bind_to_any_port(o.host) : (impl_->http.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port <= 0)
    throw Error("--host/--port: cannot listen on " + o.host + ":" + std::to_string(o.port) +
                (errno != 0 ? std::string(" (") + std::strerror(errno) + ")" : std::string()));
  return port;
}

bool HttpServer::listen() { return impl_->http.listen_after_bind(); }

void HttpServer::begin_drain() { impl_->draining = true; }

void HttpServer::wait_idle() {
  std::unique_lock<std::mutex> lock(impl_->idle_mutex);
  impl_->idle.wait(lock, [&] { return impl_->inflight == 0; });
}

void HttpServer::stop() { impl_->http.stop(); }

}  // namespace fbt
