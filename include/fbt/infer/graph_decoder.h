// Decode steps replayed from a CUDA graph: the serving design of the paper's App. D (SPEC §7).
#pragma once
#include <cstdint>
#include <memory>

#include <torch/types.h>

#include "fbt/infer/decode.h"
#include "fbt/model/cache.h"
#include "fbt/model/model.h"

namespace fbt {

/// Decodes one token per row and step, like decode_step, with every tensor at a fixed address
/// so the step can be captured once into a CUDA graph and replayed per token (paper App. D: the
/// feedback state lives in a persistent per-sequence buffer, here KVCache::h_prev [B,D], and the
/// fused input is computed inside the captured forward). The fixed shape: the cache's
/// `write_slot` is set, so each step writes slot `length` by device-side index and attends over
/// all `capacity` slots (unfilled ones masked); the token input and the logits are static
/// buffers. On CUDA with `use_graph`, the first `step` runs eagerly (it also warms up cuBLAS and
/// the allocator) and then captures the step on a side stream; later steps replay it. Elsewhere
/// the same fixed-shape step runs eagerly, which is what the CPU tests compare with decode_step.
///
/// The cache is prefilled as usual (prefill() with write_slot undefined); GraphDecoder sets
/// write_slot only around its own steps, so a later prefill into the same cache (cache.clear(),
/// then prefill) keeps the captured graph valid: prefill writes the cache in place. One
/// GraphDecoder per (model, mode, cache); the model's weights must not be reallocated after
/// capture (moving the model to another device or dtype invalidates the graph).
class GraphDecoder {
 public:
  /// Throws fbt::Error when `use_graph` is set and the cache is not on a CUDA device, or this
  /// build of libtorch has no CUDA.
  GraphDecoder(FBT& model, DecodeMode mode, KVCache& cache, bool use_graph);
  ~GraphDecoder();
  GraphDecoder(const GraphDecoder&) = delete;
  GraphDecoder& operator=(const GraphDecoder&) = delete;

  /// The same contract as decode_step(model, tokens, mode, cache): tokens [B] int64 (the tokens
  /// just sampled) -> next-token logits [B,V]. The returned tensor is the decoder's static output
  /// buffer, overwritten by the next step: clone it to keep it. Throws fbt::Error for token ids
  /// outside [0, V) and when the cache is full. Must run under NoGradGuard or InferenceMode.
  torch::Tensor step(const torch::Tensor& tokens);

  /// Whether later steps replay a captured CUDA graph (false before the first step, and always
  /// without `use_graph`).
  bool captured() const;

 private:
  torch::Tensor run_step();  // the fixed-shape step on tokens_, writing logits_
  void capture();

  FBT model_;
  DecodeMode mode_;
  KVCache& cache_;
  bool use_graph_;
  torch::Tensor tokens_;      // [B] int64, the step's static input
  torch::Tensor write_slot_;  // [1] int64, KVCache::write_slot during a step
  torch::Tensor logits_;      // [B,V], the step's static output
  struct Graph;               // at::cuda::CUDAGraph, in CUDA builds only
  std::unique_ptr<Graph> graph_;
};

}  // namespace fbt
