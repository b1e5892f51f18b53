// The FBT model, top to bottom: RMSNorm → RoPE/masks → attention → MLP → block → fusion → model.
// Shape legend as in include/fbt/model/model.h (B, T, S, D, H, Hkv, Dh, F, V, L).
// The Hugging Face Llama family (block llama: modeling_llama.py, modeling_qwen2.py,
// modeling_qwen3.py) is a handful of ModelConfig switches on the same pieces, not another model.
#include "fbt/model/model.h"

#include <cmath>
#include <limits>

#include <torch/nn/functional/linear.h>
#include <torch/nn/init.h>
#include <torch/version.h>

#include "fbt/util/error.h"
#include "fbt/util/out_of_memory.h"

namespace fbt {
namespace F = torch::nn::functional;

namespace {

/// A linear layer in → out; a Skeleton's is [0, 1] (bias [0]): registered, nothing allocated (a
/// [0, 0] weight would make libtorch's kaiming init divide by a fan-in of 0).
torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias, Materialize materialize) {
  if (materialize == Materialize::Skeleton) return torch::nn::Linear(torch::nn::LinearOptions(1, 0).bias(bias));
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

}  // namespace

// ---------------------------------------------------------------- RMSNorm
RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  auto xf = x.to(at::promote_types(x.scalar_type(), torch::kFloat));  // bf16/fp16 -> fp32
  auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return (y * weight).to(x.scalar_type());
}

// ---------------------------------------------------------------- RoPE and masks
torch::Tensor rope_inv_freq(const ModelConfig& c, const torch::Device& device) {
  const int64_t Dh = c.head_dim();
  auto inv_freq = torch::pow(c.rope_theta, -torch::arange(0, Dh, 2, torch::dtype(torch::kFloat).device(device)) / Dh);
  if (c.rope_scaling == RopeScaling::None) return inv_freq;  // [Dh/2]
  // llama3: wavelengths above original_context / low_freq_factor are divided by the factor,
  // those below original_context / high_freq_factor kept, and those between blended smoothly.
  const double old_context = double(c.rope_original_context), factor = c.rope_scaling_factor;
  const double low = c.rope_low_freq_factor, high = c.rope_high_freq_factor;
  auto wavelen = (2 * M_PI) / inv_freq;
  auto scaled = torch::where(wavelen > old_context / low, inv_freq / factor, inv_freq);
  auto smooth = (old_context / wavelen - low) / (high - low);
  auto blended = (1 - smooth) * scaled / factor + smooth * scaled;
  auto medium = (wavelen >= old_context / high).logical_and(wavelen <= old_context / low);
  return torch::where(medium, blended, scaled);  // [Dh/2]
}

namespace {

/// RoPE tables for positions [B|1,T]: angle = pos · inv_freq[i], i < Dh/2 (rope_inv_freq).
Rope make_rope(const torch::Tensor& positions, const ModelConfig& config) {
  auto inv_freq = rope_inv_freq(config, positions.device());           // [Dh/2]
  auto angles = positions.to(torch::kFloat).unsqueeze(-1) * inv_freq;  // [B|1,T,Dh/2]
  angles = angles.unsqueeze(1);                                        // [B|1,1,T,Dh/2]
  return {angles.cos(), angles.sin()};
}

/// Rotate-half RoPE on x [B,h,T,Dh].
torch::Tensor apply_rope(const torch::Tensor& x, const Rope& rope) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * rope.cos - x2 * rope.sin, x1 * rope.sin + x2 * rope.cos}, -1).to(x.scalar_type());
}

torch::Tensor additive(const torch::Tensor& allowed) {  // bool [B|1,T,S] -> [B|1,1,T,S]
  return torch::zeros(allowed.sizes(), torch::dtype(torch::kFloat).device(allowed.device()))
      .masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity())
      .unsqueeze(1);
}

/// Causal (+ sliding window) masks over key slots. A query may see keys that are real tokens
/// at positions ≤ its own (and within the window); every query also sees its own slot so that
/// rows of pads stay finite.
AttentionMasks make_masks(const ModelConfig& config, const Layout& layout, const KVCache* cache, int64_t first_slot) {
  const int64_t T = layout.positions.size(1);
  auto dev = layout.positions.device();
  auto qpos = layout.positions;  // [B|1,T]
  torch::Tensor kpos = qpos, kvalid = layout.valid;
  torch::Tensor qslot = torch::arange(first_slot, first_slot + T, torch::dtype(torch::kLong).device(dev));
  torch::Tensor kslot = qslot;
  if (cache) {
    const bool fixed = cache->write_slot.defined();  // fixed shape: every slot, masked by validity
    const int64_t S = fixed ? cache->capacity() : cache->length;
    kpos = cache->slot_pos.narrow(1, 0, S);      // [B,S]
    kvalid = cache->slot_valid.narrow(1, 0, S);  // [B,S]
    kslot = torch::arange(S, torch::dtype(torch::kLong).device(dev));
    if (fixed) qslot = cache->write_slot;  // [1]
  }
  auto self = (qslot.unsqueeze(1) == kslot.unsqueeze(0)).unsqueeze(0);  // [1,T,S]
  auto allowed = kpos.unsqueeze(1) <= qpos.unsqueeze(2);                // [B|1,T,S]
  if (kvalid.defined()) allowed = allowed.logical_and(kvalid.unsqueeze(1));
  bool any_window = false;
  for (int64_t l = 0; l < config.n_layers; ++l) any_window = any_window || config.layer_window(l) > 0;

  AttentionMasks masks;
  masks.full = additive(allowed.logical_or(self));
  if (any_window) {
    auto near = (qpos.unsqueeze(2) - kpos.unsqueeze(1)) < config.window;
    masks.windowed = additive(allowed.logical_and(near).logical_or(self));
  }
  masks.causal_only = !cache && !layout.valid.defined() && !any_window;
  return masks;
}

}  // namespace

// ---------------------------------------------------------------- attention
torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& mask,
                     bool causal_only, AttentionKernel kernel) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), Dh = q.size(3);
  const int64_t Hkv = k.size(1), S = k.size(2), G = H / Hkv;
#if TORCH_VERSION_MAJOR >= 2
  if (kernel == AttentionKernel::Auto) {
    // Fused kernels (flash attention for the plain causal training case).
    auto kx = G == 1 ? k : k.repeat_interleave(G, 1);  // [B,H,S,Dh]
    auto vx = G == 1 ? v : v.repeat_interleave(G, 1);
    if (causal_only) return at::scaled_dot_product_attention(q, kx, vx, {}, 0.0, /*is_causal=*/true);
    return at::scaled_dot_product_attention(q, kx, vx, mask.to(q.scalar_type()), 0.0, false);
  }
#endif
  (void)causal_only;
  (void)kernel;
  auto qg = q.reshape({B, Hkv, G * T, Dh});
  auto scores = torch::matmul(qg, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(Dh)));  // [B,Hkv,G*T,S]
  scores = scores.view({B, Hkv, G, T, S}) + mask.unsqueeze(1).to(scores.scalar_type());
  auto probs = torch::softmax(scores, -1).view({B, Hkv, G * T, S});
  return torch::matmul(probs, v).view({B, H, T, Dh});
}

AttentionImpl::AttentionImpl(const ModelConfig& c, int64_t window, Materialize materialize)
    : n_heads_(c.n_heads), n_kv_heads_(c.n_kv_heads), head_dim_(c.head_dim()), window_(window) {
  auto linear = [&](int64_t in, int64_t out, bool bias) { return make_linear(in, out, bias, materialize); };
  wq_ = register_module("wq", linear(c.d_model, c.n_heads * head_dim_, c.attention_bias));
  wk_ = register_module("wk", linear(c.d_model, c.n_kv_heads * head_dim_, c.attention_bias));
  wv_ = register_module("wv", linear(c.d_model, c.n_kv_heads * head_dim_, c.attention_bias));
  wo_ = register_module("wo", linear(c.n_heads * head_dim_, c.d_model, c.attention_out_bias));
  if (c.block == BlockKind::Fbt) gate_ = register_module("gate", linear(c.d_model, c.n_heads, false));
  if (c.qk_norm) {
    q_norm_ = register_module("q_norm", RMSNorm(head_dim_, c.norm_eps));
    k_norm_ = register_module("k_norm", RMSNorm(head_dim_, c.norm_eps));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const Rope& rope, const AttentionMasks& masks,
                                     KVCache* cache, int64_t layer, int64_t first_slot) {
  const int64_t B = x.size(0), T = x.size(1);
  auto q = wq_(x).view({B, T, n_heads_, head_dim_});                     // [B,T,H,Dh]
  auto k = wk_(x).view({B, T, n_kv_heads_, head_dim_});                  // [B,T,Hkv,Dh]
  auto v = wv_(x).view({B, T, n_kv_heads_, head_dim_}).transpose(1, 2);  // [B,Hkv,T,Dh]
  if (!q_norm_.is_empty()) {                                             // QK-norm over Dh, before RoPE
    q = q_norm_(q);
    k = k_norm_(k);
  }
  q = apply_rope(q.transpose(1, 2), rope);     // [B,H,T,Dh]
  k = apply_rope(k.transpose(1, 2), rope);     // [B,Hkv,T,Dh]
  if (cache && cache->write_slot.defined()) {  // fixed shape (T = 1): device-side slot index
    cache->k[layer].index_copy_(2, cache->write_slot, k);
    cache->v[layer].index_copy_(2, cache->write_slot, v);
    k = cache->k[layer];  // [B,Hkv,capacity,Dh]
    v = cache->v[layer];
  } else if (cache) {
    cache->k[layer].narrow(2, first_slot, T).copy_(k);
    cache->v[layer].narrow(2, first_slot, T).copy_(v);
    k = cache->k[layer].narrow(2, 0, cache->length);  // [B,Hkv,S,Dh]
    v = cache->v[layer].narrow(2, 0, cache->length);
  }
  const auto& mask = window_ > 0 ? masks.windowed : masks.full;
  auto y = attend(q, k, v, mask, masks.causal_only && window_ == 0);  // [B,H,T,Dh]
  // Per-head output gate (block fbt; SPEC §3, "a learned projection of the block input"): read, like q, k
  // and v, from the attention branch's input after its pre-norm, x = RMSNorm(block input), as
  // gated-attention implementations do; the raw residual stream's scale grows with depth.
  if (!gate_.is_empty()) y = y * torch::sigmoid(gate_(x)).transpose(1, 2).unsqueeze(-1);  // gate [B,H,T,1]
  return wo_(y.transpose(1, 2).reshape({B, T, n_heads_ * head_dim_}));                    // [B,T,D]
}

// ---------------------------------------------------------------- MLP
MLPImpl::MLPImpl(const ModelConfig& c, Materialize materialize) {
  auto linear = [&](int64_t in, int64_t out) { return make_linear(in, out, false, materialize); };
  w_gate_ = register_module("w_gate", linear(c.d_model, c.d_ff));
  w_up_ = register_module("w_up", linear(c.d_model, c.d_ff));
  w_down_ = register_module("w_down", linear(c.d_ff, c.d_model));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  return w_down_(torch::silu(w_gate_(x)) * w_up_(x));  // [B,T,F] inside
}

// ---------------------------------------------------------------- block
BlockImpl::BlockImpl(const ModelConfig& c, int64_t layer, Materialize materialize)
    : layer_(layer), scale_(c.branch_scale()) {
  const bool sandwich = c.block == BlockKind::Fbt;
  attn_norm_in_ = register_module("attn_norm_in", RMSNorm(c.d_model, c.norm_eps));
  attn_ = register_module("attn", Attention(c, c.layer_window(layer), materialize));
  if (sandwich) attn_norm_out_ = register_module("attn_norm_out", RMSNorm(c.d_model, c.norm_eps));
  mlp_norm_in_ = register_module("mlp_norm_in", RMSNorm(c.d_model, c.norm_eps));
  mlp_ = register_module("mlp", MLP(c, materialize));
  if (sandwich) mlp_norm_out_ = register_module("mlp_norm_out", RMSNorm(c.d_model, c.norm_eps));
}

torch::Tensor BlockImpl::branch_out(RMSNorm& norm_out, const torch::Tensor& y) {
  return norm_out.is_empty() ? y : scale_ * norm_out(y);  // block llama: scale_ is 1
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const Rope& rope, const AttentionMasks& masks, KVCache* cache,
                                 int64_t first_slot) {
  auto h = x + branch_out(attn_norm_out_, attn_(attn_norm_in_(x), rope, masks, cache, layer_, first_slot));
  return h + branch_out(mlp_norm_out_, mlp_(mlp_norm_in_(h)));
}

// ---------------------------------------------------------------- fusion (paper Eq. 4)
LatentFusionImpl::LatentFusionImpl(const ModelConfig& c, Materialize materialize) {
  auto linear = [&] { return make_linear(c.d_model, c.d_model, false, materialize); };
  w_u = register_module("w_u", linear());
  w_g = register_module("w_g", linear());
}

torch::Tensor LatentFusionImpl::forward(const torch::Tensor& h_prev, const torch::Tensor& e_normed) {
  return w_u(h_prev) * torch::sigmoid(w_g(e_normed));  // state is the value, token the gate
}

// ---------------------------------------------------------------- model
FBTImpl::FBTImpl(const ModelConfig& config, Materialize materialize) : config_(config) {
  config_.validate();
  try {
    build(materialize);
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    const int64_t n = config_.parameter_count();
    throw Error("cannot allocate the model's " + std::to_string(n) + " parameters (" + std::to_string(n * 4 / 1000000) +
                " MB in fp32) with model.vocab_size=" + std::to_string(config_.vocab_size) + ", model.d_model=" +
                std::to_string(config_.d_model) + ", model.n_layers=" + std::to_string(config_.n_layers) +
                ", model.d_ff=" + std::to_string(config_.d_ff) + ": lower them (" + first_line(e) + ")");
  }
}

void FBTImpl::build(Materialize materialize) {
  const auto& c = config_;
  const bool skeleton = materialize == Materialize::Skeleton;
  embedding_ = register_module("embedding",
                               skeleton ? torch::nn::Embedding(0, 1) : torch::nn::Embedding(c.vocab_size, c.d_model));
  input_norm_ = register_module("input_norm", RMSNorm(c.d_model, c.norm_eps));
  fusion_ = register_module("fusion", LatentFusion(c, materialize));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t l = 0; l < c.n_layers; ++l) blocks_->push_back(Block(c, l, materialize));
  final_norm_ = register_module("final_norm", RMSNorm(c.d_model, c.norm_eps));
  if (!c.tie_embeddings)
    lm_head_ = register_module("lm_head", make_linear(c.d_model, c.vocab_size, false, materialize));
  if (skeleton) return;  // the weights come from a checkpoint

  torch::NoGradGuard no_grad;
  for (auto& p : named_parameters()) {
    const auto& name = p.key();
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0)
      p.value().zero_();
    else if (name.find("norm") == std::string::npos)
      torch::nn::init::normal_(p.value(), 0.0, c.init_std);
  }
  if (c.fusion_init == FusionInit::Identity) {
    torch::nn::init::eye_(fusion_->w_u->weight);  // W_U = I: at switch-on the fused input ≈ plain
    torch::nn::init::normal_(fusion_->w_g->weight, 0.0, c.fusion_gate_init_std);
  } else {  // nanochat's linear init (the first author's reproduction): std 1/√D
    const double a = std::sqrt(3.0 / c.d_model);
    torch::nn::init::uniform_(fusion_->w_u->weight, -a, a);
    torch::nn::init::uniform_(fusion_->w_g->weight, -a, a);
  }
  // Residual: W_U = 0, so the fused input is the plain one until W_U learns (LoRA's B = 0).
  if (c.fusion == Fusion::Residual) fusion_->w_u->weight.zero_();
  if (c.block == BlockKind::Llama) match_input_norm_to_embedding();
}

void FBTImpl::match_input_norm_to_embedding() {
  torch::NoGradGuard no_grad;
  const auto& e = embedding_->weight;                                                        // [V,D]
  input_norm_->weight.copy_(e.to(torch::kFloat).pow(2).mean(0).sqrt().to(e.scalar_type()));  // [D]
}

void FBTImpl::check_token_ids(const torch::Tensor& tokens) const {
  if (tokens.numel() == 0) return;
  const auto range = torch::stack({tokens.min(), tokens.max()}).cpu();  // one host read for both
  const int64_t lo = range[0].item<int64_t>(), hi = range[1].item<int64_t>();
  if (lo < 0 || hi >= config_.vocab_size)
    throw Error("token id " + std::to_string(lo < 0 ? lo : hi) + " outside the model vocabulary [0, " +
                std::to_string(config_.vocab_size) + ")");
}

torch::Tensor FBTImpl::embed(const torch::Tensor& tokens, bool check_ids) {
  if (check_ids) check_token_ids(tokens);
  return embedding_(tokens);  // [B,T,D]
}

bool FBTImpl::plain_input_is_normalised() const {
  return config_.block == BlockKind::Fbt && config_.input_norm == InputNorm::EveryPass;
}

torch::Tensor FBTImpl::plain_input(const torch::Tensor& e) { return plain_input_is_normalised() ? input_norm_(e) : e; }

torch::Tensor FBTImpl::fuse(const torch::Tensor& h_prev, const torch::Tensor& e_plain, const torch::Tensor& e_n) {
  auto g = fusion_(h_prev, e_n);
  switch (config_.fusion) {
    case Fusion::Glu: return input_norm_(g);
    case Fusion::GluPlusToken: return input_norm_(g + e_n);
    case Fusion::Residual: return e_plain + g;  // validate(): input_norm every_pass, so e_plain is x_plain
  }
  throw Error("model.fusion: unknown value");
}

torch::Tensor FBTImpl::fused_input(const torch::Tensor& h_prev, const torch::Tensor& e_plain) {
  return fuse(h_prev, e_plain, plain_input_is_normalised() ? e_plain : input_norm_(e_plain));
}

torch::Tensor FBTImpl::feedback_input(const torch::Tensor& h_prev, const torch::Tensor& e_plain,
                                      const torch::Tensor& plain) {
  auto e_n = plain_input_is_normalised() ? e_plain : input_norm_(e_plain);  // RMSNorm_in(e), once
  auto plain_rows = config_.input_norm == InputNorm::Listing3 ? e_n : e_plain;
  return torch::where(plain, plain_rows, fuse(h_prev, e_plain, e_n));
}

torch::Tensor FBTImpl::plain_positions(const torch::Tensor& tokens) const {
  const int64_t T = tokens.size(1);
  auto plain = torch::zeros_like(tokens, torch::kBool);  // [B,T]
  plain.select(1, 0).fill_(true);
  if (config_.doc_separator_id >= 0 && T > 1)
    plain.narrow(1, 1, T - 1).logical_or_(tokens.narrow(1, 0, T - 1) == config_.doc_separator_id);
  return plain;
}

torch::Tensor FBTImpl::stack(const torch::Tensor& u, const Layout& layout, KVCache* cache,
                             std::vector<torch::Tensor>* layer_states) {
  const int64_t first_slot = cache ? cache->reserve(layout) : 0;
  auto rope = make_rope(layout.positions, config_);
  auto masks = make_masks(config_, layout, cache, first_slot);
  auto x = u;  // [B,T,D]
  if (layer_states) *layer_states = {x};
  for (const auto& block : *blocks_) {
    x = block->as<BlockImpl>()->forward(x, rope, masks, cache, first_slot);
    if (layer_states) layer_states->push_back(x);
  }
  return x;
}

torch::Tensor FBTImpl::final_norm(const torch::Tensor& x) { return final_norm_(x); }

torch::Tensor FBTImpl::feedback_state(const torch::Tensor& x) {
  return config_.feedback_state == FeedbackState::PostNorm ? final_norm_(x) : x;
}

torch::Tensor FBTImpl::head(const torch::Tensor& x) {
  const auto& w = lm_head_.is_empty() ? embedding_->weight : lm_head_->weight;  // [V,D]
  return F::linear(final_norm_(x), w);                                          // [B,T,D]·[V,D]ᵀ -> [B,T,V]
}

torch::Tensor FBTImpl::forward(const torch::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  if (T > config_.context)
    throw Error("sequence of " + std::to_string(T) + " tokens exceeds the model context " +
                std::to_string(config_.context));
  auto u = plain_input(embed(tokens));
  return head(stack(u, Layout::contiguous(T, tokens.device())));
}

}  // namespace fbt
