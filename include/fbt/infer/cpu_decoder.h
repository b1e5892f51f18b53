// A dedicated decode step (and the prefill of every mode) for fp32 models on the CPU: plain loops and
// our own matrix kernels.
//
// The generic decode_step (decode.h) runs ~40 libtorch operators per layer, and at batch 1 on a
// small model their dispatch cost, not arithmetic, sets the speed. CpuDecoder computes the same
// step (SPEC §7, Listing 2: the fused input, the L blocks with the KV cache, the head) with one
// matrix product per projection group — q, k, v and the output gate together, the SwiGLU gate
// and up together — and hand-written RMSNorm, RoPE, attention and SwiGLU loops, with no autograd
// and no per-token allocation besides the returned logits. A decode step reads every weight
// once, so its speed is the memory bandwidth: the products run on AVX-512 / AVX2 kernels that
// stream the model's own fp32 tensors (batch_gemv.h; no second copy), or Q8_0 / Q4_0 copies of
// them (quant_gemv.h, a quarter / an eighth of the bytes). A prefill is the same step with every
// prompt position a row (the kernels' tiles reuse each weight across positions).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "fbt/infer/decode.h"
#include "fbt/infer/batch_gemv.h"
#include "fbt/infer/quant_gemv.h"
#include "fbt/io/quantized_checkpoint.h"
#include "fbt/model/cache.h"
#include "fbt/model/model.h"

namespace fbt {

/// Storage of CpuDecoder's matrix products.
enum class DecodeWeights {
  Fp32,  ///< the model's own fp32 tensors, read in place
  Int8,  ///< Q8_0 copies (quant_gemv.h) of every matrix product's weights whose rows split into
         ///< blocks of 32 (others stay fp32), the head included; a tied embedding is looked up in
         ///< the head's copy
  Int4,  ///< as Int8 but Q4_0 (4-bit) blocks, except the head, which stays Q8_0 (as llama.cpp's
         ///< quantizer keeps the output layer at higher precision): the logits are the most
         ///< sensitive product, and a tied embedding is read from it
};

struct CpuDecoderOptions {
  /// Every matrix product is batch-invariant (batch_gemv.h / quant_gemv.h), so a sequence decodes to
  /// the same bits alone or in any batch (serving, engine.h). Off, fp32 products of more than four
  /// rows go to a GEMM (gemm_linear.h on AVX-512 CPUs, else BLAS sgemm), ~1.5× faster at a prefill's
  /// 64 rows: a prompt's positions then round unlike the same positions decoded one at a time.
  bool batch_invariant = false;
  DecodeWeights weights = DecodeWeights::Fp32;
  Q8Activations activations = Q8Activations::Int8;  ///< of Int8 and Int4 weights
  /// Int8 / Int4: each of the model's fp32 matrices is freed (its parameter emptied) as soon as it
  /// is quantised, and a tied embedding with the head, so a quantised run holds its weights once
  /// (the freed blocks hold the quantised ones). The model is then usable only through this
  /// decoder: for `fbt generate` and `chat`, not for scoring (eval's choices, serve's prompt logprobs).
  bool release_model_weights = false;
  /// A quantised checkpoint's matrix products (load_model on a run written by `fbt quantize`): each
  /// matrix is read in place from these blocks, whatever `weights` says (cpu_decoder_for sets it to
  /// the run's), and the model may be a Skeleton without fp32 matrices.
  std::shared_ptr<const QuantizedWeights> prequantized = nullptr;
  /// The layout of the quantised matrices with Int8 activations: Tiles8 (quant_gemv.h), the fast
  /// kernel's, in which load_model also keeps a quantised run's blocks; `fbt quantize` asks for
  /// Rows, the layout it writes. Fp32 activations always use Rows.
  QuantLayout quant_layout = QuantLayout::Tiles8;
};

/// Parses "fp32", "int8" or "int4" (the --weights flag); throws fbt::Error naming `flag` otherwise.
DecodeWeights parse_decode_weights(const std::string& text, const std::string& flag);

/// Which logits a prefill pass computes: none (a pass or chunk before the last needs no output
/// layer), the last position's [B,V], or every position's [B,T,V] (teacher-forced scoring).
enum class PassLogits { None, Last, All };

class CpuDecoder {
 public:
  /// True if `model` can be decoded here: fp32 parameters on the CPU, block fbt or llama (any
  /// qk_norm and tie_embeddings), no attention biases, unscaled RoPE, input_norm every_pass.
  static bool supports(FBT& model);
  /// The number of threads at::parallel_for reaches in the decoder's own row loops (attention's
  /// (row, head) pairs, norms, RoPE, SiLU): torch::get_num_threads() when cpu_decoder.cpp was
  /// compiled with OpenMP (CMakeLists.txt), else 1.
  static int row_loop_threads();

  /// Reads `model`'s fp32 weights in place (build a new decoder after replacing a tensor), or
  /// with DecodeWeights::Int8 / Int4 quantises them to Q8_0 / Q4_0 (a snapshot; the model keeps
  /// its fp32 weights unless options.release_model_weights). Throws fbt::Error unless
  /// supports(model) (naming --weights for quantised weights).
  explicit CpuDecoder(FBT& model, CpuDecoderOptions options = {});
  /// The model this decoder was built from (for a quantised run, its skeleton).
  FBT& model() { return model_; }
  /// The quantised matrix products (int8, int4): each one's parameter names, format, size and blocks
  /// (valid while this decoder lives), in the decoder's order: what `fbt quantize` stores. Throws
  /// fbt::Error where a matrix is in the Tiles8 layout (build the decoder with quant_layout Rows).
  std::vector<QuantizedGroup> quantized_groups() const;
  /// Bytes of the weights a decode step reads: every matrix product's (fp32 or quantised), norms and the
  /// embedding row excluded; the fusion's W_U and W_G only `with_fusion` (Soft and Fused steps).
  int64_t matmul_weight_bytes(bool with_fusion) const;

  /// The same step as decode_step(model, tokens, mode, cache): tokens [B] int64 (CPU), the
  /// cache filled by prefill() (fp32, CPU). The input of row b is plain in Standard mode and
  /// after a document separator, otherwise fused with cache.h_prev[b]; the new keys/values go
  /// to the next free slot, and cache.h_prev, last_token and next_pos are updated. Returns the
  /// next-token logits [B,V] (fp32). Throws fbt::Error for a token outside [0, V), a full
  /// cache, or a cache whose shape does not match the model.
  torch::Tensor step(const torch::Tensor& tokens, DecodeMode mode, KVCache& cache);

  /// Positions per pass of prefill(): its input rows (64 × d_ff ≤ 2048 fp32: ≤ 512 KiB) stay in L2
  /// while the kernels' tiles stream each weight row past them.
  static constexpr int64_t kPrefillRows = 64;
  /// The input of a fused prefill pass: per position the feedback state of the previous pass at
  /// the position before, h_before [B,T,D] (fp32, CPU), and plain [B,T] (bool), the positions
  /// whose input is the plain one (h_before unread there).
  struct PassFeedback {
    torch::Tensor h_before, plain;
  };
  /// One prefill pass (DecodeBackend::prefill runs Standard, Soft and Fused(k) prefill as such
  /// passes, PromptPrefill a chunk at a time): tokens [B,T] int64 (CPU), left-padded where valid
  /// [B,T] is false, into `cache` (fp32, CPU, batch B, room for T more slots), each position's input
  /// fused as `feedback` says (nullptr: every position plain, the plain pass of decode.h's prefill).
  /// Positions count on from cache.next_pos when the cache holds slots (from 0 in an empty one), so
  /// a prompt may be prefilled in chunks, each call continuing the last. Every position is one row
  /// of the step's kernels (at most kPrefillRows rows per pass through the layers), so with
  /// batch-invariant products the cache, state and logits are the same bits as decoding the prompt
  /// one token at a time — in any chunks. Sets cache.h_prev, last_token and next_pos. Where
  /// `states` is given, fills it with every position's feedback state [B,T,D] (fp32, CPU; made anew
  /// unless it already is a contiguous one of that shape with storage of its own). Returns the
  /// logits `logits` asks for (PassLogits). Throws fbt::Error as step(), if valid's shape differs
  /// from tokens', or if feedback's shapes are not [B,T,D] and [B,T].
  torch::Tensor prefill_pass(const torch::Tensor& tokens, const torch::Tensor& valid, KVCache& cache,
                             const PassFeedback* feedback, torch::Tensor* states = nullptr,
                             PassLogits logits = PassLogits::Last);

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
  /// states (read only for rows not plain). Writes the new keys/values into `rows` (all of them
  /// before any row attends: rows may share a cache, a later row attending to an earlier one's
  /// slot); leaves FinalNorm(x) in a_ [B,D] for logits() and the new feedback states in state().
  void forward(const int64_t* tok, const std::vector<char>& plain, const float* h_prev,
               const std::vector<RowCache>& rows);
  /// The logits [count,V] of rows first, first + stride, ... of the last forward (overwrites a_
  /// unless stride is 1: read state() first).
  torch::Tensor logits(int64_t first, int64_t count, int64_t stride);
  /// Row `b`'s view of `cache` (of any batch), writing slot `slot`.
  RowCache row_view(KVCache& cache, int64_t b, int64_t slot) const;
  /// The feedback states of the last forward, [B,D] row-major.
  const std::vector<float>& state() const;
  /// Throws fbt::Error unless tokens and valid are both [B, T] with B, T ≥ 1 (a prompt batch).
  static void check_prompt(const torch::Tensor& tokens, const torch::Tensor& valid);
  /// Throws fbt::Error for a token id outside [0, vocab) in tokens [B] int64 (contiguous).
  void check_tokens(const torch::Tensor& tokens) const;
  /// Throws fbt::Error unless `cache` has `batch` rows and the model's layers, head size and fp32
  /// contiguous CPU layout.
  void check_cache(const KVCache& cache, int64_t batch) const;

  /// Rows `row`.. of a quantised Matrix: its parameters `names` stacked, in one block format.
  struct QuantRows {
    QuantMatrix blocks;
    std::vector<std::string> names;
    int64_t row = 0;
  };
  /// The weight [N, K] of one matrix product, several of the model's tensors stacked row-wise: the
  /// tensors themselves (fp32) or quantised: one matrix of them all (int8, int4), or a GGUF file's
  /// blocks in one matrix per run of parts in one format (quantized_checkpoint.h).
  struct Matrix {
    std::vector<torch::Tensor> parts;  ///< [N_i, K], Σ N_i = N (fp32; the model's own tensors)
    std::vector<WeightPart> views;     ///< the parts' data and rows, for batch_invariant_linear
    std::vector<QuantRows> quant;      ///< the rows in order (int8, int4); empty for fp32
    int64_t rows = 0, cols = 0;
    std::vector<std::string> names;  ///< the model's parameters stacked
    int64_t quant_bytes() const;     ///< bytes of the quantised blocks
  };
  /// The matrix stacking `parts` in the decoder's weight format (`head`: the output layer's).
  Matrix matrix(std::vector<torch::Tensor> parts, bool head = false) const;
  /// Every matrix a decode step multiplies by: the head, W_U and W_G (`with_fusion`), each layer's four.
  std::vector<const Matrix*> matrices(bool with_fusion) const;
  /// Throws fbt::Error naming the tensor unless every weight has the shape the config gives it (a
  /// quantised checkpoint's are read as stored).
  void check_shapes() const;
  /// Moves every quantised matrix's blocks into one huge-page mapping (huge_pages.h: a decode step
  /// streams them all; 2 MiB pages spare a TLB miss per 4 KiB).
  void gather_quantised_weights();
  /// The layout the quantised matrices are kept in: options_.quant_layout with Int8 activations,
  /// else Rows.
  QuantLayout kernel_layout() const;
  /// y[B, W.rows] = x[B, W.cols] · Wᵀ.
  void linear(const float* x, int64_t B, const Matrix& W, float* y) const;

  struct Layer {
    Matrix qkvg;        ///< [proj_width(), D]: wq, wk, wv and (block fbt) the head gates
    Matrix gate_up;     ///< [2F, D]: w_gate, w_up
    Matrix wo, w_down;  ///< [D, H·Dh], [D, F]
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
  /// reads q, writes the gated head outputs into attn_ [B, H·Dh]; the (row, head) pairs are split
  /// across the intra-op threads.
  void attend(int64_t layer, const std::vector<RowCache>& rows);

  ModelConfig config_;
  FBT model_;                                          ///< keeps the tensors referenced below alive
  torch::Tensor embedding_, input_norm_, final_norm_;  // [V,D] (undefined: the quantised tied head), [D], [D]
  Matrix head_, w_u_, w_g_;                            // [V,D], [D,D], [D,D]
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;  ///< RoPE θ^(-2i/Dh), i < Dh/2
  double scale_ = 1.0;           ///< the residual branch multiplier
  CpuDecoderOptions options_;
  int64_t rows_ = 0;
  // Scratch, [B, ·] row-major.
  std::vector<float> x_, a_, e_n_, fused_a_, fused_b_, proj_, attn_, branch_, gate_up_, act_;
  std::vector<float> rope_;  ///< [B, Dh]: each row's cos(pos · inv_freq), then its sines
};

}  // namespace fbt
