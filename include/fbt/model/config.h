// ModelConfig: the FBT architecture hyper-parameters (SPEC §3–4), presets and JSON round trip.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "fbt/util/json_fields.h"

namespace fbt {

/// How the previous top state and the token embedding are fused (SPEC §4).
enum class Fusion {
  Glu,           ///< paper Eq. 4: RMSNorm_in((W_U h) ⊙ sigmoid(W_G RMSNorm_in(e)))
  GluPlusToken,  ///< ablation:    RMSNorm_in(g + RMSNorm_in(e)), g the GLU term above
  Residual,      ///< warm start:  x_plain + g, x_plain the plain input of the block kind (no norm
                 ///< around the sum); W_U starts at 0, so every mode equals standard at init
                 ///< (SPEC §11 "Residual fusion"); needs input_norm every_pass
};

/// Which top-layer state is fed back (SPEC §4).
enum class FeedbackState {
  PostNorm,  ///< the state the LM head reads (after the final RMSNorm) — default
  PreNorm,   ///< the raw residual stream before the final RMSNorm
};

/// Upper bounds of ModelConfig's sizes (ModelConfig::validate): vocabulary, d_model and head
/// counts, layers (and full_attention_every), d_ff, context (and window).
constexpr int64_t kMaxVocab = int64_t{1} << 24, kMaxWidth = int64_t{1} << 16, kMaxLayers = 4096,
                  kMaxFeedForward = int64_t{1} << 20, kMaxContext = int64_t{1} << 22;
/// Which block the stack is made of (SPEC §3 or the Hugging Face Llama family).
enum class BlockKind {
  Fbt,    ///< paper Appendix A: sandwich norms, depth-scaled branches, per-head output gate,
          ///< plain input RMSNorm_in(e)
  Llama,  ///< LlamaForCausalLM / Qwen2 / Qwen3 (modeling_llama.py): pre-norm only, unscaled
          ///< branches, no head gate, plain input the raw embedding e
};

/// Where the input RMSNorm_in sits (SPEC §4).
enum class InputNorm {
  EveryPass,  ///< ours (SPEC §4 [choice]): the plain input is RMSNorm_in(e) in every pass — default
  Listing3,   ///< the paper's Listing 3 (App. C): pass 1, the standard prefill and Standard
              ///< decoding take the raw e; a feedback pass (training pass k ≥ 2, a Soft or Fused
              ///< step, a fused prefill pass) applies RMSNorm_in to every row, so its plain rows
              ///< are RMSNorm_in(e); the gate reads RMSNorm_in(e)
};

/// How W_U and W_G start (SPEC §4). With fusion residual W_U starts at 0 whatever this says (the
/// fused input is then the plain one); it chooses W_G's init only.
enum class FusionInit {
  Identity,  ///< W_U = I, W_G ~ N(0, fusion_gate_init_std) (SPEC §4 [choice]) — default
  Uniform,   ///< W_U, W_G ~ U(−√(3/D), √(3/D)), std 1/√D: the first author's reproduction
             ///< (nanochat's linear init; SPEC §11); fusion_gate_init_std is not used
};

/// RoPE frequency scaling (transformers' modeling_rope_utils.py).
enum class RopeScaling {
  None,    ///< θ^(-2i/Dh)
  Llama3,  ///< rope_type "llama3" (_compute_llama3_parameters): long wavelengths divided by
           ///< rope_scaling_factor, a smooth blend between low_freq and high_freq wavelengths
};

/// Architecture hyper-parameters. Run-time settings (passes, sampling, optimiser) live elsewhere.
struct ModelConfig {
  int64_t vocab_size = 259;            ///< V
  int64_t d_model = 64;                ///< D
  int64_t n_layers = 2;                ///< L
  int64_t n_heads = 4;                 ///< H query heads
  int64_t n_kv_heads = 2;              ///< Hkv key/value heads (GQA); divides H
  int64_t d_ff = 176;                  ///< SwiGLU hidden size
  int64_t context = 64;                ///< maximum sequence length (RoPE positions, KV cache size)
  int64_t window = 0;                  ///< sliding-window size in tokens; 0 = full attention everywhere
  int64_t full_attention_every = 6;    ///< with a window: layers n-1, 2n-1, ... (0-based) are full
  double rope_theta = 10000.0;         ///< RoPE base
  double norm_eps = 1e-6;              ///< RMSNorm epsilon
  double init_std = 0.02;              ///< std of embedding and linear weights at init
  double fusion_gate_init_std = 0.02;  ///< std of W_G at init (W_U starts as the identity, or 0 for residual)
  double residual_scale = 0.0;         ///< residual branch multiplier; 0 means 1/sqrt(2L) (SPEC §3)
  Fusion fusion = Fusion::Glu;
  FeedbackState feedback_state = FeedbackState::PostNorm;
  int64_t doc_separator_id = -1;  ///< token ending a document (EOS); the next position is plain. -1: none
  // Switches for the Llama family; the defaults are the paper's block above.
  BlockKind block = BlockKind::Fbt;
  int64_t head_dim_override = 0;    ///< JSON "head_dim": Dh when it is not D/H (Qwen3); 0 = D/H
  bool qk_norm = true;              ///< RMSNorm over Dh on q and k before RoPE (fbt, Qwen3)
  bool attention_bias = false;      ///< biases on the q, k, v projections (Qwen2; Llama attention_bias)
  bool attention_out_bias = false;  ///< bias on the output projection (Llama/Qwen3 attention_bias)
  bool tie_embeddings = true;       ///< LM head = token embedding; false adds `lm_head.weight` [V,D]
  RopeScaling rope_scaling = RopeScaling::None;
  double rope_scaling_factor = 8.0;      ///< llama3: factor
  double rope_low_freq_factor = 1.0;     ///< llama3: low_freq_factor
  double rope_high_freq_factor = 4.0;    ///< llama3: high_freq_factor
  int64_t rope_original_context = 8192;  ///< llama3: original_max_position_embeddings
  // The paper's and the first author's choices where SPEC §4 chose otherwise.
  InputNorm input_norm = InputNorm::EveryPass;
  FusionInit fusion_init = FusionInit::Identity;

  int64_t head_dim() const { return head_dim_override > 0 ? head_dim_override : d_model / n_heads; }
  /// The branch multiplier actually used: residual_scale, or 1/sqrt(2L) when it is 0; 1 for the
  /// Llama block (whose branches are not scaled).
  double branch_scale() const;
  /// Sliding window of layer `layer` (0-based): 0 (full) or `window`.
  int64_t layer_window(int64_t layer) const;
  /// Number of trainable parameters implied by the config (tied embedding counted once).
  int64_t parameter_count() const;

  /// Throws fbt::Error naming the setting ("model.d_model must be in [1, 65536] (got 0)") for a
  /// value outside its range (sizes in [1, kMax*], window in [0, kMaxContext], rope_theta in (0,
  /// 1e12], norm_eps in (0, 1], init stds and residual_scale in [0, 1e6]) or an inconsistent config
  /// (e.g. D % H != 0, or fusion residual with input_norm listing3).
  void validate() const;
  nlohmann::json to_json() const;
  /// Strict parse: unknown keys and wrong types throw fbt::Error naming `source` and the key.
  /// Keys absent from `j` keep the values of `base` (the defaults, i.e. `debug`, if omitted).
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source, const ModelConfig& base);
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source);
  /// Named preset: "debug" (tests), "small" (≈5.5 M params, CPU; fusion glu_plus_token with W_G
  /// init std 0.1, the Setting-A sweep winner of docs/results.md), "1b" (paper Appendix A).
  /// Throws fbt::Error listing the presets for an unknown name.
  static ModelConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();

  /// Calls f(name, member) for every field, in JSON order (drives to_json/from_json).
  template <class F>
  void visit(F&& f) {
    f("vocab_size", vocab_size);
    f("d_model", d_model);
    f("n_layers", n_layers);
    f("n_heads", n_heads);
    f("n_kv_heads", n_kv_heads);
    f("d_ff", d_ff);
    f("context", context);
    f("window", window);
    f("full_attention_every", full_attention_every);
    f("rope_theta", rope_theta);
    f("norm_eps", norm_eps);
    f("init_std", init_std);
    f("fusion_gate_init_std", fusion_gate_init_std);
    f("residual_scale", residual_scale);
    f("fusion", fusion);
    f("feedback_state", feedback_state);
    f("doc_separator_id", doc_separator_id);
    f("block", block);
    f("head_dim", head_dim_override);
    f("qk_norm", qk_norm);
    f("attention_bias", attention_bias);
    f("attention_out_bias", attention_out_bias);
    f("tie_embeddings", tie_embeddings);
    f("rope_scaling", rope_scaling);
    f("rope_scaling_factor", rope_scaling_factor);
    f("rope_low_freq_factor", rope_low_freq_factor);
    f("rope_high_freq_factor", rope_high_freq_factor);
    f("rope_original_context", rope_original_context);
    f("input_norm", input_norm);
    f("fusion_init", fusion_init);
  }

  /// The groups of keys added after the first checkpoints, oldest first: the Llama block family
  /// ("block" ... "rope_original_context") and the paper's input norm and fusion init ("input_norm",
  /// "fusion_init"). A checkpoint written before a group lacks all of its keys; checkpoint.cpp fills
  /// them with today's defaults (the numerics such checkpoints were trained with).
  static std::vector<std::vector<std::string>> added_key_groups();

  bool operator==(const ModelConfig& o) const;
  bool operator!=(const ModelConfig& o) const { return !(*this == o); }
};

template <>
const EnumNames<Fusion>& enum_names<Fusion>();
template <>
const EnumNames<FeedbackState>& enum_names<FeedbackState>();
template <>
const EnumNames<BlockKind>& enum_names<BlockKind>();
template <>
const EnumNames<RopeScaling>& enum_names<RopeScaling>();
template <>
const EnumNames<InputNorm>& enum_names<InputNorm>();
template <>
const EnumNames<FusionInit>& enum_names<FusionInit>();

}  // namespace fbt
