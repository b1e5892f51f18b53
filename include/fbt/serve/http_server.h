// `fbt serve`'s HTTP front end (cpp-httplib): the OpenAI-compatible endpoints on the
// continuous-batching engine, health, metrics and the chat page.
//
//   GET  /                     the chat page (chat_page.h)
//   GET  /health               200 {"status": "ok"}; 503 {"status": "draining"} after begin_drain()
//   GET  /metrics              Prometheus text (metrics.h)
//   GET  /v1/models            {"object": "list", "data": [{"id": NAME, "object": "model", ...}]}
//   POST /v1/completions       OpenAI legacy completions (openai_request.h for the fields; a
//                              `model` other than NAME is a 404 model_not_found, on both POSTs)
//   POST /v1/chat/completions  OpenAI chat completions
// With an API key, /v1/* need "Authorization: Bearer KEY" (else 401). Streams are server-sent
// events ending with "data: [DONE]"; a client that goes away mid-stream has its sequences
// cancelled at the next write, and one that closes its connection before a non-streamed answer
// within a second (its socket is peeked). Every handler answers errors as api_error.h's JSON; none throws
// out of the handler.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "fbt/infer/engine.h"
#include "fbt/serve/openai_request.h"

namespace fbt {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;      ///< 0: any free port (bind() returns it)
  std::string api_key;  ///< "" = no authentication
  int64_t threads = 8;  ///< HTTP worker threads: every open stream holds one
};

class HttpServer {
 public:
  /// `engine` generates and scores (echo with logprobs runs as its scoring task); `served` describes
  /// its model (its tokenizer and chat template must outlive the server; its name is
  /// the id /v1/models lists, responses carry and requests may give).
  HttpServer(Engine& engine, const ServedModel& served, HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Binds the listening socket; returns the port. Throws fbt::Error naming --host / --port when it
  /// cannot (address in use, bad host).
  int bind();
  /// Serves on the bound socket until stop(); false if the listener failed.
  bool listen();
  /// From now on API requests get 503 and /health says "draining".
  void begin_drain();
  /// Blocks until no request is being answered (streams included).
  void wait_idle();
  /// Stops the listener (listen() returns).
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fbt
