// batch_invariant_linear: fixed-order dot products in tiles of weight rows × input rows. AVX-512
// and AVX2+FMA kernels where the CPU has them (chosen at run time), else portable code compiled
// with -ffp-contract=off (CMakeLists.txt).
#include "fbt/infer/batch_gemv.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include <ATen/Parallel.h>

#include "fbt/infer/gemm_linear.h"
#include "fbt/infer/parallel_probe.h"
#include "fbt/infer/quant_gemv.h"
#include "fbt/util/cpu_features.h"

namespace fbt {
namespace {

constexpr int64_t kLanes = 16;  // partial sums per dot product
/// Software prefetch of tiles of several weight rows (side by side they defeat the hardware
/// prefetcher): the next tile's weights (the NR rows below, contiguous) as one sequential stream, NR
/// cache lines per step of the tile's loop, this many floats ahead. A single row streams fastest
/// with no software prefetch at all (measured: ~+15% at batch 1 over prefetching the next row).
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

// ---- SIMD kernels: lane j of a dot product accumulates fma(w[k], x[k], ·) for k ≡ j (mod 16). ----
// A tile is NR weight rows × BR input rows: each loaded weight vector meets BR inputs and each
// input vector NR weight rows, so a tile does NR·BR fused multiply-adds per NR + BR loads, and its
// NR·BR dot products run as independent chains. Every dot product takes the same steps whatever
// the tile, so tiling changes no bit.

/// The 16 partial sums lo (lanes 0..7) and hi (lanes 8..15) added in reduce_lanes' order.
__attribute__((target("avx2,fma"))) inline float reduce_avx2(__m256 lo, __m256 hi) {
  const __m256 v = _mm256_add_ps(lo, hi);                                         // 8+8
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // 4+4
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));                                         // 2+2
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));                                     // 1+1
  return _mm_cvtss_f32(h);
}

/// y[b·ldy + r] = w_r · x_b for r < NR, b < BR: w_r = w + r·K, x_b = x + b·K. The 16 partial sums
/// of a dot product in two 8-lane registers; the tail (K mod 16) one scalar fma per lane.
template <int NR, int BR>
__attribute__((target("avx2,fma"))) void tile_avx2(const float* w, int64_t K, const float* x, float* y, int64_t ldy) {
  __m256 acc[NR][BR][2];
  for (int r = 0; r < NR; ++r)
    for (int b = 0; b < BR; ++b) acc[r][b][0] = acc[r][b][1] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      if constexpr (NR > 1)
        _mm_prefetch(reinterpret_cast<const char*>(w + NR * K + NR * k + r * kLanes + kPrefetchAhead), _MM_HINT_T0);
      const __m256 w0 = _mm256_loadu_ps(w + r * K + k), w1 = _mm256_loadu_ps(w + r * K + k + 8);
#pragma GCC unroll 4
      for (int b = 0; b < BR; ++b) {
        acc[r][b][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + b * K + k), acc[r][b][0]);
        acc[r][b][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + b * K + k + 8), acc[r][b][1]);
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int b = 0; b < BR; ++b) {
      if (k == K) {
        y[b * ldy + r] = reduce_avx2(acc[r][b][0], acc[r][b][1]);
        continue;
      }
      alignas(32) float a[kLanes];
      _mm256_store_ps(a, acc[r][b][0]);
      _mm256_store_ps(a + 8, acc[r][b][1]);
      for (int64_t j = 0; k + j < K; ++j) a[j] = std::fma(w[r * K + k + j], x[b * K + k + j], a[j]);
      y[b * ldy + r] = reduce_lanes(a);
    }
}

/// As tile_avx2, the 16 partial sums in one 16-lane register; the tail a masked fma (lanes past K
/// keep their sums), then the same reduction.
template <int NR, int BR>
__attribute__((target("avx512f,avx2,fma"))) void tile_avx512(const float* w, int64_t K, const float* x, float* y,
                                                             int64_t ldy) {
  __m512 acc[NR][BR];
  for (int r = 0; r < NR; ++r)
    for (int b = 0; b < BR; ++b) acc[r][b] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    __m512 xv[BR];
    for (int b = 0; b < BR; ++b) xv[b] = _mm512_loadu_ps(x + b * K + k);
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      if constexpr (NR > 1)
        _mm_prefetch(reinterpret_cast<const char*>(w + NR * K + NR * k + r * kLanes + kPrefetchAhead), _MM_HINT_T0);
      const __m512 wv = _mm512_loadu_ps(w + r * K + k);
#pragma GCC unroll 8
      for (int b = 0; b < BR; ++b) acc[r][b] = _mm512_fmadd_ps(wv, xv[b], acc[r][b]);
    }
  }
  if (k < K) {
    const __mmask16 m = __mmask16((1u << (K - k)) - 1);
    __m512 xv[BR];
    for (int b = 0; b < BR; ++b) xv[b] = _mm512_maskz_loadu_ps(m, x + b * K + k);
    for (int r = 0; r < NR; ++r) {
      const __m512 wv = _mm512_maskz_loadu_ps(m, w + r * K + k);
      for (int b = 0; b < BR; ++b) acc[r][b] = _mm512_mask3_fmadd_ps(wv, xv[b], acc[r][b], m);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int b = 0; b < BR; ++b) {
      alignas(64) float a[kLanes];  // (GCC 12's _mm512_castps512_ps256 warns falsely, PR 105593)
      _mm512_store_ps(a, acc[r][b]);
      y[b * ldy + r] = reduce_avx2(_mm256_load_ps(a), _mm256_load_ps(a + 8));
    }
}

/// As tile_avx2 in portable code (multiply, then add).
template <int NR, int BR>
void tile_portable(const float* w, int64_t K, const float* x, float* y, int64_t ldy) {
  const float* xs[BR];
  for (int b = 0; b < BR; ++b) xs[b] = x + b * K;
  for (int r = 0; r < NR; ++r) {
    float out[BR];
    dots_portable<BR>(w + r * K, xs, K, out);
    for (int b = 0; b < BR; ++b) y[b * ldy + r] = out[b];
  }
}

// The kernels and their tile sizes (NR·BR dot products in registers). At batch 1 one weight row at
// a time in AVX2's two chains streams fastest, on AVX-512 CPUs too (measured against 4-row tiles
// and one 16-lane chain: ~10–20% ahead from memory and from cache). For more inputs AVX-512's 32
// registers hold 4×6 tiles, each weight vector used six times from a register (prefill: ~1.0–1.3×
// OpenBLAS sgemm at B = 64); AVX2's 16 registers gain nothing from tiles (measured), so there one
// weight row is streamed past four inputs at a time.
template <int NR, int BR>
struct Avx512 {
  static constexpr int kRows = NR, kBatch = BR;
  template <int R, int C>
  static void tile(const float* w, int64_t K, const float* x, float* y, int64_t ldy) {
    tile_avx512<R, C>(w, K, x, y, ldy);
  }
};
template <int NR, int BR>
struct Avx2 {
  static constexpr int kRows = NR, kBatch = BR;
  template <int R, int C>
  static void tile(const float* w, int64_t K, const float* x, float* y, int64_t ldy) {
    tile_avx2<R, C>(w, K, x, y, ldy);
  }
};
struct Portable {
  static constexpr int kRows = 1, kBatch = 4;
  template <int R, int C>
  static void tile(const float* w, int64_t K, const float* x, float* y, int64_t ldy) {
    tile_portable<R, C>(w, K, x, y, ldy);
  }
};

/// y[b, r] for the NR weight rows w and every input row b < B: tiles of BR rows, then the rest.
template <class Kernel, int NR, int BR>
void tile_rows(const float* w, int64_t K, const float* x, int64_t B, float* y, int64_t ldy) {
  int64_t b = 0;
  for (; b + BR <= B; b += BR) Kernel::template tile<NR, BR>(w, K, x + b * K, y + b * ldy, ldy);
  if constexpr (BR > 1)
    if (b < B) tile_rows<Kernel, NR, BR - 1>(w, K, x + b * K, B - b, y + b * ldy, ldy);
}

/// The rows n0..n1 of y: kRows weight rows at a time (each met by every input row while it is in
/// L1), then single rows.
template <class Kernel>
void rows(const float* x, int64_t B, int64_t K, const float* W, int64_t ldy, float* y, int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + Kernel::kRows <= n1; n += Kernel::kRows)
    tile_rows<Kernel, Kernel::kRows, Kernel::kBatch>(W + n * K, K, x, B, y + n, ldy);
  for (; n < n1; ++n) tile_rows<Kernel, 1, Kernel::kBatch>(W + n * K, K, x, B, y + n, ldy);
}

// The entry points per kernel: `flatten` inlines the loops' tiles into these (a tile compiled for
// AVX2 or AVX-512 cannot inline into the generic loops otherwise, and a call per tile costs ~10% at
// batch 1, measured).
using RowsFn = void (*)(const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t, int64_t);
__attribute__((target("avx512f,avx2,fma"), flatten)) void rows_avx512(const float* x, int64_t B, int64_t K,
                                                                      const float* W, int64_t ldy, float* y, int64_t n0,
                                                                      int64_t n1) {
  rows<Avx512<4, 6>>(x, B, K, W, ldy, y, n0, n1);
}
__attribute__((target("avx2,fma"), flatten)) void rows_avx2(const float* x, int64_t B, int64_t K, const float* W,
                                                            int64_t ldy, float* y, int64_t n0, int64_t n1) {
  rows<Avx2<1, 4>>(x, B, K, W, ldy, y, n0, n1);
}
__attribute__((flatten)) void rows_portable(const float* x, int64_t B, int64_t K, const float* W, int64_t ldy, float* y,
                                            int64_t n0, int64_t n1) {
  rows<Portable>(x, B, K, W, ldy, y, n0, n1);
}

enum class Isa { Avx512, Avx2, Portable };

/// The best kernel this CPU runs, chosen once.
Isa isa() {
  static const Isa chosen = cpu_has_avx512() ? Isa::Avx512 : cpu_has_avx2() ? Isa::Avx2 : Isa::Portable;
  return chosen;
}

/// The rows kernel of this CPU: AVX-512's tiles of 4 weight rows where `tiles` (several inputs, or
/// short rows from cache), else one row at a time (a batch-1 stream from memory; AVX2, portable).
RowsFn rows_kernel(bool tiles) {
  return isa() == Isa::Avx512 && tiles ? rows_avx512 : isa() == Isa::Portable ? rows_portable : rows_avx2;
}

}  // namespace

void dot_products(const float* rows, int64_t n, int64_t K, const float* x, float* out) {
  rows_kernel(/*tiles=*/true)(x, 1, K, rows, 1, out, 0, n);
}

namespace {

/// Columns [j0, K) of weighted_row_sum, one std::fma at a time (the portable code, and the SIMD
/// kernels' last columns).
inline void weighted_columns_scalar(const float* rows, int64_t n, int64_t K, const float* weights, float* y,
                                    int64_t j0) {
  for (int64_t j = j0; j < K; ++j)
    for (int64_t i = 0; i < n; ++i)
      if (weights[i] != 0.0f) y[j] = std::fma(weights[i], rows[i * K + j], y[j]);
}

/// Columns [0, 8·A) of weighted_row_sum (rows and y already offset to the block) in A 8-lane chains.
template <int A>
__attribute__((target("avx2,fma"))) inline void weighted_columns_avx2(const float* rows, int64_t n, int64_t K,
                                                                      const float* weights, float* y) {
  __m256 acc[A];
  for (int a = 0; a < A; ++a) acc[a] = _mm256_loadu_ps(y + 8 * a);
  for (int64_t i = 0; i < n; ++i) {
    if (weights[i] == 0.0f) continue;
    const __m256 w = _mm256_set1_ps(weights[i]);
#pragma GCC unroll 8
    for (int a = 0; a < A; ++a) acc[a] = _mm256_fmadd_ps(w, _mm256_loadu_ps(rows + i * K + 8 * a), acc[a]);
  }
  for (int a = 0; a < A; ++a) _mm256_storeu_ps(y + 8 * a, acc[a]);
}

/// weighted_row_sum with AVX2 (AVX-512 CPUs too: a head of 64 columns is eight 8-lane chains or
/// four 16-lane ones, and either way one fused multiply-add per chain per row): blocks of 64
/// columns, then of 8, then one column at a time (the same fused steps, scalar).
__attribute__((target("avx2,fma"))) void weighted_row_sum_avx2(const float* rows, int64_t n, int64_t K,
                                                               const float* weights, float* y) {
  int64_t j = 0;
  for (; j + 64 <= K; j += 64) weighted_columns_avx2<8>(rows + j, n, K, weights, y + j);
  for (; j + 8 <= K; j += 8) weighted_columns_avx2<1>(rows + j, n, K, weights, y + j);
  weighted_columns_scalar(rows, n, K, weights, y, j);
}

}  // namespace

void weighted_row_sum(const float* rows, int64_t n, int64_t K, const float* weights, float* y) {
  if (isa() != Isa::Portable) return weighted_row_sum_avx2(rows, n, K, weights, y);
  weighted_columns_scalar(rows, n, K, weights, y, 0);
}

namespace {

/// batch_invariant_linear of the n_parts parts at `parts` (both overloads; no allocation per call).
void linear_of_parts(const float* x, int64_t B, int64_t K, const WeightPart* parts, size_t n_parts, float* y,
                     int64_t ldy) {
  int64_t N = 0;
  for (size_t i = 0; i < n_parts; ++i) N += parts[i].N;
  // Grain: at least ~64 KiB of weights per task, so small products stay on one thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(K, 1));
  // The SIMD kernels' dot products round alike (the same lanes, order and fused steps), so the
  // choice by B keeps every row's bits; so does the grouping of rows into tiles.
  const RowsFn kernel = rows_kernel(/*tiles=*/B > 1);
  at::parallel_for(0, N, grain, [&](int64_t n0, int64_t n1) {
    int64_t first = 0;  // the stacked row where this part starts
    for (size_t i = 0; i < n_parts; ++i) {
      const WeightPart& part = parts[i];
      const int64_t begin = std::max(n0, first), end = std::min(n1, first + part.N);
      if (begin < end) kernel(x, B, K, part.W, ldy, y + first, begin - first, end - first);
      first += part.N;
    }
  });
}

}  // namespace

void batch_invariant_linear(const float* x, int64_t B, int64_t K, const float* W, int64_t N, float* y, int64_t ldy) {
  const WeightPart part{W, N};
  linear_of_parts(x, B, K, &part, 1, y, ldy);
}

void batch_invariant_linear(const float* x, int64_t B, int64_t K, const std::vector<WeightPart>& parts, float* y,
                            int64_t ldy) {
  linear_of_parts(x, B, K, parts.data(), parts.size(), y, ldy);
}

int decode_kernel_threads() {
  return std::min({detail::parallel_for_threads_here(), quant_kernel_threads(), gemm_kernel_threads()});
}

}  // namespace fbt
