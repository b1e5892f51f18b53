// `fbt chat` as a person uses it: a session piped through stdin (replies compared with in-process
// greedy generation of the rendered conversation, commands, errors, history truncation) and
// sessions in a real terminal driven by tmux (send-keys / capture-pane): two turns in each mode,
// /reset, Ctrl-C during a reply and at the prompt; Ctrl-C while a write of the reply blocks.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <thread>

#include "cli_test_helpers.h"
#include "fbt/data/chat_template.h"
#include "fbt/infer/generate.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

/// `text` as `fbt chat` prints a reply: control characters other than '\n' and '\t' as U+FFFD.
std::string as_printed(const std::string& text) {
  std::string out;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    out += (c < 0x20 && c != '\n' && c != '\t') || c == 0x7F ? std::string("\xEF\xBF\xBD") : std::string(1, ch);
  }
  return out;
}

/// The greedy reply of `model` to `messages` rendered by fbt's native template (what `fbt chat`
/// on a byte-tokenizer checkpoint answers), decoded.
std::string greedy_reply(FBT& model, const std::vector<ChatMessage>& messages, DecodeMode mode, int64_t max_new) {
  const ByteTokenizer bytes;
  const auto chat = ChatTemplate::for_tokenizer(bytes, "fbt", "test");
  GenerationOptions o;
  o.decoding = Decoding::make(mode, 1);
  o.max_new_tokens = max_new;
  o.eos_id = ByteTokenizer::kEos;
  o.pad_id = ByteTokenizer::kPad;
  return bytes.decode(generate(model, {chat.render(messages, true).ids}, o)[0]);
}

/// The "prompt N tokens" of every reply's statistics line, in order.
std::vector<int64_t> prompt_lengths(const std::string& text) {
  static const std::regex stats(R"(\((standard|soft|fused\(1\)): prompt (\d+) tokens, reply (\d+) tokens)");
  std::vector<int64_t> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), stats); it != std::sregex_iterator(); ++it)
    out.push_back(std::stoll((*it)[2].str()));
  return out;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Piped stdin on the debug model (context 64, byte tokenizer, fbt's template): the first reply is
// the in-process greedy reply to [EOS] "User: hello\n\n" "Assistant: "; bad commands answer and
// the session goes on; the second turn, 64 + n1 tokens with its history, exceeds 64 − 8 and drops
// the first exchange (a notice), so its soft reply is the greedy one of the second message alone.
TEST(ChatCli, PipedSessionRepliesCommandsAndTruncation) {
  testing::TempDir tmp;
  const fs::path run = tmp.path / "run";
  auto model = testing::make_run_dir(run, ByteTokenizer::kVocab);
  const std::string first = "hello", second = "second message here";
  const std::string input = first + "\n/mode bogus\n/temperature abc\n/mode soft\n" + second + "\n/quit\n";
  testing::write_file(tmp.path / "input", input);
  const auto r =
      testing::run_cli(tmp.path, "chat --checkpoint " + run.string() + " --temperature 0 --max-new-tokens 8 < " +
                                     (tmp.path / "input").string());
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string reply1 = greedy_reply(model, {{"user", first}}, DecodeMode::Standard, 8);
  const std::string reply2 = greedy_reply(model, {{"user", second}}, DecodeMode::Soft, 8);
  // Piped input is echoed after the prompt, so each reply starts on its own line (issue 36).
  EXPECT_NE(r.out.find("[standard] you> " + first + "\n" + as_printed(reply1) + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/mode takes one of standard, soft, fused (got 'bogus'); the mode stays standard"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("/temperature takes a number"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(mode soft)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[soft] you> " + second + "\n" + as_printed(reply2) + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("dropped the 2 oldest messages to fit the model context of 64 tokens"), std::string::npos)
      << r.err;
  // [EOS] "User: hello\n\n" "Assistant: " = 1 + 13 + 11; [EOS] "User: second message here\n\n" "Assistant: " = 39
  EXPECT_EQ(prompt_lengths(r.err), (std::vector<int64_t>{25, 39})) << r.err;

  // The end of the input ends the session as /quit does.
  testing::write_file(tmp.path / "input", first + "\n");
  const auto eof = testing::run_cli(tmp.path, "chat --checkpoint " + run.string() +
                                                  " --temperature 0 "
                                                  "--max-new-tokens 8 < " +
                                                  (tmp.path / "input").string());
  EXPECT_EQ(eof.rc, 0) << eof.err;
  EXPECT_EQ(prompt_lengths(eof.err).size(), 1u) << eof.err;
  // Without --max-new-tokens, 256 does not fit the 64-token context: replies get half of it.
  const auto fitted = testing::run_cli(tmp.path, "chat --checkpoint " + run.string() + " < /dev/null");
  EXPECT_EQ(fitted.rc, 0) << fitted.err;
  EXPECT_NE(fitted.out.find("context 64 tokens, replies of up to 32 tokens"), std::string::npos) << fitted.out;
}

TEST(ChatCli, BadFlagsAndMissingCheckpointAreErrors) {
  testing::TempDir tmp;
  const fs::path run = tmp.path / "run";
  testing::make_run_dir(run, ByteTokenizer::kVocab);
  const auto missing =
      testing::run_cli(tmp.path, "chat --checkpoint " + (tmp.path / "nowhere").string() + " < /dev/null");
  EXPECT_EQ(missing.rc, 1);
  EXPECT_NE(missing.err.find("error:"), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("nowhere"), std::string::npos) << missing.err;
  const auto room =
      testing::run_cli(tmp.path, "chat --checkpoint " + run.string() + " --max-new-tokens 64 < /dev/null");
  EXPECT_EQ(room.rc, 1);
  EXPECT_NE(room.err.find("--max-new-tokens 64 leaves no room"), std::string::npos) << room.err;
  const auto mode = testing::run_cli(tmp.path, "chat --checkpoint " + run.string() + " --mode fast < /dev/null");
  EXPECT_EQ(mode.rc, 1);
  EXPECT_NE(mode.err.find("--mode"), std::string::npos) << mode.err;
  const auto tmpl =
      testing::run_cli(tmp.path, "chat --checkpoint " + run.string() + " --chat-template chatml < /dev/null");
  EXPECT_EQ(tmpl.rc, 1);
  EXPECT_NE(tmpl.err.find("<|im_start|>"), std::string::npos) << tmpl.err;
}

/// N of the first "(standard: prompt 40 tokens, reply N tokens" in `text`, else -1: the reply to
/// "tell me a long story" ([EOS] "User: tell me a long story\n\n" "Assistant: " = 1 + 28 + 11 tokens).
int64_t story_reply_tokens(const std::string& text) {
  static const std::regex stats(R"(\(standard: prompt 40 tokens, reply (\d+) tokens)");
  std::smatch m;
  return std::regex_search(text, m, stats) ? std::stoll(m[1].str()) : -1;
}

/// Zeroes the EOS row of the test model's tied embedding: the head gives EOS the logit 0 while the
/// largest of the other 258 is positive, so a greedy reply ends only at its length limit or Ctrl-C.
void zero_eos_embedding(FBT& model) {
  torch::NoGradGuard no_grad;
  model->named_parameters()["embedding.weight"][ByteTokenizer::kEos].zero_();
}

/// The state letter of process `pid` in /proc/PID/stat ('R' running, 'S' sleeping, ...).
char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

/// Whether process `pid` has a signal pending (/proc/PID/status, ShdPnd and SigPnd not all zero).
bool signals_pending(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if ((line.rfind("ShdPnd:", 0) == 0 || line.rfind("SigPnd:", 0) == 0) &&
        line.find_first_not_of("0\t ", 7) != std::string::npos)
      return true;
  return false;
}

// Ctrl-C while a write of the reply blocks on a slow reader (a terminal over a slow link, a full
// pty; here a one-page pipe nobody reads): the reply still ends with " [stopped]" and nothing written
// is lost. fbt's stdout is the pipe, stdin a file holding one message (its end then ends the
// session). Once the pipe is full and fbt sleeps in its write, SIGINT; once the signal is taken,
// the pipe is drained.
// A SIGINT handler without SA_RESTART failed that write with EINTR, stdio marked stdout as failed
// and std::cout dropped the rest of the reply and the " [stopped]" mark.
TEST(ChatCli, CtrlCWhileAWriteBlocksStillStopsTheReply) {
  testing::TempDir tmp;
  const fs::path run = tmp.path / "run";
  auto model = testing::make_run_dir(run, ByteTokenizer::kVocab, /*context=*/16384, zero_eos_embedding);
  testing::write_file(tmp.path / "input", "tell me a long story\n");
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const int capacity = ::fcntl(out[0], F_SETPIPE_SZ, 4096);  // one page: 4096 on x86-64
  ASSERT_GE(capacity, 4096);
  const std::string checkpoint = run.string(), input = (tmp.path / "input").string(),
                    err = (tmp.path / "stderr").string();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(::open(input.c_str(), O_RDONLY), 0);
    ::dup2(out[1], 1);
    ::dup2(::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 2);
    ::close(out[0]);
    ::execl(FBT_CLI, FBT_CLI, "chat", "--checkpoint", checkpoint.c_str(), "--temperature", "0", "--max-new-tokens",
            "12000", "--threads", "1", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  // Wait until the pipe is full and fbt has slept in its write for a while: ~2 s alone, but up to
  // 5 minutes, as under ctest -j beside a training test fbt took over 60 s to start and fill it
  // (CI, stop 47). One thread, so fbt's OpenMP pool is not oversubscribed by the neighbours'.
  int sleeping = 0;
  for (int i = 0; i < 30000 && sleeping < 10; ++i) {
    int queued = 0;
    ::ioctl(out[0], FIONREAD, &queued);
    sleeping = queued >= capacity && process_state(pid) == 'S' ? sleeping + 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(sleeping, 10) << "fbt never blocked on the full pipe";
  ::kill(pid, SIGINT);
  // Drain only once the signal has been taken (a write woken by the reader first would finish
  // before the handler runs).
  for (int i = 0; i < 6000 && signals_pending(pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(signals_pending(pid));
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string stderr_text = testing::slurp(tmp.path / "stderr");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << stderr_text;
  EXPECT_EQ(count(text, " [stopped]"), 1u) << text;
  const int64_t reply = story_reply_tokens(stderr_text);
  ASSERT_GE(reply, 0) << stderr_text;
  EXPECT_LT(reply, 12000);
  // Every token of the reply reached the pipe: it is the greedy reply of that length (after the
  // prompt and the echoed piped line).
  const std::string prompt = "[standard] you> tell me a long story\n";
  const size_t from = text.find(prompt) + prompt.size(), to = text.find(" [stopped]");
  ASSERT_TRUE(from >= prompt.size() && to != std::string::npos && to >= from) << text;
  EXPECT_EQ(text.substr(from, to - from),
            as_printed(greedy_reply(model, {{"user", "tell me a long story"}}, DecodeMode::Standard, reply)));
}

/// A tmux server of its own (socket fbt_chat_<pid>), one session running `fbt chat --checkpoint
/// RUN ARGS` in a 160x50 terminal, RUN a make_run_dir checkpoint with the given context in a
/// TempDir (with `endless`, its EOS made unreachable by zero_eos_embedding). A shell around it
/// prints "[exit STATUS]" when fbt ends (tmux's own pane_dead_status is not reliable where the
/// server's children are not reaped); the shell traps SIGINT, so Ctrl-C in the terminal stops fbt
/// alone, which starts with the default disposition.
class TmuxChat {
 public:
  TmuxChat(int64_t context, const std::string& args, bool endless = false)
      : socket_("fbt_chat_" + std::to_string(::getpid())) {
    const fs::path run = tmp_.path / "run";
    testing::make_run_dir(run, ByteTokenizer::kVocab, context, endless ? zero_eos_embedding : nullptr);
    testing::write_file(tmp_.path / "tmux.conf", "set -g history-limit 100000\n");
    tmux("-f " + (tmp_.path / "tmux.conf").string() +
         " new-session -d -s chat -x 160 -y 50 /bin/sh -c "
         "'trap : INT; \"$0\" \"$@\"; echo \"[exit $?]\"; sleep 100000' " +
         FBT_CLI + " chat --checkpoint " + run.string() + " " + args);
  }
  ~TmuxChat() { tmux("kill-server"); }

  /// Types `text` literally, then Enter.
  void type(const std::string& text) {
    tmux("send-keys -t chat -l '" + text + "'");
    tmux("send-keys -t chat Enter");
  }
  void ctrl_c() { tmux("send-keys -t chat C-c"); }
  /// Everything the terminal shows, scrollback included.
  std::string screen() { return tmux("capture-pane -p -J -t chat -S -100000"); }
  /// Waits up to `seconds` until `done(screen())`; returns whether it happened.
  template <class F>
  bool wait_for(F done, double seconds = 60) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      if (done(screen())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  /// fbt's exit status once it has ended, else -1.
  int exit_status() {
    static const std::regex exited(R"(\[exit (\d+)\])");
    std::smatch m;
    const std::string s = screen();
    return std::regex_search(s, m, exited) ? std::stoi(m[1].str()) : -1;
  }

 private:
  std::string tmux(const std::string& args) {
    const std::string cmd = "/usr/bin/tmux -L " + socket_ + " " + args + " 2>&1";
    std::string out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[4096];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
      ::pclose(p);
    }
    return out;
  }
  testing::TempDir tmp_;
  std::string socket_;
};

#define REQUIRE_TMUX() \
  if (!fs::exists("/usr/bin/tmux")) GTEST_SKIP() << "tmux is not installed (/usr/bin/tmux): apt-get install tmux"

/// Waits until the screen shows `prompt` (e.g. "[soft] you> ") `n` times.
#define WAIT_PROMPTS(chat, prompt, n)                                                       \
  ASSERT_TRUE(chat.wait_for([&](const std::string& s) { return count(s, prompt) >= (n); })) \
      << "waiting for " << (n) << " x '" << prompt << "':\n"                                \
      << chat.screen()

// Two turns in each mode with /mode between them, then /reset and a bad /mode in a real terminal.
// Each reply prints its statistics: the prompt grows with the conversation across the mode switches
// ([EOS] "System: Be brief.\n\n" "User: hello there\n\n" "Assistant: " = 1 + 19 + 19 + 11 = 50
// tokens for the first), and after /reset the same message is 50 tokens again.
TEST(ChatCli, TmuxTwoTurnsInEachModeAndReset) {
  REQUIRE_TMUX();
  TmuxChat chat(/*context=*/1024, "--temperature 0 --max-new-tokens 24 --system 'Be brief.'");
  WAIT_PROMPTS(chat, "[standard] you> ", 1);
  int turns = 0;
  for (const std::string mode : {"standard", "soft", "fused"}) {
    const std::string label = mode == "fused" ? "fused(1)" : mode;
    if (mode != "standard") {
      chat.type("/mode " + mode);
      WAIT_PROMPTS(chat, "[" + label + "] you> ", 1);
      EXPECT_NE(chat.screen().find("(mode " + label + ")"), std::string::npos);
    }
    chat.type(turns == 0 ? "hello there" : "and then?");
    WAIT_PROMPTS(chat, "(" + label + ": prompt", 1);
    chat.type("tell me more");
    WAIT_PROMPTS(chat, "(" + label + ": prompt", 2);
    turns += 2;
  }
  auto lengths = prompt_lengths(chat.screen());
  ASSERT_EQ(lengths.size(), 6u) << chat.screen();
  EXPECT_EQ(lengths[0], 50);
  for (size_t i = 1; i < lengths.size(); ++i) EXPECT_GT(lengths[i], lengths[i - 1] + 20) << chat.screen();

  chat.type("/reset");
  WAIT_PROMPTS(chat, "(conversation reset)", 1);
  chat.type("hello there");
  WAIT_PROMPTS(chat, "(fused(1): prompt", 3);
  lengths = prompt_lengths(chat.screen());
  ASSERT_EQ(lengths.size(), 7u);
  EXPECT_EQ(lengths.back(), 50);

  chat.type("/mode turbo");
  WAIT_PROMPTS(chat, "(got 'turbo'); the mode stays fused(1)", 1);
  chat.type("/quit");
  WAIT_PROMPTS(chat, "[exit ", 1);
  EXPECT_EQ(chat.exit_status(), 0);
}

// Ctrl-C during a long reply stops that reply: "[stopped]", fewer tokens, the session goes on and
// answers the next message (its prompt holds the cut reply; that reply is cut the same way); Ctrl-C
// at the prompt then ends fbt with status 0. The model never picks EOS, so every reply would run to
// its 12000 tokens and Ctrl-C lands inside it.
TEST(ChatCli, TmuxCtrlCStopsTheReplyNotTheSession) {
  REQUIRE_TMUX();
  TmuxChat chat(/*context=*/16384, "--temperature 0 --max-new-tokens 12000", /*endless=*/true);
  WAIT_PROMPTS(chat, "[standard] you> ", 1);
  chat.type("tell me a long story");
  // Wait for the reply to start: the screen grows past the echoed line.
  const size_t before = chat.screen().size();
  ASSERT_TRUE(chat.wait_for([&](const std::string& s) { return s.size() > before + 200; }, 30)) << chat.screen();
  chat.ctrl_c();
  WAIT_PROMPTS(chat, "[standard] you> ", 2);
  const std::string screen = chat.screen();
  EXPECT_EQ(count(screen, " [stopped]"), 1u) << screen;
  const int64_t cut = story_reply_tokens(screen);
  ASSERT_GE(cut, 0) << screen;
  EXPECT_LT(cut, 12000);
  EXPECT_EQ(chat.exit_status(), -1);  // still running

  // The second reply runs to 12000 tokens too: stop it the same way.
  chat.type("go on");
  const size_t before_second = chat.screen().size();
  ASSERT_TRUE(chat.wait_for([&](const std::string& s) { return s.size() > before_second + 200; }, 30)) << chat.screen();
  chat.ctrl_c();
  WAIT_PROMPTS(chat, "[standard] you> ", 3);
  EXPECT_EQ(count(chat.screen(), " [stopped]"), 2u) << chat.screen();
  const auto lengths = prompt_lengths(chat.screen());
  ASSERT_EQ(lengths.size(), 2u) << chat.screen();
  // + the cut reply (the tokens of it that decode to bytes) + EOS + "User: go on\n\n" + "Assistant: "
  EXPECT_GT(lengths[1], 40 + 1 + 13 + 11);
  EXPECT_LE(lengths[1], 40 + cut + 1 + 13 + 11);
  chat.ctrl_c();  // at the prompt: leave
  WAIT_PROMPTS(chat, "[exit ", 1);
  EXPECT_EQ(chat.exit_status(), 0);
}

}  // namespace
}  // namespace fbt
