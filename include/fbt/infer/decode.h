// Cached inference in the three decoding modes of SPEC §7 (paper §4.2, Listing 2).
#pragma once
#include <string>

#include <torch/types.h>

#include "fbt/infer/decoding.h"
#include "fbt/model/cache.h"
#include "fbt/model/model.h"

namespace fbt {

/// The positions a prefill keeps plain in its fused passes, bool [B,T] for left-padded tokens
/// [B,T] (valid [B,T]): each row's first real token (position 0, SPEC §7) and document starts
/// (FBT::plain_positions); pads are plain too (they are never attended to).
torch::Tensor prefill_plain_positions(FBT& model, const torch::Tensor& tokens, const torch::Tensor& valid);

/// Prefills `cache` with left-padded prompts tokens [B,T] (valid [B,T] false on the leading
/// pads; every row must end with a real token): the plain pass, and for Fused(k) k fused passes
/// after it (the cache holds the last). Sets cache.h_prev to the feedback state and
/// cache.last_token to the token of the last prompt position. Returns the next-token logits at
/// the last position [B,V]. Throws fbt::Error for an invalid `decoding` (Decoding::problem).
/// Must run under torch::NoGradGuard (the cache is written in place).
torch::Tensor prefill(FBT& model, const torch::Tensor& tokens, const torch::Tensor& valid, const Decoding& decoding,
                      KVCache& cache);

/// One cached decode step for tokens [B] (the tokens just sampled): the input is plain in
/// Standard mode and after a document separator, otherwise fused with cache.h_prev. Updates
/// the cache and h_prev; returns the next-token logits [B,V].
torch::Tensor decode_step(FBT& model, const torch::Tensor& tokens, DecodeMode mode, KVCache& cache);

/// The exact sequential soft recurrence, teacher forced: logits [B,T,V] for tokens [B,T],
/// computed token by token with a KV cache. Positions t < plain_prefix[b] ([B] int64; all 0 if
/// undefined), position 0 and document starts take the plain input; every later position is
/// fused with the previous position's feedback state. Runs without grad.
torch::Tensor sequential_logits(FBT& model, const torch::Tensor& tokens, const torch::Tensor& plain_prefix = {});

}  // namespace fbt
