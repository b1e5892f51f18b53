// Per-layer residual streams for linear probes (SPEC §8, paper §4.4 and App. F): standard
// prefill vs one-step recurrent prefill.
#pragma once
#include <torch/types.h>

#include "fbt/model/model.h"

namespace fbt {

/// Residual streams of layers 0..L: layer 0 is the stack input, layer l the residual after
/// block l (before the final norm). Each tensor is [L+1,B,T,D].
struct ProbeStates {
  torch::Tensor standard;   ///< plain prefill (FBT::forward's stack)
  torch::Tensor recurrent;  ///< one-step recurrent prefill (see probe_states)
};

/// Runs tokens [B,T] (no padding) twice without grad:
///  standard  — the plain prefill, u = plain_input(embed(tokens));
///  recurrent — the same, except that the last position t = T-1 takes the fused input
///              fuse(h[T-2], e_n[T-1]) with h the standard prefill's feedback state (one fused
///              pass restricted to the last position: run_passes' second pass with every
///              earlier position plain). If T-1 must stay plain (T = 1 or a document start), both agree.
/// Positions t < T-1 are identical in both. Throws fbt::Error if T exceeds the model context.
ProbeStates probe_states(FBT& model, const torch::Tensor& tokens);

}  // namespace fbt
