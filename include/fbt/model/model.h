// The FBT model: a decoder-only transformer with a latent-feedback input fusion (SPEC §3–4).
//
// Shape legend: B batch, T tokens in this call, S key slots, D model width, H query heads,
// Hkv key/value heads, Dh = D/H head dim, F = d_ff, V vocabulary, L layers.
#pragma once
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "fbt/model/cache.h"
#include "fbt/model/config.h"

namespace fbt {

/// RMSNorm with a learned gain: x / sqrt(mean(x²) + eps) * g over the last dim.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);  // [..., dim] -> [..., dim]
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

/// Rotary position tables for one stack call: cos, sin are [B|1, 1, T, Dh/2].
struct Rope {
  torch::Tensor cos, sin;
};

/// RoPE inverse frequencies [Dh/2] (fp32 on `device`): θ^(-2i/Dh), i < Dh/2, then the config's
/// rope_scaling (llama3: transformers' modeling_rope_utils.py _compute_llama3_parameters).
/// Applied rotate-half style (pairs (i, i + Dh/2)), as HF Llama/Qwen do.
torch::Tensor rope_inv_freq(const ModelConfig& config, const torch::Device& device);

/// Attention masks for one stack call, additive (0 or -inf), [B|1, 1, T, S]; `windowed` is
/// undefined when no layer uses a sliding window. `causal_only` marks the plain training case
/// (no padding, no cache, no window) where fused causal kernels may be used.
struct AttentionMasks {
  torch::Tensor full, windowed;
  bool causal_only = false;
};

/// Which softmax-attention kernel `attend` runs. Auto: PyTorch 2.x's
/// scaled_dot_product_attention (fused flash / memory-efficient kernels) where libtorch has it,
/// else Explicit. Explicit: matmul, additive mask, softmax, matmul in the input dtype, with the
/// query heads of one KV group stacked so keys/values are never copied.
enum class AttentionKernel { Auto, Explicit };

/// Softmax attention with grouped-query heads (H = G·Hkv; query head h reads KV head h / G).
/// q [B,H,T,Dh], k/v [B,Hkv,S,Dh], mask additive (0 / -inf) [B|1,1,T,S] -> [B,H,T,Dh], scale
/// 1/sqrt(Dh). `causal_only` (T == S, mask is the plain causal one) lets Auto use the kernels'
/// own causal masking. Both kernels compute the same function; tests compare them.
torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& mask,
                     bool causal_only, AttentionKernel kernel = AttentionKernel::Auto);

/// How a model's matrices are made. Initialized: allocated and initialised (training, or weights
/// about to be read over them). Skeleton: every linear layer's weight (and bias) and the embedding
/// are empty tensors ([0, 1] / [0]) that allocate nothing, norms as usual, no initialisation: a
/// quantised checkpoint (`fbt quantize`) fills in the fp32 tensors it stores and the CPU decoder
/// reads the quantised ones, so the fp32 matrices are never materialised (load_model).
enum class Materialize { Initialized, Skeleton };

/// Grouped-query self-attention with RoPE. Block fbt: QK RMSNorm and a per-head sigmoid output
/// gate. Block llama (modeling_llama.py LlamaAttention): no gate; QK RMSNorm over Dh if qk_norm
/// (modeling_qwen3.py); q/k/v biases if attention_bias (modeling_qwen2.py), o bias if
/// attention_out_bias.
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& config, int64_t window, Materialize materialize = Materialize::Initialized);
  /// x [B,T,D] (the normed branch input) -> [B,T,D]. With `cache`, this call's keys/values are
  /// written to slots [first_slot, first_slot+T) of layer `layer` and attention covers all filled
  /// slots; otherwise it covers the T positions of x.
  torch::Tensor forward(const torch::Tensor& x, const Rope& rope, const AttentionMasks& masks, KVCache* cache,
                        int64_t layer, int64_t first_slot);

 private:
  int64_t n_heads_, n_kv_heads_, head_dim_, window_;
  torch::nn::Linear wq_{nullptr}, wk_{nullptr}, wv_{nullptr}, wo_{nullptr}, gate_{nullptr};
  RMSNorm q_norm_{nullptr}, k_norm_{nullptr};  // empty without qk_norm; gate_ empty for block llama
};
TORCH_MODULE(Attention);

/// SwiGLU MLP: W_down(silu(W_gate x) ⊙ W_up x).
class MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const ModelConfig& config, Materialize materialize = Materialize::Initialized);
  torch::Tensor forward(const torch::Tensor& x);  // [B,T,D] -> [B,T,D]

 private:
  torch::nn::Linear w_gate_{nullptr}, w_up_{nullptr}, w_down_{nullptr};
};
TORCH_MODULE(MLP);

/// One block. Block fbt: sandwich norms and depth-scaled branches,
/// x += s·norm_out(branch(norm_in(x))) for the attention then the MLP branch. Block llama
/// (modeling_llama.py LlamaDecoderLayer): pre-norm only, x += branch(norm_in(x)).
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const ModelConfig& config, int64_t layer, Materialize materialize = Materialize::Initialized);
  torch::Tensor forward(const torch::Tensor& x, const Rope& rope, const AttentionMasks& masks, KVCache* cache,
                        int64_t first_slot);  // [B,T,D] -> [B,T,D]

 private:
  /// y after its optional output norm and scale: s·norm_out(y) (fbt) or y (llama).
  torch::Tensor branch_out(RMSNorm& norm_out, const torch::Tensor& y);

  int64_t layer_;
  double scale_;
  RMSNorm attn_norm_in_{nullptr}, attn_norm_out_{nullptr}, mlp_norm_in_{nullptr},
      mlp_norm_out_{nullptr};  // the *_norm_out are empty for block llama
  Attention attn_{nullptr};
  MLP mlp_{nullptr};
};
TORCH_MODULE(Block);

/// The latent-feedback fusion of paper Eq. 4 before the input norm:
/// g = (W_U h_prev) ⊙ sigmoid(W_G e_n), with e_n = RMSNorm_in(e). At init (model.fusion_init):
/// W_U = I, W_G ~ N(0, σ_G), or both U(−√(3/D), √(3/D)); with model.fusion residual W_U = 0
/// instead, so g = 0 exactly while h_prev is finite.
class LatentFusionImpl : public torch::nn::Module {
 public:
  explicit LatentFusionImpl(const ModelConfig& config, Materialize materialize = Materialize::Initialized);
  torch::Tensor forward(const torch::Tensor& h_prev, const torch::Tensor& e_normed);  // [...,D]

  torch::nn::Linear w_u{nullptr}, w_g{nullptr};
};
TORCH_MODULE(LatentFusion);

/// The Full-Bandwidth Transformer. Its pieces are exposed so that the K-pass training forward
/// (passes.h) and the decoding modes (decode.h) compose them; forward() is a standard pass.
class FBTImpl : public torch::nn::Module {
 public:
  /// Builds and initialises the model (a Skeleton: see Materialize). Throws fbt::Error for a
  /// config that fails validate(), and for weights that cannot be allocated, naming the settings
  /// that size them (model.vocab_size, model.d_model, model.n_layers, model.d_ff).
  explicit FBTImpl(const ModelConfig& config, Materialize materialize = Materialize::Initialized);
  const ModelConfig& config() const { return config_; }

  /// Throws fbt::Error naming the first id of `tokens` (any shape, int64) outside [0, V). Reads
  /// the ids' minimum and maximum on the host (one device sync).
  void check_token_ids(const torch::Tensor& tokens) const;
  /// Token embedding e = Embed(x): tokens [B,T] int64 -> [B,T,D]. With `check_ids`,
  /// check_token_ids first; a captured CUDA-graph step, which may not read device values on the
  /// host, passes false after checking its input before the replay.
  torch::Tensor embed(const torch::Tensor& tokens, bool check_ids = true);
  /// Plain input of pass 1, the standard prefill and Standard decoding: RMSNorm_in(e) for block
  /// fbt (SPEC §4); the raw embedding e for block llama (as in LlamaModel.forward) and for
  /// model.input_norm = listing3 (the paper's Listing 3). [B,T,D] -> [B,T,D].
  torch::Tensor plain_input(const torch::Tensor& e);
  /// Fused input from the previous position's feedback state h_prev [...,D] and the plain input
  /// e_plain = plain_input(e) [...,D]. With e_n = RMSNorm_in(e) (e_plain itself when that is
  /// already normalised): RMSNorm_in(g) for `glu` (paper Eq. 4), RMSNorm_in(g + e_n) for
  /// `glu_plus_token`, e_plain + g for `residual` (no norm around the sum: with W_U = 0
  /// it is the plain input bit for bit), g = LatentFusion(h_prev, e_n). The same for both
  /// blocks; see match_input_norm_to_embedding for the scale of the Llama block's fused inputs.
  torch::Tensor fused_input(const torch::Tensor& h_prev, const torch::Tensor& e_plain);
  /// The stack input of a feedback pass (training pass k ≥ 2, a Soft or Fused decode step, a
  /// fused prefill pass): rows where `plain` (bool, broadcastable to [...,1]) is true take the
  /// plain input (RMSNorm_in(e_plain) with model.input_norm = listing3: Listing 3 normalises every
  /// row of a later pass), the others fused_input(h_prev, e_plain). h_prev, e_plain [...,D] ->
  /// [...,D].
  torch::Tensor feedback_input(const torch::Tensor& h_prev, const torch::Tensor& e_plain, const torch::Tensor& plain);
  /// Sets the input norm's gain to the per-dimension RMS of the embedding table,
  /// sqrt(mean_v E[v,d]²), so that fused inputs RMSNorm_in(·) have the scale of raw embeddings.
  /// The rule for block llama, whose plain inputs are the raw embeddings: the constructor
  /// applies it, and so does the HF importer (hf_import.h) after loading the weights.
  void match_input_norm_to_embedding();
  /// Positions that must take the plain input in every pass: position 0 and every position
  /// whose previous token is the document separator. tokens [B,T] -> bool [B,T].
  torch::Tensor plain_positions(const torch::Tensor& tokens) const;

  /// Runs the L blocks on inputs u [B,T,D] laid out by `layout`; returns the top residual
  /// stream x [B,T,D] (before the final norm). With `cache`, keys/values are appended to it.
  /// With `layer_states` (probes), it is cleared and receives the L+1 residual streams [B,T,D]:
  /// u (layer 0), then x after each block (the last is the returned x).
  torch::Tensor stack(const torch::Tensor& u, const Layout& layout, KVCache* cache = nullptr,
                      std::vector<torch::Tensor>* layer_states = nullptr);
  /// The state the LM head reads: FinalNorm(x) [B,T,D].
  torch::Tensor final_norm(const torch::Tensor& x);
  /// The state fed back to the next position: FinalNorm(x) (post_norm) or x (pre_norm).
  torch::Tensor feedback_state(const torch::Tensor& x);
  /// LM head: logits = FinalNorm(x) · Wᵀ, x [B,T,D] -> [B,T,V]; W = E (tied) or lm_head.
  torch::Tensor head(const torch::Tensor& x);

  /// Standard (plain) forward over tokens [B,T] -> logits [B,T,V].
  torch::Tensor forward(const torch::Tensor& tokens);

 private:
  void build(Materialize materialize);  // the constructor's work: registers the modules and initialises the weights
  /// Whether plain_input already applies RMSNorm_in (block fbt with input_norm every_pass).
  bool plain_input_is_normalised() const;
  /// The fused input of config().fusion (fused_input): RMSNorm_in(g), RMSNorm_in(g + e_n) or
  /// e_plain + g, g = LatentFusion(h_prev, e_n); e_n = RMSNorm_in(e), e_plain = plain_input(e).
  torch::Tensor fuse(const torch::Tensor& h_prev, const torch::Tensor& e_plain, const torch::Tensor& e_n);
  ModelConfig config_;
  torch::nn::Embedding embedding_{nullptr};
  torch::nn::Linear lm_head_{nullptr};  ///< only with tie_embeddings = false
  RMSNorm input_norm_{nullptr}, final_norm_{nullptr};
  LatentFusion fusion_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
};
TORCH_MODULE(FBT);

}  // namespace fbt
