// The decoding modes of SPEC §7 (paper §4.2, Listing 2) as one value: the mode and its number of
// fused prefill passes, with the one validation, label and pass count every caller shares.
#pragma once
#include <cstdint>
#include <string>

#include "fbt/util/json_fields.h"  // EnumNames, enum_names

namespace fbt {

/// Standard: plain prefill, plain decode. Soft: plain prefill, then every decode input is
/// fused with the previous step's feedback state. Fused(k): plain prefill plus k parallel
/// fused passes over the prompt (KV cache rebuilt from the last), then decode as Soft.
enum class DecodeMode { Standard, Soft, Fused };

template <>
const EnumNames<DecodeMode>& enum_names<DecodeMode>();

/// A decoding mode with its fused prefill passes: Standard, Soft, or Fused(k) with k ≥ 1.
/// fused_passes is k for Fused and 0 for the other two (make() enforces both); code that reads
/// a Decoding may rely on it once make() or problem() has passed.
struct Decoding {
  DecodeMode mode = DecodeMode::Standard;
  int64_t fused_passes = 0;  ///< k of Fused(k); 0 for Standard and Soft

  /// `mode`, with k = `fused_passes` when it is Fused (which needs k ≥ 1) and 0 otherwise (the
  /// value is then ignored, as `fbt generate --mode soft --fused-passes 3` ignores the flag).
  /// Throws fbt::Error "`what` must be >= 1 for the fused mode (got 0)" (`what` names the flag,
  /// field or parameter that gave k).
  static Decoding make(DecodeMode mode, int64_t fused_passes, const std::string& what = "fused_passes");
  static Decoding fused(int64_t k, const std::string& what = "fused_passes") {
    return make(DecodeMode::Fused, k, what);
  }

  /// What is wrong with this value ("must be >= 1 for the fused mode (got 0)", "must be 0 outside
  /// the fused mode (got 2)"), or "" when it is valid.
  std::string problem() const;
  /// "standard", "soft" or "fused(k)": the mode's name in tables, records and responses.
  std::string label() const;
  /// Passes over the prompt at prefill: 1 + k for Fused(k), 1 otherwise.
  int64_t prefill_passes() const { return 1 + fused_passes; }
  /// Whether decode steps fuse the carried feedback state (Soft and Fused).
  bool feeds_back() const { return mode != DecodeMode::Standard; }

  bool operator==(const Decoding& o) const { return mode == o.mode && fused_passes == o.fused_passes; }
  bool operator!=(const Decoding& o) const { return !(*this == o); }
};

}  // namespace fbt
