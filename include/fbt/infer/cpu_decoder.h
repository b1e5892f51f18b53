// A dedicated decode step for fp32 models on the CPU: packed weights, BLAS calls, plain loops.
//
// The generic decode_step (decode.h) runs ~40 libtorch operators per layer, and at batch 1 on a
// small model their dispatch cost, not arithmetic, sets the speed. CpuDecoder computes the same
// step (SPEC §7, Listing 2: the fused input, the L blocks with the KV cache, the head) with one
// matrix product per projection group — q, k, v and the output gate in one, the SwiGLU gate and
// up in one — straight BLAS (sgemv/sgemm) on contiguous weights, and hand-written RMSNorm,
// RoPE, attention and SwiGLU loops, with no autograd and no per-token allocation besides the
// returned logits.
#pragma once
#include <vector>

#include <torch/types.h>

#include "fbt/infer/decode.h"
#include "fbt/model/cache.h"
#include "fbt/model/model.h"

namespace fbt {

class CpuDecoder {
 public:
  /// True if `model` can be decoded here: fp32 parameters on the CPU, block fbt or llama (any
  /// qk_norm and tie_embeddings), no attention biases, unscaled RoPE.
  static bool supports(FBT& model);

  /// Copies `model`'s weights into packed contiguous buffers (a snapshot: build a new decoder
  /// after changing the weights). Costs one extra copy of the attention and MLP input weights.
  /// `batch_invariant`: every matrix product goes through batch_invariant_linear (batch_gemv.h),
  /// so a sequence decodes to the same bits alone or in any batch (serving, engine.h); off, BLAS
  /// (sgemv at batch 1, sgemm above), whose rounding of a row changes with the batch size.
  /// Throws fbt::Error unless supports(model).
  explicit CpuDecoder(FBT& model, bool batch_invariant = false);

  /// The same step as decode_step(model, tokens, mode, cache): tokens [B] int64 (CPU), the
  /// cache filled by prefill() (fp32, CPU). The input of row b is plain in Standard mode and
  /// after a document separator, otherwise fused with cache.h_prev[b]; the new keys/values go
  /// to the next free slot, and cache.h_prev, last_token and next_pos are updated. Returns the
  /// next-token logits [B,V] (fp32). Throws fbt::Error for a token outside [0, V), a full
  /// cache, or a cache whose shape does not match the model.
  torch::Tensor step(const torch::Tensor& tokens, DecodeMode mode, KVCache& cache);

  /// The step for B sequences that each own a KV cache of batch 1 (continuous batching: the
  /// sequences have different lengths). tokens [B] int64 (CPU), modes[b] and caches[b] of row b
  /// (caches filled by prefill or PromptPrefill, fp32, CPU). Row b is plain in Standard mode and
  /// after a document separator, otherwise fused with caches[b]->h_prev; each cache gets its new
  /// slot, h_prev, last_token and next_pos. Returns the next-token logits [B,V] (fp32). Throws
  /// fbt::Error as step(), or if the three lengths differ.
  torch::Tensor step(const torch::Tensor& tokens, const std::vector<DecodeMode>& modes,
                     const std::vector<KVCache*>& caches);

 private:
  /// One row's view of a KV cache: its keys/values per layer [Hkv, capacity, Dh], the position and
  /// validity of its slots [capacity], and the slot this step writes (attention reads slots ≤ it).
  struct RowCache {
    std::vector<float*> k, v;
    const int64_t* pos = nullptr;
    const bool* valid = nullptr;
    int64_t capacity = 0, slot = 0;
  };
  /// The step itself: tokens tok[B], plain[b] picks row b's plain input, h_prev [B,D] the feedback
  /// states. Writes the new keys/values into `rows`, returns the logits [B,V]; the new feedback
  /// states are left in state() [B,D].
  torch::Tensor forward(const int64_t* tok, const std::vector<char>& plain, const float* h_prev,
                        const std::vector<RowCache>& rows);
  /// Row `b`'s view of `cache` (of any batch), writing slot `slot`.
  RowCache row_view(KVCache& cache, int64_t b, int64_t slot) const;
  /// The feedback states of the last forward, [B,D] row-major.
  const std::vector<float>& state() const;
  /// Throws fbt::Error for a token id outside [0, vocab) in tokens [B] int64 (contiguous).
  void check_tokens(const torch::Tensor& tokens) const;
  /// Throws fbt::Error unless `cache` has `batch` rows and the model's layers, head size and fp32
  /// contiguous CPU layout.
  void check_cache(const KVCache& cache, int64_t batch) const;

  struct Layer {
    std::vector<float> qkvg;  ///< [proj_width(), D]: wq, wk, wv and (block fbt) the head gates stacked
    std::vector<float> gate_up;  ///< [2F, D]: w_gate, w_up stacked
    torch::Tensor wo, w_down;    ///< [D, H·Dh], [D, F] (the model's own tensors)
    torch::Tensor attn_norm_in, q_norm, k_norm, attn_norm_out, mlp_norm_in, mlp_norm_out;  ///< undefined where absent
    int64_t window = 0;
  };

  /// The paper's block: per-head output gates and sandwich norms (block fbt); else the Llama block.
  bool paper_block() const { return config_.block == BlockKind::Fbt; }
  /// Width of the fused q/k/v(/gate) projection: (H + 2·Hkv)·Dh, plus H gates in the paper's block.
  int64_t proj_width() const;
  /// x += s · norm_out(branch_) per row (block llama: x += branch_).
  void add_branch(const torch::Tensor& norm_out, int64_t B);
  /// Sizes the scratch buffers for `batch` rows (reallocates only when the batch changes).
  void reserve_rows(int64_t batch);
  /// Attention of `layer` for every row over its cache's slots up to the new one (included):
  /// reads q, writes the gated head outputs into attn_ [B, H·Dh].
  void attend(int64_t layer, const std::vector<RowCache>& rows);

  ModelConfig config_;
  FBT model_;  ///< keeps the tensors referenced below alive
  torch::Tensor embedding_, head_, input_norm_, final_norm_, w_u_, w_g_;  // [V,D], [V,D], [D], [D], [D,D], [D,D]
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;  ///< RoPE θ^(-2i/Dh), i < Dh/2
  double scale_ = 1.0;          ///< the residual branch multiplier
  bool batch_invariant_ = false;
  int64_t rows_ = 0;
  // Scratch, [B, ·] row-major.
  std::vector<float> x_, a_, e_n_, fused_a_, fused_b_, proj_, attn_, branch_, gate_up_, act_, scores_;
};

}  // namespace fbt
