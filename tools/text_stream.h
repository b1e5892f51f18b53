// Streaming generated tokens to a terminal as text whose UTF-8 characters stay whole
// (`fbt generate`, `fbt chat`).
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "fbt/data/tokenizer.h"
#include "fbt/infer/stream_text.h"

namespace fbt::cli {

/// `text` with every control character except '\n' and '\t' (C0, DEL and the C1 controls
/// U+0080..U+009F: ESC, CSI, DCS and OSC start terminal escape sequences; a DCS from a random
/// model made tmux swallow the rest of a chat session) written as U+FFFD, so that model output
/// cannot drive the terminal.
std::string without_controls(const std::string& text);

/// Prints generated tokens as text while they arrive: the whole token list is decoded each time
/// and the newly stable suffix (stable_prefix) is written and flushed; with `terminal_safe`, as
/// without_controls prints it.
class TextStream {
 public:
  TextStream(const Tokenizer& tokenizer, std::ostream& out, bool terminal_safe = false)
      : tokenizer_(tokenizer), out_(out), terminal_safe_(terminal_safe) {}
  void push(int64_t token);
  /// Writes whatever is left, then a newline.
  void finish();
  /// The tokens pushed so far.
  const std::vector<int64_t>& tokens() const { return tokens_; }

 private:
  void print_up_to(const std::string& text, size_t end);
  const Tokenizer& tokenizer_;
  std::ostream& out_;
  bool terminal_safe_;
  std::vector<int64_t> tokens_;
  size_t printed_ = 0;
};

}  // namespace fbt::cli
