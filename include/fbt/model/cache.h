// KVCache: per-layer keys/values plus the latent-feedback state h_prev carried across decode steps.
#pragma once
#include <vector>

#include <torch/types.h>

#include "fbt/model/config.h"

namespace fbt {

/// Where the T positions of one stack call sit: per-row RoPE positions and which are real
/// tokens. Batched prompts of different lengths are left-padded; pads have valid = false.
struct Layout {
  torch::Tensor positions;  ///< [B,T] or [1,T] int64, position of each token in its sequence
  torch::Tensor valid;      ///< [B,T] bool, or undefined when every position is a real token

  /// Positions 0..T-1 for every row, no padding (training, scoring).
  static Layout contiguous(int64_t T, const torch::Device& device);
  /// Left-padded rows: `valid` [B,T] is false on the leading pads; positions count real tokens.
  static Layout left_padded(const torch::Tensor& valid);
};

/// Decoding state for a batch of B sequences decoded in lockstep (SPEC §7, Listing 2).
/// Holds the keys/values of every layer in preallocated slots, the position and validity of
/// each slot, and — beside the cache — the state carried from one step to the next: per sequence
/// the feedback state h_prev of the last processed position (which Soft and Fused decoding fuse
/// into the next input), that position's token and the position the next token gets. The carried
/// state is private: advance() and advance_step() are its only writers.
struct KVCache {
  /// Allocates `capacity` slots per layer: k, v are [B, Hkv, capacity, Dh] with `options`.
  KVCache(const ModelConfig& config, int64_t batch, int64_t capacity, const torch::TensorOptions& options);

  std::vector<torch::Tensor> k, v;  ///< per layer [B, Hkv, capacity, Dh]
  torch::Tensor slot_pos;           ///< [B, capacity] int64 position of each filled slot
  torch::Tensor slot_valid;         ///< [B, capacity] bool, true where the slot holds a real token
  int64_t length = 0;               ///< slots filled (the same for every row)
  /// Fixed-shape decoding (CUDA-graph capture, paper App. D; infer/graph_decoder.h): when
  /// defined ([1] int64 on the cache's device), a stack call of one token per row writes its
  /// keys, values and slot bookkeeping at slot write_slot[0] with device-side index_copy_ and
  /// attends over all `capacity` slots (unfilled ones are masked by slot_valid), so no host value
  /// changes between steps; `length` is neither read nor advanced by the stack (the caller
  /// advances it). Undefined (the default): slots are claimed by `reserve` from `length`.
  torch::Tensor write_slot;

  int64_t batch() const { return slot_pos.size(0); }
  int64_t capacity() const { return slot_pos.size(1); }
  /// Throws fbt::Error if T more slots after the `length` filled ones exceed the capacity.
  void check_room(int64_t T) const;
  /// Claims the next T slots for `layout` (positions/validity recorded) and returns the first
  /// slot index. Throws fbt::Error when the capacity would be exceeded. With `write_slot`
  /// defined: records the one position (T must be 1) at write_slot on the device, returns -1.
  int64_t reserve(const Layout& layout);
  /// Forgets every slot (keeps the allocation); used to rebuild the cache from a later pass.
  void clear();

  /// [B, D] feedback state of each row's last real position (Soft and Fused fuse it into the next input).
  const torch::Tensor& h_prev() const { return h_prev_; }
  /// [B] int64 token at each row's last real position (-1 before any).
  const torch::Tensor& last_token() const { return last_token_; }
  /// [B] int64 position the next token of each row gets.
  const torch::Tensor& next_pos() const { return next_pos_; }
  /// Records the carried state after a prefill: `h` [B, D] each row's feedback state at its last
  /// real position (converted to the cache's dtype), `tokens` [B] that position's token, `next` [B]
  /// the position its next token gets. Written in place (copy_), so the tensors keep their
  /// addresses, which a captured CUDA graph refers to; `h` and the others may live on another
  /// device. Throws fbt::Error for other shapes.
  void advance(const torch::Tensor& h, const torch::Tensor& tokens, const torch::Tensor& next);
  /// advance() after one decode step: `h` [B, D] and `tokens` [B] of the new positions, and every
  /// row's next position one further (in place).
  void advance_step(const torch::Tensor& h, const torch::Tensor& tokens);
  /// A deep copy: every tensor cloned (to continue one cache two ways, e.g. in tests).
  KVCache clone() const;

 private:
  void check_carried(const torch::Tensor& h, const torch::Tensor& tokens) const;
  torch::Tensor h_prev_, last_token_, next_pos_;
};

}  // namespace fbt
