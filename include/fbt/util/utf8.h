// UTF-8 text (RFC 3629): validity and counting characters.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

namespace fbt {

/// Length of the valid UTF-8 character at the start of `s` (as sentencepiece's DecodeUTF8:
/// no overlongs, surrogates or code points above U+10FFFF), or 0 if it is malformed (a lone
/// continuation byte, 0xC0/0xC1/0xF5..0xFF, a sequence cut short).
inline size_t utf8_char_len(std::string_view s) {
  auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  auto trail = [&](size_t i) { return (b(i) & 0xC0) == 0x80; };
  auto valid = [](uint32_t cp) { return cp < 0xD800 || (cp >= 0xE000 && cp <= 0x10FFFF); };
  if (b(0) < 0x80) return 1;
  if (s.size() >= 2 && (b(0) & 0xE0) == 0xC0 && trail(1)) {
    const uint32_t cp = ((b(0) & 0x1Fu) << 6) | (b(1) & 0x3Fu);
    if (cp >= 0x80) return 2;
  } else if (s.size() >= 3 && (b(0) & 0xF0) == 0xE0 && trail(1) && trail(2)) {
    const uint32_t cp = ((b(0) & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);
    if (cp >= 0x800 && valid(cp)) return 3;
  } else if (s.size() >= 4 && (b(0) & 0xF8) == 0xF0 && trail(1) && trail(2) && trail(3)) {
    const uint32_t cp = ((b(0) & 0x07u) << 18) | ((b(1) & 0x3Fu) << 12) | ((b(2) & 0x3Fu) << 6) | (b(3) & 0x3Fu);
    if (cp >= 0x10000 && valid(cp)) return 4;
  }
  return 0;
}

/// True if `text` is valid UTF-8 (no overlongs, surrogates or code points above U+10FFFF: the
/// rules of utf8_char_len).
inline bool is_valid_utf8(std::string_view text) {
  while (!text.empty()) {
    const size_t n = utf8_char_len(text);
    if (n == 0) return false;
    text.remove_prefix(n);
  }
  return true;
}

/// Characters (Unicode code points) of UTF-8 text as Python's len(str) counts them: the bytes
/// that do not continue a multi-byte sequence (RFC 3629 §3). lm-eval's acc_norm divides by it,
/// and OpenAI's legacy `text_offset` counts in it.
inline int64_t utf8_length(const std::string& text) {
  return std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

}  // namespace fbt
