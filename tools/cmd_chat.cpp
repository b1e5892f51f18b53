// `fbt chat`: an interactive terminal chat on a checkpoint: multi-turn history through its chat
// template, replies streamed token by token in the Standard, Soft or Fused(k) mode, slash commands,
// Ctrl-C to stop a reply.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli_common.h"
#include "commands.h"
#include "fbt/infer/chat_history.h"
#include "fbt/infer/generate.h"
#include "fbt/util/error.h"
#include "text_stream.h"

namespace fbt::cli {
namespace {

struct ChatArgs {
  std::string checkpoint, mode = "standard", device = "auto", system, chat_template = "auto", weights = "fp32";
  int64_t fused_passes = 1, max_new_tokens = 256;
  bool max_new_tokens_given = false;  ///< else 256 is lowered to half of a smaller model context
  SamplingOptions sampling{/*temperature=*/0.7};
};

/// What slash commands change during a session.
struct ChatState {
  Decoding decoding;
  SamplingOptions sampling;
  std::vector<ChatMessage> messages;       ///< the system message (if any), then the turns so far
  int64_t replies = 0;                     ///< replies generated: reply i samples with seed + i
  std::shared_ptr<DecodeBackend> backend;  ///< the --weights int8/int4 backend (empty: generate's own)
};

constexpr const char* kHelp =
    "commands:\n"
    "  /mode standard|soft|fused   decoding mode of the next replies (fused: --fused-passes over the prompt)\n"
    "  /temperature X              0 (greedy) or a sampling temperature\n"
    "  /reset                      forget the conversation (the system message stays)\n"
    "  /help                       this list\n"
    "  /quit                       leave (as do Ctrl-D and Ctrl-C at the prompt)\n"
    "Ctrl-C during a reply stops the reply; what was written of it stays in the conversation.\n";

// Set by SIGINT; generation polls it between tokens (GenerationOptions::should_stop).
volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_interrupt(int) { g_interrupted = 1; }

/// Installs on_interrupt for SIGINT while alive; restores the previous handler on destruction.
/// At the prompt without SA_RESTART, so that Ctrl-C also ends the blocked read. During a reply with
/// SA_RESTART: a Ctrl-C that lands while a write of the reply blocks (a slow terminal, a full pty or
/// pipe) must not fail that write with EINTR, which makes stdio drop the rest of the reply and its
/// " [stopped]" (POSIX sigaction, SA_RESTART; write(2) on a pipe or terminal is restarted).
class InterruptGuard {
 public:
  explicit InterruptGuard(bool restart_interrupted_calls) {
    struct sigaction action {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    action.sa_flags = restart_interrupted_calls ? SA_RESTART : 0;
    sigaction(SIGINT, &action, &previous_);
  }
  ~InterruptGuard() { sigaction(SIGINT, &previous_, nullptr); }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  struct sigaction previous_ {};
};

std::vector<ChatMessage> initial_messages(const ChatArgs& a) {
  if (a.system.empty()) return {};
  return {{"system", a.system}};
}

/// Handles a line starting with '/': prints what changed or what is wrong (the session goes on).
/// Returns false for /quit.
bool run_command(const std::string& line, const ChatArgs& a, ChatState& state) {
  std::istringstream in(line);
  std::string command, value, extra;
  in >> command >> value >> extra;
  if (command == "/quit" || command == "/exit") return false;
  if (command == "/help") {
    std::cout << kHelp;
  } else if (command == "/reset") {
    state.messages = initial_messages(a);
    std::cout << "(conversation reset)\n";
  } else if (command == "/mode") {
    if ((value != "standard" && value != "soft" && value != "fused") || !extra.empty()) {
      std::cout << "/mode takes one of standard, soft, fused (got '" << value << (extra.empty() ? "" : " ...")
                << "'); the mode stays " << state.decoding.label() << "\n";
    } else {
      state.decoding = Decoding::make(enum_from_string<DecodeMode>(value, "/mode"), a.fused_passes, "--fused-passes");
      std::cout << "(mode " << state.decoding.label() << ")\n";
    }
  } else if (command == "/temperature") {
    try {
      size_t used = 0;
      const double t = std::stod(value, &used);
      if (used != value.size() || !extra.empty()) throw std::invalid_argument(value);
      check_temperature(t, "/temperature");
      state.sampling.temperature = t;
      std::cout << "(temperature " << t << ")\n";
    } catch (const Error& e) {
      std::cout << e.what() << "\n";
    } catch (const std::exception&) {
      std::cout << "/temperature takes a number: 0 (greedy) or a sampling temperature (got '" << value << "')\n";
    }
  } else {
    std::cout << "unknown command " << command << "; /help lists the commands\n";
  }
  return true;
}

/// Answers the last user message of state.messages: fits the history to the context (a notice on
/// stderr when old turns go), streams the reply to stdout until the end-of-turn token,
/// --max-new-tokens or Ctrl-C, and appends it to the history.
void reply(FBT& model, const Tokenizer& tokenizer, const ChatTemplate& chat, const ChatArgs& a, ChatState& state) {
  const int64_t context = model->config().context;
  FittedChat fitted;
  try {
    fitted = fit_chat_history(chat, state.messages, context, a.max_new_tokens);
  } catch (const Error& e) {
    state.messages.pop_back();  // the message that cannot be answered
    std::cout << "(cannot answer: " << e.what() << ")\n";
    return;
  }
  if (fitted.dropped > 0)
    std::cerr << "(dropped the " << fitted.dropped << " oldest messages to fit the model context of " << context
              << " tokens with room for a reply of " << a.max_new_tokens << ")\n";
  GenerationOptions o;
  o.backend = state.backend;
  o.decoding = state.decoding;
  o.max_new_tokens = a.max_new_tokens;
  o.sampling = state.sampling;
  o.sampling.seed = a.sampling.seed + static_cast<uint64_t>(state.replies++);
  o.eos_id = chat.end_of_turn_id();
  o.pad_id = tokenizer.pad_id();
  TextStream stream(tokenizer, std::cout, /*terminal_safe=*/true);
  o.on_token = [&](int64_t, int64_t token) { stream.push(token); };
  o.should_stop = [] { return g_interrupted != 0; };
  const InterruptGuard while_replying(/*restart_interrupted_calls=*/true);
  g_interrupted = 0;
  const auto start = std::chrono::steady_clock::now();
  generate(model, {fitted.prompt.ids}, o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool stopped = g_interrupted != 0;
  g_interrupted = 0;
  if (stopped) std::cout << " [stopped]";
  stream.finish();
  const auto n = static_cast<int64_t>(stream.tokens().size());
  char line[160];
  std::snprintf(line, sizeof line, "(%s: prompt %lld tokens, reply %lld tokens, %.1f tokens/s)\n",
                state.decoding.label().c_str(), static_cast<long long>(fitted.prompt.ids.size()),
                static_cast<long long>(n), seconds > 0 ? n / seconds : 0.0);
  std::cerr << line << std::flush;
  state.messages.push_back({"assistant", tokenizer.decode(stream.tokens())});
}

void run_chat(ChatArgs a) {
  const auto decoding =
      Decoding::make(enum_from_string<DecodeMode>(a.mode, "--mode"), a.fused_passes, "--fused-passes");
  Decoding::fused(a.fused_passes, "--fused-passes");  // checked whatever --mode (/mode fused uses it)
  a.sampling.validate();
  auto checkpoint = load_checkpoint(a.checkpoint, a.device);
  const auto tokenizer = load_run_tokenizer(checkpoint);
  const auto chat = load_chat_template(checkpoint, *tokenizer, a.chat_template);
  const int64_t context = checkpoint.model->config().context;
  if (a.max_new_tokens >= context && !a.max_new_tokens_given) a.max_new_tokens = context / 2;
  if (a.max_new_tokens >= context)
    throw Error("--max-new-tokens " + std::to_string(a.max_new_tokens) + " leaves no room for a prompt in the " +
                "model context of " + std::to_string(context) + " tokens; give at most " + std::to_string(context - 1));
  ChatState state{decoding, a.sampling, initial_messages(a), 0,
                  decode_backend_for(checkpoint, a.weights, /*sole_user=*/true)};
  std::cout << "fbt chat: " << checkpoint.model_file << " (step " << checkpoint.info.step << "), " << chat.name()
            << " template, context " << context << " tokens, replies of up to " << a.max_new_tokens
            << " tokens. /help lists the commands; Ctrl-C stops a reply; "
            << "Ctrl-D or /quit leaves.\n";
  const InterruptGuard at_the_prompt(/*restart_interrupted_calls=*/false);
  // Piped input is not echoed by a terminal: print each line after the prompt, so a reply starts
  // on its own line instead of reading as if the user typed it.
  const bool echo_input = isatty(STDIN_FILENO) == 0;
  for (;;) {
    // A Ctrl-C that lands while a write outside a reply blocks (a command's answer on a full pty)
    // fails that write with EINTR, and std::cout then drops every later output: clear the error so
    // the prompt shows.
    std::cout.clear();
    std::clearerr(stdout);
    std::cout << "\n[" << state.decoding.label() << "] you> " << std::flush;
    std::string line;
    // Ctrl-D, the end of the input, or Ctrl-C (the read fails with EINTR). A Ctrl-C that landed
    // just before the read (after a reply) does not end the session with the line typed next.
    if (!std::getline(std::cin, line)) break;
    if (echo_input) std::cout << line << "\n" << std::flush;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (line[0] == '/') {
      if (!run_command(line, a, state)) return;
      continue;
    }
    state.messages.push_back({"user", line});
    reply(checkpoint.model, *tokenizer, chat, a, state);
  }
  std::cout << "\n";
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand(
      "chat", "Chat with a checkpoint in the terminal (its chat template; replies streamed; /help inside)");
  cmd->add_option("--checkpoint", a->checkpoint, "Model file, step directory or run directory")->required();
  cmd->add_option("--mode", a->mode, "Decoding mode of the replies: standard, soft or fused (/mode changes it)")
      ->check(CLI::IsMember({"standard", "soft", "fused"}))
      ->capture_default_str();
  cmd->add_option("--fused-passes", a->fused_passes, "k of fused(k): extra fused passes over the prompt")
      ->capture_default_str()
      ->check(integer_range(1));
  auto* max_new = cmd->add_option("--max-new-tokens", a->max_new_tokens,
                                  "Tokens per reply at most, below the model context (not given: 256, or half "
                                  "the context if that is smaller)")
                      ->capture_default_str()
                      ->check(integer_range(1));
  cmd->add_option("--temperature", a->sampling.temperature, "0 = greedy (/temperature changes it)")
      ->capture_default_str()
      ->check(temperature_value());
  cmd->add_option("--top-p", a->sampling.top_p, "Nucleus mass to keep (1 = all)")
      ->capture_default_str()
      ->check(number_range(0, 1, /*lo_open=*/true));
  cmd->add_option("--seed", a->sampling.seed, "Sampling seed (reply i uses seed + i)")
      ->capture_default_str()
      ->check(seed_value());
  cmd->add_option("--system", a->system, "System message at the start of the conversation");
  add_chat_template_option(cmd, a->chat_template, "");
  add_weights_option(cmd, a->weights);
  add_threads_option(cmd);
  cmd->add_option("--device", a->device, "cpu, cuda or auto (CUDA when available)")->capture_default_str();
  cmd->callback([a, max_new] {
    a->max_new_tokens_given = max_new->count() > 0;
    run_chat(*a);
  });
}

}  // namespace fbt::cli
