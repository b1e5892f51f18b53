// Streaming generated tokens as whole UTF-8 text (see text_stream.h).
#include "text_stream.h"

namespace fbt::cli {

std::string without_controls(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool c0 = (c < 0x20 && c != '\n' && c != '\t') || c == 0x7F;
    // U+0080..U+009F in UTF-8: C2 80..C2 9F (CSI, DCS, OSC, ... of 8-bit terminals)
    const bool c1 = c == 0xC2 && i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xE0) == 0x80;
    if (c0 || c1) {
      out += "\xEF\xBF\xBD";
      i += c1;
    } else {
      out += text[i];
    }
  }
  return out;
}

void TextStream::push(int64_t token) {
  tokens_.push_back(token);
  const std::string text = tokenizer_.decode_continuation(tokens_);
  print_up_to(text, stable_prefix(text));
}

void TextStream::finish() {
  const std::string text = tokenizer_.decode_continuation(tokens_);
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
