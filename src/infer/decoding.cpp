// Decoding: a mode and its fused prefill passes (see decoding.h).
#include "fbt/infer/decoding.h"

#include "fbt/util/error.h"

namespace fbt {

template <>
const EnumNames<DecodeMode>& enum_names<DecodeMode>() {
  static const EnumNames<DecodeMode> names{
      {DecodeMode::Standard, "standard"}, {DecodeMode::Soft, "soft"}, {DecodeMode::Fused, "fused"}};
  return names;
}

Decoding Decoding::make(DecodeMode mode, int64_t fused_passes, const std::string& what) {
  Decoding d{mode, mode == DecodeMode::Fused ? fused_passes : 0};
  if (const auto p = d.problem(); !p.empty()) throw Error(what + " " + p);
  return d;
}

std::string Decoding::problem() const {
  if (mode == DecodeMode::Fused && fused_passes < 1)
    return "must be >= 1 for the fused mode (got " + std::to_string(fused_passes) + ")";
  if (mode != DecodeMode::Fused && fused_passes != 0)
    return "must be 0 outside the fused mode (got " + std::to_string(fused_passes) + ")";
  return "";
}

std::string Decoding::label() const {
  const std::string name = enum_to_string(mode);
  return mode == DecodeMode::Fused ? name + "(" + std::to_string(fused_passes) + ")" : name;
}

}  // namespace fbt
