// Q8Matrix and q8_linear (include/fbt/infer/q8_gemv.h): the block format of ggml's Q8_0 and a
// matrix-vector product that streams each weight row once per group of input rows.
#include "fbt/infer/q8_gemv.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include <ATen/Parallel.h>

#include "fbt/util/cpu_features.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

constexpr int64_t kBlock = Q8Matrix::kBlock;

/// Quantises one block of 32 values: q = round(v/d), d = max|v|/127 (0 for an all-zero block).
/// Returns d as computed in fp32 (the caller rounds it to fp16 for weights).
float quantize_block(const float* v, int8_t* q) {
  float amax = 0;
  for (int64_t i = 0; i < kBlock; ++i) amax = std::max(amax, std::abs(v[i]));
  const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int64_t i = 0; i < kBlock; ++i) q[i] = int8_t(std::round(v[i] * id));
  return d;
}

/// The input rows of one product: fp32 x [B, K], and for Int8 activations their blocks.
struct Inputs {
  const float* x;
  const int8_t* xq;  ///< [B, K]
  const float* dx;   ///< [B, K/32], fp32 scales
  int64_t K;
};

/// Adds 8 partial sums pairwise (4+4, 2+2, 1+1).
inline float reduce8(float* a) {
  for (int half = 4; half >= 1; half /= 2)
    for (int j = 0; j < half; ++j) a[j] += a[j + half];
  return a[0];
}

// ---- Portable kernel: block i goes to partial sum i mod 8. ----

float dot_portable(const Q8Matrix& W, int64_t n, const Inputs& in, int64_t b, Q8Activations act) {
  const int64_t K = in.K, nb = K / kBlock;
  float acc[8] = {};
  for (int64_t ib = 0; ib < nb; ++ib) {
    const BlockQ8& w = W.blocks[n * nb + ib];
    const float dw = float(w.d);
    float block;
    if (act == Q8Activations::Int8) {
      const int8_t* xq = in.xq + b * K + ib * kBlock;
      int32_t s = 0;
      for (int64_t i = 0; i < kBlock; ++i) s += int32_t(w.q[i]) * int32_t(xq[i]);
      block = float(s) * (dw * in.dx[b * nb + ib]);
    } else {
      const float* x = in.x + b * K + ib * kBlock;
      float s = 0;
      for (int64_t i = 0; i < kBlock; ++i) s += float(w.q[i]) * x[i];
      block = s * dw;
    }
    acc[ib % 8] += block;
  }
  return reduce8(acc);
}

void rows_portable(const Q8Matrix& W, const Inputs& in, int64_t B, float* y, int64_t n0, int64_t n1, Q8Activations act) {
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t b = 0; b < B; ++b) y[b * W.rows + n] = dot_portable(W, n, in, b, act);
}

// ---- AVX2 kernel: 8 partial sums per dot product in one register. ----

/// Block ib of weight row wq against int8 input block xv: the 8 int32 sums of 4 products each,
/// as floats (|w|·sign(w)x in maddubs cannot saturate: |q| ≤ 127, so 2·127² < 2¹⁵).
__attribute__((target("avx2,fma"))) inline __m256 block_dot_i8(__m256i wv, __m256i xv) {
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

/// 8 int8 values at q as fp32.
__attribute__((target("avx2,fma"))) inline __m256 widen8(const int8_t* q) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
}

/// A weight block (32 int8 at wq) against 32 fp32 inputs: 8 partial sums.
__attribute__((target("avx2,fma"))) inline __m256 block_dot_f32(const int8_t* wq, const float* x) {
  __m256 s = _mm256_mul_ps(widen8(wq), _mm256_loadu_ps(x));
  s = _mm256_fmadd_ps(widen8(wq + 8), _mm256_loadu_ps(x + 8), s);
  s = _mm256_fmadd_ps(widen8(wq + 16), _mm256_loadu_ps(x + 16), s);
  return _mm256_fmadd_ps(widen8(wq + 24), _mm256_loadu_ps(x + 24), s);
}

/// y[b0 + r, n] for the BR input rows b0.. and weight row n: one 8-lane accumulator per dot
/// product, blocks in order, so grouping changes no bit. One weight row at a time is one stream of
/// memory (measured fastest once the weights come from DRAM).
template <int BR, Q8Activations ACT>
__attribute__((target("avx2,fma,f16c"))) inline void tile_avx2(const Q8Matrix& W, int64_t n, const Inputs& in,
                                                               int64_t b0, float* y) {
  const int64_t K = in.K, nb = K / kBlock;
  __m256 acc[BR];
  for (int r = 0; r < BR; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const BlockQ8& w = W.blocks[n * nb + ib];
    const float dw = _cvtsh_ss(w.d.x);
    if constexpr (ACT == Q8Activations::Int8) {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.q));
#pragma GCC unroll 4
      for (int r = 0; r < BR; ++r) {
        const int64_t b = b0 + r;
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in.xq + b * K + ib * kBlock));
        acc[r] = _mm256_fmadd_ps(block_dot_i8(wv, xv), _mm256_set1_ps(dw * in.dx[b * nb + ib]), acc[r]);
      }
    } else {
#pragma GCC unroll 4
      for (int r = 0; r < BR; ++r)
        acc[r] = _mm256_fmadd_ps(block_dot_f32(w.q, in.x + (b0 + r) * K + ib * kBlock), _mm256_set1_ps(dw), acc[r]);
    }
  }
  for (int r = 0; r < BR; ++r) {
    alignas(32) float a[8];
    _mm256_store_ps(a, acc[r]);
    y[(b0 + r) * W.rows + n] = reduce8(a);
  }
}

template <int BR, Q8Activations ACT>
__attribute__((target("avx2,fma,f16c"))) void group_avx2(const Q8Matrix& W, const Inputs& in, int64_t b0, float* y,
                                                         int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) tile_avx2<BR, ACT>(W, n, in, b0, y);
}

template <Q8Activations ACT>
__attribute__((target("avx2,fma,f16c"))) void rows_avx2(const Q8Matrix& W, const Inputs& in, int64_t B, float* y,
                                                        int64_t n0, int64_t n1) {
  int64_t b = 0;
  for (; b + 4 <= B; b += 4) group_avx2<4, ACT>(W, in, b, y, n0, n1);
  if (b + 2 <= B) group_avx2<2, ACT>(W, in, b, y, n0, n1), b += 2;
  if (b < B) group_avx2<1, ACT>(W, in, b, y, n0, n1);
}

}  // namespace

Q8Matrix Q8Matrix::quantize(const float* W, int64_t N, int64_t K) {
  if (K <= 0 || K % kBlock != 0)
    throw Error("Q8_0 needs rows of a positive multiple of 32 values (got " + std::to_string(K) + ")");
  Q8Matrix m;
  m.rows = N;
  m.cols = K;
  m.blocks.resize(N * K / kBlock);
  for (int64_t i = 0; i < N * K / kBlock; ++i) m.blocks[i].d = c10::Half(quantize_block(W + i * kBlock, m.blocks[i].q));
  return m;
}

void Q8Matrix::dequantize_row(int64_t n, float* out) const {
  const int64_t nb = cols / kBlock;
  for (int64_t ib = 0; ib < nb; ++ib) {
    const BlockQ8& b = blocks[n * nb + ib];
    const float d = float(b.d);
    for (int64_t i = 0; i < kBlock; ++i) out[ib * kBlock + i] = d * float(b.q[i]);
  }
}

void q8_linear(const float* x, int64_t B, const Q8Matrix& W, float* y, Q8Activations act) {
  const int64_t K = W.cols, nb = K / kBlock;
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> dx;
  if (act == Q8Activations::Int8) {
    xq.resize(B * K);
    dx.resize(B * nb);
    for (int64_t i = 0; i < B * nb; ++i) dx[i] = quantize_block(x + i * kBlock, xq.data() + i * kBlock);
  }
  const Inputs in{x, xq.data(), dx.data(), K};
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / K);  // ~64 KiB of weights per task
  at::parallel_for(0, W.rows, grain, [&](int64_t n0, int64_t n1) {
    if (!cpu_has_avx2()) return rows_portable(W, in, B, y, n0, n1, act);
    if (act == Q8Activations::Int8) rows_avx2<Q8Activations::Int8>(W, in, B, y, n0, n1);
    else rows_avx2<Q8Activations::Fp32>(W, in, B, y, n0, n1);
  });
}

}  // namespace fbt
