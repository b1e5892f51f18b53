// CpuDecoder: the decode step of src/model/model.cpp + src/infer/decode.cpp as matrix-vector kernels and plain loops.
// Shape legend as in include/fbt/model/model.h; every buffer is row-major [B, ·].
#include "fbt/infer/cpu_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include <ATen/Parallel.h>

#include "fbt/infer/batch_gemv.h"
#include "fbt/infer/gemm_linear.h"
#include "fbt/infer/parallel_probe.h"
#include "fbt/infer/sigmoid.h"
#include "fbt/util/cpu_allocator.h"
#include "fbt/util/cpu_features.h"
#include "fbt/util/error.h"
#include "fbt/util/huge_pages.h"

#ifdef FBT_WITH_BLAS
extern "C" {
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c,
            const int* ldc);
}
#endif

namespace fbt {
namespace {

#ifdef FBT_WITH_BLAS
/// y[B,N] (row stride ldy) = x[B,K] · W[N,K]ᵀ, all row-major, by BLAS sgemm.
void sgemm_linear(const float* x, int64_t B, int64_t K, const float* W, int64_t N, float* y, int64_t ldy) {
  // Column-major view: yᵀ (N×B, leading dimension ldy) = W (N×K, stored as its K×N transpose) · xᵀ (K×B).
  const int k = int(K), n = int(N), b = int(B), ldc = int(ldy);
  const float alpha = 1.0f, beta = 0.0f;
  sgemm_("T", "N", &n, &b, &k, &alpha, W, &k, x, &k, &beta, y, &ldc);
}
#endif

/// out = x / sqrt(mean(x²) + eps) · g over n values (out may alias x).
void rms_norm(const float* x, const float* g, int64_t n, double eps, float* out) {
  double sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) sum_sq += double(x[i]) * double(x[i]);
  const float r = float(1.0 / std::sqrt(sum_sq / double(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * r * g[i];
}

/// Rotate-half RoPE of one head vector v [Dh] by the angles of its position: cos_sin [Dh] holds
/// cos(pos · inv_freq[i]) for i < Dh/2, then the sines.
void rope(float* v, int64_t head_dim, const float* cos_sin) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float c = cos_sin[i], s = cos_sin[half + i], x1 = v[i], x2 = v[i + half];
    v[i] = x1 * c - x2 * s;
    v[i + half] = x1 * s + x2 * c;
  }
}

const float* ptr(const torch::Tensor& t) { return t.data_ptr<float>(); }

/// f(b) for every row b < B, the rows split across the intra-op threads where they hold at least
/// ~4k values of work per task (a prefill's 64 rows, also at d_model 256, where ~16k kept them on
/// one thread: `small` prefill at two threads +4%; a decode step's row stays on the calling
/// thread, which then forks nothing). Each row's steps are the same on any thread: no bit changes.
template <class F>
void for_rows(int64_t B, int64_t values_per_row, const F& f) {
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 12) / std::max<int64_t>(values_per_row, 1));
  at::parallel_for(0, B, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) f(b);
  });
}

}  // namespace

DecodeWeights parse_decode_weights(const std::string& text, const std::string& flag) {
  if (text == "fp32") return DecodeWeights::Fp32;
  if (text == "int8") return DecodeWeights::Int8;
  if (text == "int4") return DecodeWeights::Int4;
  throw Error(flag + ": expected fp32, int8 or int4, got '" + text + "'");
}

CpuDecoder::Matrix CpuDecoder::matrix(std::vector<torch::Tensor> parts, bool head) const {
  Matrix m;
  m.cols = parts[0].size(1);
  for (const auto& p : parts) m.rows += p.size(0);
  // Rows that do not split into blocks of 32 stay fp32 (as llama.cpp leaves such tensors).
  if (options_.weights == DecodeWeights::Fp32 || m.cols % QuantMatrix::kBlock != 0) {
    m.parts = std::move(parts);
    for (const auto& part : m.parts) m.views.push_back({ptr(part), part.size(0)});
    return m;
  }
  const auto format = options_.weights == DecodeWeights::Int4 && !head ? QuantFormat::Q4_0 : QuantFormat::Q8_0;
  auto stacked = torch::cat(parts, 0).contiguous();  // transient: the quantised copy is what is kept
  m.quant.push_back({QuantMatrix::quantize(format, ptr(stacked), m.rows, m.cols), {}, 0});
  return m;
}

int64_t CpuDecoder::Matrix::quant_bytes() const {
  int64_t total = 0;
  for (const auto& q : quant) total += q.blocks.bytes();
  return total;
}

void CpuDecoder::linear(const float* x, int64_t B, const Matrix& W, float* y) const {
  if (!W.quant.empty()) {  // each run of rows fills its columns of y
    for (const auto& q : W.quant) quant_linear(x, B, q.blocks, y + q.row, options_.activations, W.rows);
    return;
  }
  // Unless rows must round as if alone, more than four (a prefill's, a wide batch's) go to a GEMM:
  // fbt's own where the CPU has AVX-512, else BLAS sgemm where linked (gemm_linear.h).
  if (!options_.batch_invariant && B > 4) {
#ifdef FBT_WITH_BLAS
    if (!cpu_has_avx512()) {
      int64_t row = 0;
      for (const auto& part : W.parts) {  // each part fills its block of columns of y [B, W.rows]
        sgemm_linear(x, B, W.cols, ptr(part), part.size(0), y + row, W.rows);
        row += part.size(0);
      }
      return;
    }
#endif
    return gemm_linear(x, B, W.cols, W.views, y, W.rows);
  }
  batch_invariant_linear(x, B, W.cols, W.views, y, W.rows);
}

std::vector<const CpuDecoder::Matrix*> CpuDecoder::matrices(bool with_fusion) const {
  std::vector<const Matrix*> all{&head_};
  if (with_fusion) all.insert(all.end(), {&w_u_, &w_g_});
  for (const auto& l : layers_) all.insert(all.end(), {&l.qkvg, &l.gate_up, &l.wo, &l.w_down});
  return all;
}

int64_t CpuDecoder::matmul_weight_bytes(bool with_fusion) const {
  int64_t total = 0;
  for (const Matrix* m : matrices(with_fusion))
    total += !m->quant.empty() ? m->quant_bytes() : m->rows * m->cols * int64_t(sizeof(float));
  return total;
}

int CpuDecoder::row_loop_threads() { return detail::parallel_for_threads_here(); }

bool CpuDecoder::supports(FBT& model) {
  // The packed step implements both blocks (the paper's, and the Llama family's pre-norm block,
  // with or without QK-norm, tied or untied head) with unscaled RoPE and without biases; other
  // configs (Qwen2's q/k/v biases, Llama-3's scaled RoPE, Listing 3's input norm) decode with
  // decode_step.
  const auto& c = model->config();
  if (c.attention_bias || c.attention_out_bias || c.rope_scaling != RopeScaling::None) return false;
  if (c.input_norm != InputNorm::EveryPass) return false;
  for (const auto& p : model->parameters())
    if (!p.device().is_cpu() || p.scalar_type() != torch::kFloat) return false;
  return true;
}

CpuDecoder::CpuDecoder(FBT& model, CpuDecoderOptions options)
    : config_(model->config()), model_(model), options_(options) {
  if (!supports(model))
    throw Error(options.weights != DecodeWeights::Fp32
                    ? "--weights int8/int4: the quantised decode step needs an fp32 model on the CPU without attention "
                      "biases or scaled RoPE (use --weights fp32)"
                    : "CpuDecoder needs an fp32 model on the CPU without attention biases or scaled RoPE");
  auto params = model->named_parameters();
  auto get = [&](const std::string& name) { return params[name].detach().contiguous(); };
  // The matrix of the named tensors; where it is quantised and the option says so, their fp32
  // parameters are freed at once (the next matrix's blocks reuse the memory).
  auto weight = [&](const std::vector<std::string>& names, bool head = false) {
    const auto groups =
        options_.prequantized ? options_.prequantized->cover(names) : std::vector<const QuantizedGroup*>{};
    if (!groups.empty()) {
      Matrix m;
      m.names = names;
      for (const auto* g : groups) {
        if (g->cols != groups[0]->cols)
          throw Error("quantized groups '" + groups[0]->parts[0] + "' and '" + g->parts[0] + "' have " +
                      std::to_string(groups[0]->cols) + " and " + std::to_string(g->cols) + " columns");
        m.quant.push_back({QuantMatrix::from_blocks(quant_format_named(g->format, "quantized group " + g->parts[0]),
                                                    g->rows, g->cols, g->blocks, options_.prequantized->memory,
                                                    g->tiled ? QuantLayout::Tiles8 : QuantLayout::Rows),
                           g->parts, m.rows});
        m.rows += g->rows;
      }
      m.cols = groups[0]->cols;
      return m;
    }
    std::vector<torch::Tensor> parts;
    for (const auto& name : names) {
      parts.push_back(get(name));
      if (parts.back().numel() == 0)
        throw Error("tensor '" + name + "' has no weights and no quantised group holds it (a damaged quantised run?)");
    }
    auto m = matrix(std::move(parts), head);
    m.names = names;
    if (!m.quant.empty()) m.quant[0].names = names;
    if (!m.quant.empty() && options_.release_model_weights) {
      torch::NoGradGuard no_grad;
      for (const auto& name : names) params[name].set_data(torch::empty({0}, torch::kFloat));
      release_free_cpu_blocks();
    }
    return m;
  };
  if (!config_.tie_embeddings) embedding_ = get("embedding.weight");
  input_norm_ = get("input_norm.weight");
  final_norm_ = get("final_norm.weight");
  w_u_ = weight({"fusion.w_u.weight"});
  w_g_ = weight({"fusion.w_g.weight"});
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    Layer layer;
    std::vector<std::string> qkvg{b + "attn.wq.weight", b + "attn.wk.weight", b + "attn.wv.weight"};
    if (paper_block()) qkvg.push_back(b + "attn.gate.weight");
    layer.qkvg = weight(qkvg);
    layer.gate_up = weight({b + "mlp.w_gate.weight", b + "mlp.w_up.weight"});
    layer.wo = weight({b + "attn.wo.weight"});
    layer.w_down = weight({b + "mlp.w_down.weight"});
    layer.attn_norm_in = get(b + "attn_norm_in.weight");
    if (config_.qk_norm) {
      layer.q_norm = get(b + "attn.q_norm.weight");
      layer.k_norm = get(b + "attn.k_norm.weight");
    }
    if (paper_block()) {
      layer.attn_norm_out = get(b + "attn_norm_out.weight");
      layer.mlp_norm_out = get(b + "mlp_norm_out.weight");
    }
    layer.mlp_norm_in = get(b + "mlp_norm_in.weight");
    layer.window = config_.layer_window(l);
    layers_.push_back(std::move(layer));
  }
  // The head last (a tied one is the embedding, which a quantised head replaces for lookups too).
  head_ = weight({config_.tie_embeddings ? "embedding.weight" : "lm_head.weight"}, /*head=*/true);
  if (config_.tie_embeddings && head_.quant.empty()) embedding_ = get("embedding.weight");
  check_shapes();
  if (!options_.prequantized)
    gather_quantised_weights();
  else if (kernel_layout() != QuantLayout::Tiles8 &&  // load_model put the run's blocks in one mapping, in tiles
           std::any_of(options_.prequantized->groups.begin(), options_.prequantized->groups.end(),
                       [](const QuantizedGroup& g) { return g.tiled; }))
    throw Error(
        "a quantised run's Q8_0, Q4_0 and Q5_0 blocks are in tiles of 8 rows, which only int8 activations read");
  const int64_t Dh = config_.head_dim();
  for (int64_t i = 0; i < Dh / 2; ++i)  // as make_rope: θ^(-(2i)/Dh) in fp32
    inv_freq_.push_back(std::pow(float(config_.rope_theta), -float(2 * i) / float(Dh)));
  scale_ = config_.branch_scale();
}

void CpuDecoder::check_shapes() const {
  const int64_t D = config_.d_model, V = config_.vocab_size, F = config_.d_ff, Dh = config_.head_dim();
  const auto tensor = [](const torch::Tensor& t, std::vector<int64_t> shape, const std::string& name) {
    if (t.defined() && t.sizes() != torch::IntArrayRef(shape))
      throw Error("tensor '" + name + "' has shape " + c10::str(t.sizes()) + " but the model config gives " +
                  c10::str(torch::IntArrayRef(shape)));
  };
  const auto matrix = [](const Matrix& m, int64_t rows, int64_t cols) {
    if (m.rows != rows || m.cols != cols)
      throw Error("the weights of '" + m.names.at(0) + "' are " + std::to_string(m.rows) + " x " +
                  std::to_string(m.cols) + " but the model config gives " + std::to_string(rows) + " x " +
                  std::to_string(cols));
  };
  tensor(embedding_, {V, D}, "embedding.weight");
  tensor(input_norm_, {D}, "input_norm.weight");
  tensor(final_norm_, {D}, "final_norm.weight");
  matrix(head_, V, D);
  matrix(w_u_, D, D);
  matrix(w_g_, D, D);
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const auto& layer = layers_[size_t(l)];
    const std::string b = "blocks." + std::to_string(l) + ".";
    matrix(layer.qkvg, proj_width(), D);
    matrix(layer.gate_up, 2 * F, D);
    matrix(layer.wo, D, config_.n_heads * Dh);
    matrix(layer.w_down, D, F);
    for (const auto& [t, name] : {std::pair{&layer.attn_norm_in, "attn_norm_in"},
                                  {&layer.attn_norm_out, "attn_norm_out"},
                                  {&layer.mlp_norm_in, "mlp_norm_in"},
                                  {&layer.mlp_norm_out, "mlp_norm_out"}})
      tensor(*t, {D}, b + name + ".weight");
    tensor(layer.q_norm, {Dh}, b + "attn.q_norm.weight");
    tensor(layer.k_norm, {Dh}, b + "attn.k_norm.weight");
  }
}

std::vector<QuantizedGroup> CpuDecoder::quantized_groups() const {
  std::vector<QuantizedGroup> out;
  for (const Matrix* m : matrices(/*with_fusion=*/true))
    for (const auto& q : m->quant) {
      if (q.blocks.layout() != QuantLayout::Rows)
        throw Error("CpuDecoder::quantized_groups: '" + q.names[0] +
                    "' is in the kernel's tiles (quant_layout Rows keeps ggml's layout)");
      out.push_back(
          {q.names, quant_format_name(q.blocks.format()), q.blocks.rows(), q.blocks.cols(), q.blocks.block(0, 0)});
    }
  return out;
}

void CpuDecoder::gather_quantised_weights() {
  std::vector<QuantMatrix*> quantised;
  for (const Matrix* m : matrices(/*with_fusion=*/true))
    for (const auto& q : m->quant) quantised.push_back(const_cast<QuantMatrix*>(&q.blocks));  // this decoder's own
  auto at = [](size_t offset) { return (offset + 63) / 64 * 64; };  // each matrix at a cache line
  size_t total = 0;
  for (const auto* q : quantised) total = at(total) + size_t(q->bytes());
  if (total == 0) return;
  const auto mapping = huge_page_bytes(total);
  size_t offset = 0;
  for (auto* q : quantised) {
    offset = at(offset);
    q->move_to(mapping.get() + offset, mapping, quant_format_tiles(q->format()) ? kernel_layout() : QuantLayout::Rows);
    offset += size_t(q->bytes());
  }
  release_free_cpu_blocks();  // the blocks' old copies
}

QuantLayout CpuDecoder::kernel_layout() const {
  return options_.activations == Q8Activations::Int8 ? options_.quant_layout : QuantLayout::Rows;
}

void CpuDecoder::reserve_rows(int64_t B) {
  if (B == rows_) return;
  const int64_t D = config_.d_model, H = config_.n_heads, Dh = config_.head_dim();
  // assign() keeps the capacity: the engine alternates prefill passes and decode steps.
  for (auto* buf : {&x_, &a_, &e_n_, &fused_a_, &fused_b_, &branch_}) buf->assign(B * D, 0.0f);
  proj_.assign(B * proj_width(), 0.0f);
  attn_.assign(B * H * Dh, 0.0f);
  gate_up_.assign(B * 2 * config_.d_ff, 0.0f);
  act_.assign(B * config_.d_ff, 0.0f);
  rope_.assign(B * Dh, 0.0f);
  rows_ = B;
}

void CpuDecoder::attend(int64_t layer, const std::vector<RowCache>& rows) {
  const int64_t H = config_.n_heads, Hkv = config_.n_kv_heads, Dh = config_.head_dim();
  const int64_t G = H / Hkv, proj = proj_width(), window = layers_[layer].window;
  const float inv_sqrt = float(1.0 / std::sqrt(double(Dh)));
  int64_t longest = 1;
  for (const RowCache& row : rows) longest = std::max(longest, row.slot + 1);
  // (row, head) pairs split across the intra-op threads, ~32k multiply-adds per task at least; each
  // pair's sums are the same steps on any thread. A prefill's row b attends to b + 1 keys, so the
  // rows are taken from both ends in turn (0, B−1, 1, B−2, ...): contiguous chunks then cost alike
  // (in order, the second of two threads had 3× the first's work at 64 positions).
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 15) / (2 * longest * Dh));
  const int64_t B = int64_t(rows.size());
  at::parallel_for(0, B * H, grain, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> scores;                      // [slot + 1]: q·k/√Dh, then softmax numerators
    thread_local std::vector<std::pair<int64_t, int64_t>> runs;  // [begin, end) of the allowed keys
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t m = i / H, h = i % H, b = m % 2 == 0 ? m / 2 : B - 1 - m / 2;
      const RowCache& row = rows[b];
      const int64_t slot = row.slot, cap = row.capacity, qpos = row.pos[slot];
      scores.resize(slot + 1);
      runs.clear();
      const float* q = proj_.data() + b * proj + h * Dh;
      const float* keys = row.k[layer] + (h / G) * cap * Dh;  // this head's KV head [cap,Dh]
      const float* values = row.v[layer] + (h / G) * cap * Dh;
      const auto allowed = [&](int64_t s) {  // the mask of make_masks: real, causal, in window, or self
        const int64_t kpos = row.pos[s];
        return s == slot || (row.valid[s] && kpos <= qpos && (window == 0 || qpos - kpos < window));
      };
      float top = -std::numeric_limits<float>::infinity();
      for (int64_t s = 0; s <= slot;) {  // scores of each run of allowed keys, in one call
        if (!allowed(s)) {
          ++s;
          continue;
        }
        int64_t end = s + 1;
        while (end <= slot && allowed(end)) ++end;
        dot_products(keys + s * Dh, end - s, Dh, q, scores.data() + s);
        for (int64_t t = s; t < end; ++t) top = std::max(top, scores[t] *= inv_sqrt);
        runs.emplace_back(s, end);
        s = end;
      }
      float* y = attn_.data() + b * H * Dh + h * Dh;
      std::fill(y, y + Dh, 0.0f);
      float total = 0;
      for (const auto& [begin, end] : runs) {
        for (int64_t s = begin; s < end; ++s) total += scores[s] = std::exp(scores[s] - top);
        weighted_row_sum(values + begin * Dh, end - begin, Dh, scores.data() + begin, y);
      }
      float gate = 1.0f;  // the per-head output gate
      if (paper_block()) sigmoid(proj_.data() + b * proj + (H + 2 * Hkv) * Dh + h, 1, &gate);
      gate /= total;
      for (int64_t j = 0; j < Dh; ++j) y[j] *= gate;
    }
  });
}

void CpuDecoder::check_cache(const KVCache& cache, int64_t batch) const {
  if (cache.batch() != batch || int64_t(cache.k.size()) != config_.n_layers ||
      cache.k[0].size(3) != config_.head_dim() || cache.k[0].size(1) != config_.n_kv_heads ||
      cache.k[0].scalar_type() != torch::kFloat || !cache.k[0].device().is_cpu() || !cache.k[0].is_contiguous())
    throw Error("CpuDecoder: the KV cache does not match the model, batch or fp32 CPU layout");
}

CpuDecoder::RowCache CpuDecoder::row_view(KVCache& cache, int64_t b, int64_t slot) const {
  RowCache row;
  row.capacity = cache.capacity();
  row.slot = slot;
  const int64_t per_row = config_.n_kv_heads * row.capacity * config_.head_dim();
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    row.k.push_back(cache.k[l].data_ptr<float>() + b * per_row);
    row.v.push_back(cache.v[l].data_ptr<float>() + b * per_row);
  }
  row.pos = cache.slot_pos.data_ptr<int64_t>() + b * row.capacity;
  row.valid = cache.slot_valid.data_ptr<bool>() + b * row.capacity;
  return row;
}

void CpuDecoder::check_prompt(const torch::Tensor& tokens, const torch::Tensor& valid) {
  if (tokens.dim() != 2 || tokens.size(0) < 1 || tokens.size(1) < 1 || valid.sizes() != tokens.sizes())
    throw Error("CpuDecoder::prefill: tokens and valid must both be [B, T] with B, T >= 1");
}

void CpuDecoder::check_tokens(const torch::Tensor& tokens) const {
  const int64_t V = config_.vocab_size;
  for (int64_t b = 0; b < tokens.numel(); ++b) {
    const int64_t t = tokens.data_ptr<int64_t>()[b];
    if (t < 0 || t >= V)
      throw Error("token id " + std::to_string(t) + " outside the model vocabulary [0, " + std::to_string(V) + ")");
  }
}

void CpuDecoder::add_branch(const torch::Tensor& norm_out, int64_t B) {
  const int64_t D = config_.d_model;
  const float scale = float(scale_);
  for_rows(B, D, [&](int64_t b) {
    float* y = branch_.data() + b * D;
    if (paper_block()) rms_norm(y, ptr(norm_out), D, config_.norm_eps, y);
    for (int64_t i = 0; i < D; ++i) x_[b * D + i] += scale * y[i];
  });
}

int64_t CpuDecoder::proj_width() const {
  const int64_t gates = paper_block() ? config_.n_heads : 0;
  return (config_.n_heads + 2 * config_.n_kv_heads) * config_.head_dim() + gates;
}

const std::vector<float>& CpuDecoder::state() const {
  return config_.feedback_state == FeedbackState::PostNorm ? a_ : x_;
}

torch::Tensor CpuDecoder::prefill_pass(const torch::Tensor& tokens_in, const torch::Tensor& valid_in, KVCache& cache,
                                       const PassFeedback* feedback, torch::Tensor* states, PassLogits logits) {
  check_prompt(tokens_in, valid_in);
  const int64_t B = tokens_in.size(0), T = tokens_in.size(1), D = config_.d_model;
  check_cache(cache, B);
  auto tokens = tokens_in.to(torch::kLong).contiguous();
  check_tokens(tokens);
  torch::Tensor h_before, plain;  // [B,T,D] fp32, [B,T] bool
  if (feedback) {
    if (feedback->h_before.sizes() != torch::IntArrayRef{B, T, D} || feedback->plain.sizes() != tokens.sizes())
      throw Error("CpuDecoder::prefill_pass: the feedback must be [B, T, D] states and [B, T] plain flags");
    h_before = feedback->h_before.to(torch::kCPU, torch::kFloat).contiguous();
    plain = feedback->plain.to(torch::kCPU, torch::kBool).contiguous();
  }
  if (states && !(states->defined() && states->sizes() == torch::IntArrayRef{B, T, D} && states->is_contiguous() &&
                  states->device().is_cpu() && states->scalar_type() == torch::kFloat &&
                  !(h_before.defined() && states->is_alias_of(h_before))))
    *states = torch::empty({B, T, D}, torch::kFloat);  // written while h_before is read: never the same storage
  const auto valid = valid_in.to(torch::kBool).cpu();
  auto layout = Layout::left_padded(valid);
  // A chunk continues the positions before it; an empty (new or cleared) cache starts at 0.
  const auto start = cache.length == 0 ? torch::zeros({B}, torch::kLong) : cache.next_pos().clone();  // [B]
  layout.positions += start.view({B, 1});
  const int64_t first = cache.reserve(layout);
  const int64_t chunk = std::max<int64_t>(1, kPrefillRows / B);  // positions per forward
  const int64_t* ids = tokens.data_ptr<int64_t>();
  std::vector<float> h_rows;  // [B·m, D]: the fused rows' feedback inputs
  torch::Tensor out;          // [B,V] or [B,T,V]
  if (logits == PassLogits::All) out = torch::empty({B, T, config_.vocab_size}, torch::kFloat);
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t m = std::min(chunk, T - t0);
    std::vector<RowCache> rows;  // row b·m + i: sequence b at position t0 + i, in cache slot first + t0 + i
    std::vector<int64_t> tok;
    std::vector<char> row_plain(B * m, 1);
    if (feedback) h_rows.assign(B * m * D, 0.0f);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < m; ++i) {
        rows.push_back(row_view(cache, b, first + t0 + i));
        tok.push_back(ids[b * T + t0 + i]);
        if (!feedback) continue;
        row_plain[b * m + i] = plain.data_ptr<bool>()[b * T + t0 + i];
        std::memcpy(h_rows.data() + (b * m + i) * D, h_before.data_ptr<float>() + (b * T + t0 + i) * D,
                    D * sizeof(float));
      }
    forward(tok.data(), row_plain, feedback ? h_rows.data() : nullptr, rows);
    if (states)
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(states->data_ptr<float>() + (b * T + t0) * D, state().data() + b * m * D, m * D * sizeof(float));
    if (logits == PassLogits::All)  // row b·m + i is sequence b at position t0 + i
      out.narrow(1, t0, m).copy_(this->logits(0, B * m, 1).view({B, m, -1}));
    if (t0 + m < T) continue;
    auto h = torch::empty({B, D}, torch::kFloat);  // each sequence's state at its last position
    for (int64_t b = 0; b < B; ++b)
      std::memcpy(h.data_ptr<float>() + b * D, state().data() + (b * m + m - 1) * D, D * sizeof(float));
    // A row of pads only keeps its next position.
    cache.advance(h, tokens.select(1, T - 1), start + valid.sum(1));
    if (logits == PassLogits::Last) out = this->logits(m - 1, B, m);
  }
  return out;
}

torch::Tensor CpuDecoder::step(const torch::Tensor& tokens_in, DecodeMode mode, KVCache& cache) {
  const int64_t B = tokens_in.numel(), D = config_.d_model;
  check_cache(cache, B);
  auto tokens = tokens_in.to(torch::kLong).contiguous();
  check_tokens(tokens);
  auto last = cache.last_token().contiguous();
  std::vector<char> plain(B);
  for (int64_t b = 0; b < B; ++b)
    plain[b] = mode == DecodeMode::Standard || last.data_ptr<int64_t>()[b] == config_.doc_separator_id;
  auto h_prev = cache.h_prev().contiguous();
  const int64_t slot = cache.reserve(Layout{cache.next_pos().view({-1, 1}), {}});
  std::vector<RowCache> rows;
  for (int64_t b = 0; b < B; ++b) rows.push_back(row_view(cache, b, slot));
  forward(tokens.data_ptr<int64_t>(), plain, ptr(h_prev), rows);
  cache.advance_step(torch::from_blob(const_cast<float*>(state().data()), {B, D}, torch::kFloat), tokens);
  return this->logits(0, B, 1);
}

torch::Tensor CpuDecoder::step(const torch::Tensor& tokens_in, const std::vector<DecodeMode>& modes,
                               const std::vector<KVCache*>& caches) {
  const int64_t B = tokens_in.numel(), D = config_.d_model;
  if (int64_t(modes.size()) != B || int64_t(caches.size()) != B)
    throw Error("CpuDecoder::step: " + std::to_string(B) + " tokens but " + std::to_string(modes.size()) +
                " modes and " + std::to_string(caches.size()) + " caches");
  auto tokens = tokens_in.to(torch::kLong).contiguous();
  check_tokens(tokens);
  std::vector<char> plain(B);
  std::vector<float> h_prev(B * D);
  for (int64_t b = 0; b < B; ++b) {
    KVCache& cache = *caches[b];
    check_cache(cache, 1);  // a sequence's own cache
    cache.check_room(1);    // before any cache claims its slot
    plain[b] = modes[b] == DecodeMode::Standard || cache.last_token().item<int64_t>() == config_.doc_separator_id;
    auto h = cache.h_prev().to(torch::kFloat).contiguous();
    std::memcpy(h_prev.data() + b * D, ptr(h), D * sizeof(float));
  }
  std::vector<RowCache> rows;
  for (int64_t b = 0; b < B; ++b) {
    KVCache& cache = *caches[b];
    rows.push_back(row_view(cache, 0, cache.reserve(Layout{cache.next_pos().view({-1, 1}), {}})));
  }
  forward(tokens.data_ptr<int64_t>(), plain, h_prev.data(), rows);
  for (int64_t b = 0; b < B; ++b) {
    KVCache& cache = *caches[b];
    cache.advance_step(torch::from_blob(const_cast<float*>(state().data()) + b * D, {1, D}, torch::kFloat),
                       tokens.narrow(0, b, 1));
  }
  return logits(0, B, 1);
}

void CpuDecoder::forward(const int64_t* tok, const std::vector<char>& plain, const float* h_prev,
                         const std::vector<RowCache>& rows) {
  const int64_t B = plain.size(), D = config_.d_model, F = config_.d_ff;
  const int64_t H = config_.n_heads, Hkv = config_.n_kv_heads, Dh = config_.head_dim();
  const int64_t proj = proj_width();
  reserve_rows(B);

  // The input (FBT::plain_input, FBT::fused_input): plain RMSNorm_in(e) (block llama: the raw e)
  // or the latent-feedback fusion (paper Eq. 4) of RMSNorm_in(e) with h_prev; fusion residual
  // adds g to the plain input, without a norm.
  for_rows(B, D, [&](int64_t b) {
    const float* e = branch_.data() + b * D;
    if (embedding_.defined())
      e = ptr(embedding_) + tok[b] * D;
    else
      head_.quant[0].blocks.dequantize_row(
          tok[b], branch_.data() + b * D);  // a tied embedding is the quantised head (as llama.cpp's get_rows)
    float* e_n = e_n_.data() + b * D;
    rms_norm(e, ptr(input_norm_), D, config_.norm_eps, e_n);
    const float* plain_in = paper_block() ? e_n : e;
    std::copy(plain_in, plain_in + D, x_.data() + b * D);
  });
  if (std::find(plain.begin(), plain.end(), 0) != plain.end()) {
    linear(h_prev, B, w_u_, fused_a_.data());       // W_U h_prev
    linear(e_n_.data(), B, w_g_, fused_b_.data());  // W_G e_n
    for_rows(B, D, [&](int64_t b) {
      if (plain[b]) return;
      float* g = fused_a_.data() + b * D;
      float* gate = fused_b_.data() + b * D;
      sigmoid(gate, D, gate);
      for (int64_t i = 0; i < D; ++i) {
        g[i] *= gate[i];
        if (config_.fusion == Fusion::GluPlusToken) g[i] += e_n_[b * D + i];
      }
      float* x = x_.data() + b * D;  // holds the plain input
      if (config_.fusion == Fusion::Residual)
        for (int64_t i = 0; i < D; ++i) x[i] += g[i];
      else
        rms_norm(g, ptr(input_norm_), D, config_.norm_eps, x);
    });
  }

  // RoPE angles of each row's position, shared by its heads and layers.
  for_rows(B, 16 * Dh, [&](int64_t b) {  // (a sine and a cosine: ~16 values' work each)
    const int64_t p = rows[b].pos[rows[b].slot];
    float* cos_sin = rope_.data() + b * Dh;
    for (int64_t i = 0; i < Dh / 2; ++i) {
      const float angle = float(p) * inv_freq_[i];
      cos_sin[i] = std::cos(angle);
      cos_sin[Dh / 2 + i] = std::sin(angle);
    }
  });

  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const Layer& L = layers_[l];
    // Attention branch: x += s · norm_out(Wo · gate ⊙ attention(q, K, V)) (block llama: x += Wo · attention).
    for_rows(B, D, [&](int64_t b) {
      rms_norm(x_.data() + b * D, ptr(L.attn_norm_in), D, config_.norm_eps, a_.data() + b * D);
    });
    linear(a_.data(), B, L.qkvg, proj_.data());
    for_rows(B, proj, [&](int64_t b) {
      float* row = proj_.data() + b * proj;
      const RowCache& cache = rows[b];
      const float* cos_sin = rope_.data() + b * Dh;
      for (int64_t h = 0; h < H; ++h) {
        if (config_.qk_norm) rms_norm(row + h * Dh, ptr(L.q_norm), Dh, config_.norm_eps, row + h * Dh);
        rope(row + h * Dh, Dh, cos_sin);
      }
      for (int64_t h = 0; h < Hkv; ++h) {
        float* k = row + (H + h) * Dh;
        if (config_.qk_norm) rms_norm(k, ptr(L.k_norm), Dh, config_.norm_eps, k);
        rope(k, Dh, cos_sin);
        const int64_t at = (h * cache.capacity + cache.slot) * Dh;
        std::memcpy(cache.k[l] + at, k, Dh * sizeof(float));
        std::memcpy(cache.v[l] + at, row + (H + Hkv + h) * Dh, Dh * sizeof(float));
      }
    });
    attend(l, rows);
    linear(attn_.data(), B, L.wo, branch_.data());
    add_branch(L.attn_norm_out, B);
    // MLP branch: x += s · norm_out(W_down(silu(W_gate a) ⊙ W_up a)) (block llama: no norm_out, s = 1).
    for_rows(B, D, [&](int64_t b) {
      rms_norm(x_.data() + b * D, ptr(L.mlp_norm_in), D, config_.norm_eps, a_.data() + b * D);
    });
    linear(a_.data(), B, L.gate_up, gate_up_.data());
    for_rows(B, 4 * F, [&](int64_t b) {  // (an exp per value)
      const float* gu = gate_up_.data() + b * 2 * F;
      float* act = act_.data() + b * F;
      sigmoid(gu, F, act);
      for (int64_t i = 0; i < F; ++i) act[i] = gu[i] * act[i] * gu[F + i];
    });
    linear(act_.data(), B, L.w_down, branch_.data());
    add_branch(L.mlp_norm_out, B);
  }

  // The head's input and the feedback state: FinalNorm(x) in a_; h_prev = FinalNorm(x) or x.
  for_rows(B, D,
           [&](int64_t b) { rms_norm(x_.data() + b * D, ptr(final_norm_), D, config_.norm_eps, a_.data() + b * D); });
}

torch::Tensor CpuDecoder::logits(int64_t first, int64_t count, int64_t stride) {
  const int64_t D = config_.d_model;
  if (stride != 1)  // gather the rows into the first `count` of a_ (in order: row i's target ≤ its source)
    for (int64_t i = 0; i < count; ++i)
      std::memmove(a_.data() + i * D, a_.data() + (first + i * stride) * D, D * sizeof(float));
  const float* in = a_.data() + (stride == 1 ? first * D : 0);
  auto out = torch::empty({count, config_.vocab_size}, torch::kFloat);
  linear(in, count, head_, out.data_ptr<float>());  // logits = FinalNorm(x) · Eᵀ (or the untied head)
  return out;
}

}  // namespace fbt
