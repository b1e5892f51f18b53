// Text of a token stream while it grows: the part of a decoded prefix that later tokens cannot
// change (`fbt generate`, `fbt chat`, `fbt serve`).
#pragma once
#include <cstddef>
#include <string>

namespace fbt {

/// Length in bytes of the prefix of `text` (the decoding of the tokens so far) that later tokens
/// cannot change: drops a trailing incomplete UTF-8 sequence and trailing U+FFFD (what
/// sentencepiece decodes byte pieces of a character still missing bytes to).
size_t stable_prefix(const std::string& text);

}  // namespace fbt
