// Chunked prefill of one prompt in any decoding mode, carrying the latent feedback across chunks.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <torch/types.h>

#include "fbt/infer/decode_backend.h"
#include "fbt/model/cache.h"
#include "fbt/model/model.h"

namespace fbt {

/// Prefills one prompt (batch 1) a chunk at a time, so a server can interleave a long prompt with
/// other sequences' decode steps. The result equals prefill() on the whole prompt up to float
/// rounding (the matrix products see other shapes):
///  - Standard and Soft: one plain pass; each chunk attends to the cache of the chunks before it.
///  - Fused(k): k+1 passes, each with its own KV cache. Chunk c runs pass 0 (plain), then passes
///    j = 1..k with position t fused with pass j−1's feedback state at t−1 (paper Listing 2, SPEC §7).
///    The state at t−1 for the first position of a chunk is the last state pass j−1 produced in
///    the previous chunk: the carry that makes chunking exact (a chunk boundary is not a document
///    start). Position 0 and positions after a document separator stay plain in every pass.
/// The decode cache is the last pass's; the others are freed when the prefill finishes.
class PromptPrefill {
 public:
  /// prompt: 1 ≤ n token ids in [0, vocab); capacity ≥ n slots for the decode cache (prompt plus
  /// the tokens to generate). `backend` runs every pass (DecodeBackend::prefill_pass; the CPU
  /// decoder's batch-invariant products make a Standard/Soft cache the same bits as decoding the
  /// prompt token by token, whatever the chunks); null: the generic one (torch_backend). Throws
  /// fbt::Error for an empty prompt, a capacity below the prompt or above the model context, or an
  /// invalid `decoding` (Decoding::problem). Allocates no cache until run.
  PromptPrefill(FBT model, std::vector<int64_t> prompt, const Decoding& decoding, int64_t capacity,
                std::shared_ptr<DecodeBackend> backend = nullptr);

  /// Prefills the next at most `chunk` (≥ 1) prompt tokens. Returns the next-token logits [1,V]
  /// after the prompt's last chunk, an undefined tensor before. Must run without grad.
  torch::Tensor run(int64_t chunk);
  /// True once every prompt token is in the cache.
  bool done() const { return next_ == int64_t(prompt_.size()); }
  /// Prompt tokens prefilled so far.
  int64_t prefilled() const { return next_; }
  /// The decode cache (valid once done(): h_prev, last_token and next_pos set as prefill() sets them).
  KVCache& cache() { return caches_.back(); }

 private:
  FBT model_;
  std::vector<int64_t> prompt_;
  torch::Tensor plain_;  ///< [1,n] bool: position 0 and document starts (plain in every pass)
  int64_t passes_;       ///< 1 + k in Fused(k) mode, else 1
  int64_t capacity_;
  int64_t next_ = 0;                        ///< first prompt position not yet prefilled
  std::shared_ptr<DecodeBackend> backend_;  ///< runs the passes
  std::vector<KVCache> caches_;             ///< one per pass; the last one is the decode cache
  std::vector<torch::Tensor> carry_;  ///< run_passes' carry: pass j < passes−1's state [1,1,D] at position next_−1
};

}  // namespace fbt
