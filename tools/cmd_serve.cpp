// `fbt serve`: an OpenAI-compatible HTTP server on a checkpoint (include/fbt/serve/http_server.h)
// over the continuous-batching engine; SIGTERM / SIGINT drain the requests in flight, then exit 0.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include "cli_common.h"
#include "commands.h"
#include "fbt/infer/engine.h"
#include "fbt/io/run_dir.h"
#include "fbt/serve/http_server.h"
#include "fbt/util/error.h"

namespace fbt::cli {
namespace {

struct ServeArgs {
  std::string checkpoint, host = "127.0.0.1", api_key, mode = "standard", device = "auto", chat_template = "auto",
                          model_name, weights = "fp32";
  int port = 8080;
  int64_t max_batch = 16, max_queue = 64, prefill_chunk = 256, fused_passes = 1;
};

/// The checkpoint's chat template, or none (with a note) when `name` is auto and the tokenizer has
/// none that fbt renders: the server then answers /v1/chat/completions with 400.
std::optional<ChatTemplate> chat_template_or_none(const LoadedCheckpoint& checkpoint, const Tokenizer& tokenizer,
                                                  const std::string& name) {
  try {
    return load_chat_template(checkpoint, tokenizer, name);
  } catch (const Error& e) {
    if (name != "auto") throw;
    std::cerr << "note: no chat template (" << e.what() << "): /v1/chat/completions is refused\n";
    return std::nullopt;
  }
}

/// The signals that end the server, blocked in every thread (set before any thread starts) and
/// taken by sigwait in the main thread. SIGUSR1: the listener stopped by itself.
sigset_t serve_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}

void run_serve(const ServeArgs& a) {
  const auto mode = enum_from_string<DecodeMode>(a.mode, "--mode");
  Decoding::fused(a.fused_passes, "--fused-passes");  // the default k of requests that ask fused
  const sigset_t signals = serve_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-response is a failed write, not the end of the server
  auto checkpoint = load_checkpoint(a.checkpoint, a.device);
  const auto tokenizer = load_run_tokenizer(checkpoint);
  const auto chat = chat_template_or_none(checkpoint, *tokenizer, a.chat_template);
  const std::string name = !a.model_name.empty()
                               ? a.model_name
                               : std::filesystem::path(run_dir_of(checkpoint.model_file)).filename().string();
  EngineOptions engine_options{a.max_batch, a.max_queue, a.prefill_chunk,
                               parse_decode_weights(run_weights(checkpoint, a.weights), "--weights")};
  engine_options.prequantized = checkpoint.info.quantized;
  Engine engine(checkpoint.model, engine_options);
  ServedModel served{name, tokenizer.get(), chat ? &*chat : nullptr, checkpoint.model->config().context,
                     mode, a.fused_passes};
  HttpServerOptions options{a.host, a.port, a.api_key, a.max_batch + a.max_queue + 4};
  HttpServer server(engine, served, options);
  const int port = server.bind();
  std::cout << "fbt serve: listening on http://" << a.host << ":" << port << " (model " << name << ")" << std::endl;

  std::atomic<bool> stopping{false};
  std::thread listener([&] {
    const bool ok = server.listen();
    if (!stopping) {
      std::cerr << "fbt serve: the listener stopped" << (ok ? "" : " with an error") << "\n";
      kill(getpid(), SIGUSR1);
    }
  });
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  if (signal_number != SIGUSR1) {
    std::cerr << "fbt serve: " << (signal_number == SIGINT ? "SIGINT" : "SIGTERM")
              << ": finishing the requests in flight, refusing new ones" << std::endl;
    server.begin_drain();
    engine.drain();
    server.wait_idle();
  }
  stopping = true;
  server.stop();
  listener.join();
  if (signal_number == SIGUSR1) throw Error("the HTTP listener stopped unexpectedly");
  std::cerr << "fbt serve: stopped" << std::endl;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd =
      app.add_subcommand("serve",
                         "OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions, /v1/models, /health, "
                         "/metrics and a chat page at /");
  cmd->add_option("--checkpoint", a->checkpoint, "Model file, step directory or run directory")->required();
  cmd->add_option("--host", a->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", a->port, "Port to listen on (0: any free port, printed at start)")
      ->capture_default_str()
      ->check(integer_range(0, 65535));
  cmd->add_option("--api-key", a->api_key, "Require \"Authorization: Bearer KEY\" on /v1/* (default: none)")
      ->envname("FBT_API_KEY");
  cmd->add_option("--model-name", a->model_name,
                  "Model id in /v1/models and responses (default: the run directory's name); requests may leave "
                  "`model` out or give this id, another is answered 404 model_not_found");
  cmd->add_option("--max-batch", a->max_batch, "Sequences decoded together at most")
      ->capture_default_str()
      ->check(integer_range(1, 4096));
  cmd->add_option("--max-queue", a->max_queue, "Sequences waiting for a batch slot at most (more: HTTP 429)")
      ->capture_default_str()
      ->check(integer_range(0, 4096));
  cmd->add_option("--prefill-chunk", a->prefill_chunk, "Prompt tokens per prefill step (longer prompts are chunked)")
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--mode", a->mode, "Default decoding mode: standard, soft or fused (requests: fbt_mode)")
      ->check(CLI::IsMember({"standard", "soft", "fused"}))
      ->capture_default_str();
  cmd->add_option("--fused-passes", a->fused_passes, "Default k of fused(k) (requests: fbt_fused_passes)")
      ->capture_default_str()
      ->check(integer_range(1, 64));
  add_threads_option(cmd);
  add_chat_template_option(cmd, a->chat_template, "For /v1/chat/completions: ");
  add_weights_option(cmd, a->weights);
  cmd->add_option("--device", a->device, "cpu, cuda or auto (CUDA when available)")->capture_default_str();
  cmd->callback([a] { run_serve(*a); });
}

}  // namespace fbt::cli
