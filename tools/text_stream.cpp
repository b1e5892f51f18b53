// Streaming generated tokens as whole UTF-8 text (see text_stream.h).
#include "text_stream.h"

namespace fbt::cli {

size_t stable_prefix(const std::string& text) {
  static const std::string kReplacement = "\xEF\xBF\xBD";
  size_t end = text.size();
  while (end >= 3 && text.compare(end - 3, 3, kReplacement) == 0) end -= 3;
  size_t lead = end;  // index of the last character's lead byte
  while (lead > 0 && end - lead < 4 && (static_cast<unsigned char>(text[lead - 1]) & 0xC0) == 0x80) --lead;
  if (lead == 0) return end;  // only continuation bytes: invalid, nothing to wait for
  --lead;
  const auto b = static_cast<unsigned char>(text[lead]);
  const size_t need = (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
  return end - lead < need ? lead : end;
}

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
