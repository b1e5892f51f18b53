// The stable prefix of a growing decoded text (see stream_text.h).
#include "fbt/infer/stream_text.h"

namespace fbt {

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

}  // namespace fbt
