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
  /// True if `model` can be decoded here: the paper's block (block fbt with the default
  /// qk_norm, bias, tie and rope_scaling settings) with fp32 parameters on the CPU.
  static bool supports(FBT& model);

  /// Copies `model`'s weights into packed contiguous buffers (a snapshot: build a new decoder
  /// after changing the weights). Costs one extra copy of the attention and MLP input weights.
  /// Throws fbt::Error unless supports(model).
  explicit CpuDecoder(FBT& model);

  /// The same step as decode_step(model, tokens, mode, cache): tokens [B] int64 (CPU), the
  /// cache filled by prefill() (fp32, CPU). The input of row b is plain in Standard mode and
  /// after a document separator, otherwise fused with cache.h_prev[b]; the new keys/values go
  /// to the next free slot, and cache.h_prev, last_token and next_pos are updated. Returns the
  /// next-token logits [B,V] (fp32). Throws fbt::Error for a token outside [0, V), a full
  /// cache, or a cache whose shape does not match the model.
  torch::Tensor step(const torch::Tensor& tokens, DecodeMode mode, KVCache& cache);

 private:
  struct Layer {
    std::vector<float> qkvg;  ///< [H·Dh + 2·Hkv·Dh + H, D]: wq, wk, wv, gate stacked
    std::vector<float> gate_up;  ///< [2F, D]: w_gate, w_up stacked
    torch::Tensor wo, w_down;    ///< [D, H·Dh], [D, F] (the model's own tensors)
    torch::Tensor attn_norm_in, q_norm, k_norm, attn_norm_out, mlp_norm_in, mlp_norm_out;
    int64_t window = 0;
  };

  /// Sizes the scratch buffers for `batch` rows (reallocates only when the batch changes).
  void reserve_rows(int64_t batch);
  /// Attention of `layer` for every row over the cache's filled slots (the new slot included):
  /// reads q, writes the gated head outputs into attn_ [B, H·Dh].
  void attend(int64_t layer, const KVCache& cache, int64_t slot);

  ModelConfig config_;
  FBT model_;  ///< keeps the tensors referenced below alive
  torch::Tensor embedding_, input_norm_, final_norm_, w_u_, w_g_;  // [V,D], [D], [D], [D,D], [D,D]
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;  ///< RoPE θ^(-2i/Dh), i < Dh/2
  double scale_ = 1.0;          ///< the residual branch multiplier
  int64_t rows_ = 0;
  // Scratch, [B, ·] row-major.
  std::vector<float> x_, a_, e_n_, fused_a_, fused_b_, proj_, attn_, branch_, gate_up_, act_, scores_;
};

}  // namespace fbt
