// Counting characters of UTF-8 text.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

namespace fbt {

/// Characters (Unicode code points) of UTF-8 text as Python's len(str) counts them: the bytes
/// that do not continue a multi-byte sequence (RFC 3629 §3). lm-eval's acc_norm divides by it,
/// and OpenAI's legacy `text_offset` counts in it.
inline int64_t utf8_length(const std::string& text) {
  return std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

}  // namespace fbt
