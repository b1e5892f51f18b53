// batch_invariant_linear: fixed-order dot products streaming each weight row once per group of
// input rows. An AVX2+FMA kernel where the CPU has it (chosen once, at run time), else portable
// code compiled with -ffp-contract=off (CMakeLists.txt).
#include "fbt/infer/batch_gemv.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include <ATen/Parallel.h>

#include "fbt/infer/parallel_probe.h"
#include "fbt/infer/quant_gemv.h"
#include "fbt/util/cpu_features.h"

namespace fbt {
namespace {

constexpr int64_t kLanes = 16;  // partial sums per dot product
/// Software prefetch: the next weight row, this many floats beyond the current column (measured).
constexpr int64_t kPrefetchAhead = 64;

/// Adds the 16 partial sums pairwise (8+8, 4+4, 2+2, 1+1): the fixed final order of batch_gemv.h.
inline float reduce_lanes(float* a) {
  for (int64_t half = kLanes / 2; half >= 1; half /= 2)
    for (int64_t j = 0; j < half; ++j) a[j] += a[j + half];
  return a[0];
}

// ---- Portable kernel: lane j accumulates w[k]·x[k] for k ≡ j (mod 16), multiply then add. ----

/// out[r] = Σ_k w[k]·xs[r][k] for R rows.
template <int R>
inline void dots_portable(const float* w, const float* const* xs, int64_t K, float* out) {
  float acc[R][kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes)
    for (int r = 0; r < R; ++r)
      for (int64_t j = 0; j < kLanes; ++j) acc[r][j] += w[k + j] * xs[r][k + j];
  for (int r = 0; r < R; ++r) {
    for (int64_t j = 0; k + j < K; ++j) acc[r][j] += w[k + j] * xs[r][k + j];
    out[r] = reduce_lanes(acc[r]);
  }
}

void rows_portable(const float* x, int64_t B, int64_t K, const float* W, int64_t ldy, float* y, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* w = W + n * K;
    int64_t b = 0;
    for (; b + 4 <= B; b += 4) {
      const float* xs[4] = {x + b * K, x + (b + 1) * K, x + (b + 2) * K, x + (b + 3) * K};
      float out[4];
      dots_portable<4>(w, xs, K, out);
      for (int r = 0; r < 4; ++r) y[(b + r) * ldy + n] = out[r];
    }
    for (; b < B; ++b) {
      const float* xs[1] = {x + b * K};
      dots_portable<1>(w, xs, K, y + b * ldy + n);
    }
  }
}

// ---- AVX2 kernel: lane j accumulates fma(w[k], x[k], ·) for k ≡ j (mod 16), in two registers. ----

/// y[b, n] for the BR input rows xs and the weight row w: each dot product in two 8-lane FMA
/// accumulators, then the tail and the fixed reduction. One weight row at a time is one stream of
/// memory (measured fastest once the weights come from DRAM); the next row is prefetched ahead.
/// Every dot product takes the same steps whatever BR is, so grouping changes no bit.
template <int BR>
__attribute__((target("avx2,fma"))) inline void tile_avx2(const float* w, int64_t K, const float* const* xs,
                                                          float* const* ys) {
  __m256 acc[BR][2];
  for (int r = 0; r < BR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    _mm_prefetch(reinterpret_cast<const char*>(w + K + k + kPrefetchAhead), _MM_HINT_T0);
    const __m256 w0 = _mm256_loadu_ps(w + k), w1 = _mm256_loadu_ps(w + k + 8);
#pragma GCC unroll 4
    for (int r = 0; r < BR; ++r) {
      acc[r][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xs[r] + k), acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xs[r] + k + 8), acc[r][1]);
    }
  }
  for (int r = 0; r < BR; ++r) {
    if (k == K) {  // reduce_lanes' order in registers: 8+8, 4+4, 2+2, 1+1
      const __m256 v = _mm256_add_ps(acc[r][0], acc[r][1]);
      __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
      h = _mm_add_ps(h, _mm_movehl_ps(h, h));
      h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
      *ys[r] = _mm_cvtss_f32(h);
      continue;
    }
    alignas(32) float a[kLanes];
    _mm256_store_ps(a, acc[r][0]);
    _mm256_store_ps(a + 8, acc[r][1]);
    for (int64_t j = 0; k + j < K; ++j) a[j] = std::fma(w[k + j], xs[r][k + j], a[j]);
    *ys[r] = reduce_lanes(a);
  }
}

/// The rows n0..n1 of y for BR input rows.
template <int BR>
__attribute__((target("avx2,fma"))) void group_avx2(const float* x, int64_t K, const float* W, int64_t ldy, float* y,
                                                    int64_t n0, int64_t n1) {
  const float* xs[BR];
  float* ys[BR];
  for (int r = 0; r < BR; ++r) xs[r] = x + r * K;
  for (int64_t n = n0; n < n1; ++n) {
    for (int r = 0; r < BR; ++r) ys[r] = y + r * ldy + n;
    tile_avx2<BR>(W + n * K, K, xs, ys);
  }
}

__attribute__((target("avx2,fma"))) void rows_avx2(const float* x, int64_t B, int64_t K, const float* W, int64_t ldy,
                                                   float* y, int64_t n0, int64_t n1) {
  int64_t b = 0;
  for (; b + 4 <= B; b += 4) group_avx2<4>(x + b * K, K, W, ldy, y + b * ldy, n0, n1);
  if (b + 2 <= B) group_avx2<2>(x + b * K, K, W, ldy, y + b * ldy, n0, n1), b += 2;
  if (b < B) group_avx2<1>(x + b * K, K, W, ldy, y + b * ldy, n0, n1);
}

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int64_t n) {
  float out;
  const float* xs[1] = {b};
  float* ys[1] = {&out};
  tile_avx2<1>(a, n, xs, ys);
  return out;
}

}  // namespace

float dot_product(const float* a, const float* b, int64_t n) {
  if (cpu_has_avx2()) return dot_avx2(a, b, n);
  float out;
  const float* xs[1] = {b};
  dots_portable<1>(a, xs, n, &out);
  return out;
}

void batch_invariant_linear(const float* x, int64_t B, int64_t K, const float* W, int64_t N, float* y, int64_t ldy) {
  // Grain: at least ~64 KiB of weights per task, so small products stay on one thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(K, 1));
  const auto rows = cpu_has_avx2() ? rows_avx2 : rows_portable;
  at::parallel_for(0, N, grain, [&](int64_t n0, int64_t n1) { rows(x, B, K, W, ldy, y, n0, n1); });
}

int decode_kernel_threads() { return std::min(detail::parallel_for_threads_here(), quant_kernel_threads()); }

}  // namespace fbt
