// Cached inference in the three decoding modes of SPEC §7 (paper §4.2, Listing 2).
#pragma once
#include <string>

#include <torch/types.h>

#include "fbt/model/cache.h"
#include "fbt/model/model.h"

namespace fbt {

/// Standard: plain prefill, plain decode. Soft: plain prefill, then every decode input is
/// fused with the previous step's feedback state. Fused(k): plain prefill plus k parallel
/// fused passes over the prompt (KV cache rebuilt from the last), then decode as Soft.
enum class DecodeMode { Standard, Soft, Fused };

template <>
const EnumNames<DecodeMode>& enum_names<DecodeMode>();

/// The mode's name in tables and records: "standard", "soft" or "fused(k)".
std::string mode_label(DecodeMode mode, int64_t fused_passes);

/// Prefills `cache` with left-padded prompts tokens [B,T] (valid [B,T] false on the leading
/// pads; every row must end with a real token). Sets cache.h_prev to the feedback state and
/// cache.last_token to the token of the last prompt position. `fused_passes` (k ≥ 1) is used
/// by DecodeMode::Fused only. Returns the next-token logits at the last position [B,V].
/// Must run under torch::NoGradGuard (the cache is written in place).
torch::Tensor prefill(FBT& model, const torch::Tensor& tokens, const torch::Tensor& valid,
                      DecodeMode mode, int64_t fused_passes, KVCache& cache);

/// One cached decode step for tokens [B] (the tokens just sampled): the input is plain in
/// Standard mode and after a document separator, otherwise fused with cache.h_prev. Updates
/// the cache and h_prev; returns the next-token logits [B,V].
torch::Tensor decode_step(FBT& model, const torch::Tensor& tokens, DecodeMode mode, KVCache& cache);

/// The exact sequential soft recurrence, teacher forced: logits [B,T,V] for tokens [B,T],
/// computed token by token with a KV cache. Positions t < plain_prefix[b] ([B] int64; all 0 if
/// undefined), position 0 and document starts take the plain input; every later position is
/// fused with the previous position's feedback state. Runs without grad.
torch::Tensor sequential_logits(FBT& model, const torch::Tensor& tokens,
                                const torch::Tensor& plain_prefix = {});

}  // namespace fbt
