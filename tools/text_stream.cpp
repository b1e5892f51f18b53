// Streaming generated tokens as whole UTF-8 text (see text_stream.h).
#include "text_stream.h"

namespace fbt::cli {

std::string without_controls(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F)
      out += "\xEF\xBF\xBD";
    else
      out += ch;
  }
  return out;
}

void TextStream::push(int64_t token) {
  tokens_.push_back(token);
  const std::string text = tokenizer_.decode(tokens_);
  print_up_to(text, stable_prefix(text));
}

void TextStream::finish() {
  const std::string text = tokenizer_.decode(tokens_);
  print_up_to(text, text.size());
  out_ << "\n" << std::flush;
}

void TextStream::print_up_to(const std::string& text, size_t end) {
  if (end <= printed_) return;
  const std::string piece = text.substr(printed_, end - printed_);
  out_ << (terminal_safe_ ? without_controls(piece) : piece) << std::flush;
  printed_ = end;
}

}  // namespace fbt::cli
