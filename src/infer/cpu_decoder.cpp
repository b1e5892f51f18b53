// CpuDecoder: the decode step of src/model/model.cpp + src/infer/decode.cpp as BLAS calls and plain loops.
// Shape legend as in include/fbt/model/model.h; every buffer is row-major [B, ·].
#include "fbt/infer/cpu_decoder.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "fbt/util/error.h"

#ifdef FBT_WITH_BLAS
extern "C" {
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
            const float* beta, float* c, const int* ldc);
void sgemv_(const char* trans, const int* m, const int* n, const float* alpha, const float* a,
            const int* lda, const float* x, const int* incx, const float* beta, float* y, const int* incy);
}
#endif

namespace fbt {
namespace {

/// y[B,N] = x[B,K] · W[N,K]ᵀ, all row-major (a bias-free nn::Linear).
void linear(const float* x, int64_t B, int64_t K, const float* W, int64_t N, float* y) {
#ifdef FBT_WITH_BLAS
  // Column-major view: yᵀ (N×B) = W (N×K, stored as its K×N transpose) · xᵀ (K×B).
  const int k = int(K), n = int(N), b = int(B), one = 1;
  const float alpha = 1.0f, beta = 0.0f;
  if (B == 1) sgemv_("T", &k, &n, &alpha, W, &k, x, &one, &beta, y, &one);
  else sgemm_("T", "N", &n, &b, &k, &alpha, W, &k, x, &k, &beta, y, &n);
#else
  const auto f = torch::dtype(torch::kFloat);
  auto out = torch::from_blob(y, {B, N}, f);
  torch::mm_out(out, torch::from_blob(const_cast<float*>(x), {B, K}, f),
                torch::from_blob(const_cast<float*>(W), {N, K}, f).t());
#endif
}

/// out = x / sqrt(mean(x²) + eps) · g over n values (out may alias x).
void rms_norm(const float* x, const float* g, int64_t n, double eps, float* out) {
  double sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) sum_sq += double(x[i]) * double(x[i]);
  const float r = float(1.0 / std::sqrt(sum_sq / double(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * r * g[i];
}

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

/// Rotate-half RoPE of one head vector v [Dh] at position `pos` (angle = pos · inv_freq[i]).
void rope(float* v, int64_t head_dim, const std::vector<float>& inv_freq, int64_t pos) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float angle = float(pos) * inv_freq[i];
    const float c = std::cos(angle), s = std::sin(angle), x1 = v[i], x2 = v[i + half];
    v[i] = x1 * c - x2 * s;
    v[i + half] = x1 * s + x2 * c;
  }
}

const float* ptr(const torch::Tensor& t) { return t.data_ptr<float>(); }

/// Stacks 2-D weights [N_i, K] row-wise into one [Σ N_i, K] buffer.
std::vector<float> stack_rows(const std::vector<torch::Tensor>& weights) {
  std::vector<float> out;
  for (const auto& w : weights) {
    auto c = w.contiguous();
    out.insert(out.end(), ptr(c), ptr(c) + c.numel());
  }
  return out;
}

}  // namespace

bool CpuDecoder::supports(FBT& model) {
  // The packed step implements the paper's block (ModelConfig's defaults: QK-norm, head gates, no
  // biases, tied head, unscaled RoPE); other configs (the Llama family) decode with decode_step.
  const auto& c = model->config();
  if (c.block != BlockKind::Fbt || !c.qk_norm || c.attention_bias || c.attention_out_bias || !c.tie_embeddings ||
      c.rope_scaling != RopeScaling::None)
    return false;
  for (const auto& p : model->parameters())
    if (!p.device().is_cpu() || p.scalar_type() != torch::kFloat) return false;
  return true;
}

CpuDecoder::CpuDecoder(FBT& model) : config_(model->config()), model_(model) {
  if (!supports(model)) throw Error("CpuDecoder needs an fp32 model on the CPU");
  const auto params = model->named_parameters();
  auto get = [&](const std::string& name) { return params[name].detach().contiguous(); };
  embedding_ = get("embedding.weight");
  input_norm_ = get("input_norm.weight");
  final_norm_ = get("final_norm.weight");
  w_u_ = get("fusion.w_u.weight");
  w_g_ = get("fusion.w_g.weight");
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    Layer layer;
    layer.qkvg = stack_rows({get(b + "attn.wq.weight"), get(b + "attn.wk.weight"), get(b + "attn.wv.weight"),
                             get(b + "attn.gate.weight")});
    layer.gate_up = stack_rows({get(b + "mlp.w_gate.weight"), get(b + "mlp.w_up.weight")});
    layer.wo = get(b + "attn.wo.weight");
    layer.w_down = get(b + "mlp.w_down.weight");
    layer.attn_norm_in = get(b + "attn_norm_in.weight");
    layer.q_norm = get(b + "attn.q_norm.weight");
    layer.k_norm = get(b + "attn.k_norm.weight");
    layer.attn_norm_out = get(b + "attn_norm_out.weight");
    layer.mlp_norm_in = get(b + "mlp_norm_in.weight");
    layer.mlp_norm_out = get(b + "mlp_norm_out.weight");
    layer.window = config_.layer_window(l);
    layers_.push_back(std::move(layer));
  }
  const int64_t Dh = config_.head_dim();
  for (int64_t i = 0; i < Dh / 2; ++i)  // as make_rope: θ^(-(2i)/Dh) in fp32
    inv_freq_.push_back(std::pow(float(config_.rope_theta), -float(2 * i) / float(Dh)));
  scale_ = config_.branch_scale();
}

void CpuDecoder::reserve_rows(int64_t B) {
  if (B == rows_) return;
  const int64_t D = config_.d_model, H = config_.n_heads, Dh = config_.head_dim();
  const int64_t proj = (H + 2 * config_.n_kv_heads) * Dh + H;
  for (auto* buf : {&x_, &a_, &e_n_, &fused_a_, &fused_b_, &branch_}) buf->assign(B * D, 0.0f);
  proj_.assign(B * proj, 0.0f);
  attn_.assign(B * H * Dh, 0.0f);
  gate_up_.assign(B * 2 * config_.d_ff, 0.0f);
  act_.assign(B * config_.d_ff, 0.0f);
  rows_ = B;
}

void CpuDecoder::attend(int64_t layer, const KVCache& cache, int64_t slot) {
  const int64_t B = rows_, H = config_.n_heads, Hkv = config_.n_kv_heads, Dh = config_.head_dim();
  const int64_t G = H / Hkv, S = cache.length, cap = cache.capacity();
  const int64_t proj = (H + 2 * Hkv) * Dh + H, window = layers_[layer].window;
  const float* keys = ptr(cache.k[layer]);    // [B,Hkv,cap,Dh]
  const float* values = ptr(cache.v[layer]);  // [B,Hkv,cap,Dh]
  const int64_t* pos = cache.slot_pos.data_ptr<int64_t>();  // [B,cap]
  const bool* valid = cache.slot_valid.data_ptr<bool>();   // [B,cap]
  const float inv_sqrt = float(1.0 / std::sqrt(double(Dh)));
  scores_.resize(S);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t qpos = pos[b * cap + slot];
    for (int64_t h = 0; h < H; ++h) {
      const float* q = proj_.data() + b * proj + h * Dh;
      const int64_t kv = (b * Hkv + h / G) * cap;  // first slot of this row's KV head
      float top = -std::numeric_limits<float>::infinity();
      for (int64_t s = 0; s < S; ++s) {  // the mask of make_masks: real, causal, in window, or self
        const int64_t kpos = pos[b * cap + s];
        const bool allowed = s == slot || (valid[b * cap + s] && kpos <= qpos && (window == 0 || qpos - kpos < window));
        float score = -std::numeric_limits<float>::infinity();
        if (allowed) {
          const float* k = keys + (kv + s) * Dh;
          float dot = 0;
          for (int64_t j = 0; j < Dh; ++j) dot += q[j] * k[j];
          score = dot * inv_sqrt;
        }
        scores_[s] = score;
        top = std::max(top, score);
      }
      float* y = attn_.data() + b * H * Dh + h * Dh;
      std::fill(y, y + Dh, 0.0f);
      float total = 0;
      for (int64_t s = 0; s < S; ++s) {
        if (scores_[s] == -std::numeric_limits<float>::infinity()) continue;
        const float p = std::exp(scores_[s] - top);
        total += p;
        const float* v = values + (kv + s) * Dh;
        for (int64_t j = 0; j < Dh; ++j) y[j] += p * v[j];
      }
      const float gate = sigmoid(proj_[b * proj + (H + 2 * Hkv) * Dh + h]) / total;  // per-head output gate
      for (int64_t j = 0; j < Dh; ++j) y[j] *= gate;
    }
  }
}

torch::Tensor CpuDecoder::step(const torch::Tensor& tokens_in, DecodeMode mode, KVCache& cache) {
  const int64_t B = tokens_in.numel(), D = config_.d_model, V = config_.vocab_size, F = config_.d_ff;
  const int64_t H = config_.n_heads, Hkv = config_.n_kv_heads, Dh = config_.head_dim();
  const int64_t proj = (H + 2 * Hkv) * Dh + H;
  if (B != cache.batch() || int64_t(cache.k.size()) != config_.n_layers || cache.k[0].size(3) != Dh ||
      cache.k[0].scalar_type() != torch::kFloat || !cache.k[0].device().is_cpu())
    throw Error("CpuDecoder::step: the KV cache does not match the model, batch or fp32 CPU layout");
  reserve_rows(B);
  auto tokens = tokens_in.to(torch::kLong).contiguous();
  const int64_t* tok = tokens.data_ptr<int64_t>();
  auto last = cache.last_token.contiguous();
  auto h_prev = cache.h_prev.contiguous();

  // The input: plain RMSNorm_in(e) or the latent-feedback fusion (paper Eq. 4, decode.cpp).
  bool any_fused = false;
  std::vector<char> plain(B);
  for (int64_t b = 0; b < B; ++b) {
    if (tok[b] < 0 || tok[b] >= V)
      throw Error("token id " + std::to_string(tok[b]) + " outside the model vocabulary [0, " + std::to_string(V) + ")");
    rms_norm(ptr(embedding_) + tok[b] * D, ptr(input_norm_), D, config_.norm_eps, e_n_.data() + b * D);
    plain[b] = mode == DecodeMode::Standard || last.data_ptr<int64_t>()[b] == config_.doc_separator_id;
    any_fused = any_fused || !plain[b];
  }
  std::copy(e_n_.begin(), e_n_.end(), x_.begin());
  if (any_fused) {
    linear(ptr(h_prev), B, D, ptr(w_u_), D, fused_a_.data());  // W_U h_prev
    linear(e_n_.data(), B, D, ptr(w_g_), D, fused_b_.data());  // W_G e_n
    for (int64_t b = 0; b < B; ++b) {
      if (plain[b]) continue;
      float* g = fused_a_.data() + b * D;
      for (int64_t i = 0; i < D; ++i) {
        g[i] *= sigmoid(fused_b_[b * D + i]);
        if (config_.fusion == Fusion::GluPlusToken) g[i] += e_n_[b * D + i];
      }
      rms_norm(g, ptr(input_norm_), D, config_.norm_eps, x_.data() + b * D);
    }
  }

  const int64_t slot = cache.reserve(Layout{cache.next_pos.view({-1, 1}), {}});
  const int64_t* pos = cache.slot_pos.data_ptr<int64_t>();
  const int64_t cap = cache.capacity();
  const float scale = float(scale_);
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const Layer& L = layers_[l];
    // Attention branch: x += s · norm_out(Wo · gate ⊙ attention(q, K, V)).
    for (int64_t b = 0; b < B; ++b) rms_norm(x_.data() + b * D, ptr(L.attn_norm_in), D, config_.norm_eps, a_.data() + b * D);
    linear(a_.data(), B, D, L.qkvg.data(), proj, proj_.data());
    float* keys = cache.k[l].data_ptr<float>();
    float* values = cache.v[l].data_ptr<float>();
    for (int64_t b = 0; b < B; ++b) {
      float* row = proj_.data() + b * proj;
      const int64_t p = pos[b * cap + slot];
      for (int64_t h = 0; h < H; ++h) {
        rms_norm(row + h * Dh, ptr(L.q_norm), Dh, config_.norm_eps, row + h * Dh);
        rope(row + h * Dh, Dh, inv_freq_, p);
      }
      for (int64_t h = 0; h < Hkv; ++h) {
        float* k = row + (H + h) * Dh;
        rms_norm(k, ptr(L.k_norm), Dh, config_.norm_eps, k);
        rope(k, Dh, inv_freq_, p);
        const int64_t at = ((b * Hkv + h) * cap + slot) * Dh;
        std::memcpy(keys + at, k, Dh * sizeof(float));
        std::memcpy(values + at, row + (H + Hkv + h) * Dh, Dh * sizeof(float));
      }
    }
    attend(l, cache, slot);
    linear(attn_.data(), B, H * Dh, ptr(L.wo), D, branch_.data());
    for (int64_t b = 0; b < B; ++b) {
      float* y = branch_.data() + b * D;
      rms_norm(y, ptr(L.attn_norm_out), D, config_.norm_eps, y);
      for (int64_t i = 0; i < D; ++i) x_[b * D + i] += scale * y[i];
    }
    // MLP branch: x += s · norm_out(W_down(silu(W_gate a) ⊙ W_up a)).
    for (int64_t b = 0; b < B; ++b) rms_norm(x_.data() + b * D, ptr(L.mlp_norm_in), D, config_.norm_eps, a_.data() + b * D);
    linear(a_.data(), B, D, L.gate_up.data(), 2 * F, gate_up_.data());
    for (int64_t b = 0; b < B; ++b) {
      const float* gu = gate_up_.data() + b * 2 * F;
      for (int64_t i = 0; i < F; ++i) act_[b * F + i] = gu[i] * sigmoid(gu[i]) * gu[F + i];
    }
    linear(act_.data(), B, F, ptr(L.w_down), D, branch_.data());
    for (int64_t b = 0; b < B; ++b) {
      float* y = branch_.data() + b * D;
      rms_norm(y, ptr(L.mlp_norm_out), D, config_.norm_eps, y);
      for (int64_t i = 0; i < D; ++i) x_[b * D + i] += scale * y[i];
    }
  }

  // Head and feedback state: logits = FinalNorm(x) · Eᵀ; h_prev = FinalNorm(x) or x.
  for (int64_t b = 0; b < B; ++b) rms_norm(x_.data() + b * D, ptr(final_norm_), D, config_.norm_eps, a_.data() + b * D);
  auto logits = torch::empty({B, V}, torch::kFloat);
  linear(a_.data(), B, D, ptr(embedding_), V, logits.data_ptr<float>());
  const auto& state = config_.feedback_state == FeedbackState::PostNorm ? a_ : x_;
  cache.h_prev = torch::from_blob(const_cast<float*>(state.data()), {B, D}, torch::kFloat).clone();
  cache.last_token = tokens;
  cache.next_pos = cache.next_pos + 1;
  return logits;
}

}  // namespace fbt
