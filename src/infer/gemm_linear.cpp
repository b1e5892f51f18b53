// gemm_linear: packed inputs, then register tiles of weight rows × inputs in the outer-product form.
// AVX-512 and AVX2+FMA kernels where the CPU has them (chosen at run time), else portable std::fma.
#include "fbt/infer/gemm_linear.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include <ATen/Parallel.h>

#include "fbt/infer/parallel_probe.h"
#include "fbt/util/cpu_features.h"

namespace fbt {
namespace {

constexpr int64_t kBlock = 16;  // inputs per packed block: one AVX-512 vector, two AVX2 vectors

/// Packed block blk of the inputs: xp[blk][k][j] = x[16·blk + j][k] for k < K, j < 16 (0 for
/// inputs past B).
void pack_block(const float* x, int64_t B, int64_t K, int64_t blk, float* xp) {
  float* dst = xp + blk * K * kBlock;
  const int64_t b0 = blk * kBlock, n = std::min(kBlock, B - b0);
  const float* src[kBlock];
  for (int64_t j = 0; j < n; ++j) src[j] = x + (b0 + j) * K;
  for (int64_t k = 0; k < K; ++k, dst += kBlock) {  // 16 rows read in step, one line written per k
    for (int64_t j = 0; j < n; ++j) dst[j] = src[j][k];
    for (int64_t j = n; j < kBlock; ++j) dst[j] = 0.0f;
  }
}

/// y[b·ldy + r] = sums[r][b] for r < R, b < nb: a tile's sums (inputs along a row) into y's rows.
template <int R, int C>
inline void store_tile(const float (&sums)[R][C], int64_t nb, float* y, int64_t ldy) {
  for (int64_t b = 0; b < nb; ++b)
    for (int r = 0; r < R; ++r) y[b * ldy + r] = sums[r][b];
}

// ---- Tiles: R weight rows (w, row stride K) × the inputs of V packed blocks (xp, block stride
// K·16), of which the first nb are stored. Each step k: one broadcast of W[n,k] per row, met by
// every input's x[·,k] as vectors; every sum one chain of fused multiply-adds in k order. ----

template <int R, int V>
__attribute__((target("avx512f,avx2,fma"))) void tile_avx512(const float* w, int64_t K, const float* xp, int64_t nb,
                                                             float* y, int64_t ldy, bool prefetch) {
  __m512 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  // The first input block's pass prefetches the next tile's rows (contiguous after these: one
  // stream, a line per step, into L2; past a matrix's end a prefetch is harmless): ~+8% prefill at
  // Llama-134M, where 12 short row streams at a time leave the hardware prefetcher behind.
  const char* next = reinterpret_cast<const char*>(w + R * K);
  const int64_t next_lines = prefetch ? R * K * int64_t(sizeof(float)) / 64 : 0;
  for (int64_t k = 0; k < K; ++k) {
    if (k < next_lines) _mm_prefetch(next + 64 * k, _MM_HINT_T1);
    __m512 xv[V];
    for (int v = 0; v < V; ++v) xv[v] = _mm512_loadu_ps(xp + v * K * kBlock + k * kBlock);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 wb = _mm512_set1_ps(w[r * K + k]);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(wb, xv[v], acc[r][v]);
    }
  }
  alignas(64) float sums[R][V * kBlock];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) _mm512_store_ps(&sums[r][v * kBlock], acc[r][v]);
  store_tile(sums, nb, y, ldy);
}

/// One packed block of 16 inputs as two 8-lane vectors (AVX2's 16 registers: 2R sums + 3).
template <int R, int V>
__attribute__((target("avx2,fma"))) void tile_avx2(const float* w, int64_t K, const float* xp, int64_t nb, float* y,
                                                   int64_t ldy) {
  static_assert(V == 1, "AVX2 tiles take one block of 16 inputs");
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const __m256 x0 = _mm256_loadu_ps(xp + k * kBlock), x1 = _mm256_loadu_ps(xp + k * kBlock + 8);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 wb = _mm256_broadcast_ss(w + r * K + k);
      acc[r][0] = _mm256_fmadd_ps(wb, x0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(wb, x1, acc[r][1]);
    }
  }
  alignas(32) float sums[R][kBlock];
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(&sums[r][0], acc[r][0]);
    _mm256_store_ps(&sums[r][8], acc[r][1]);
  }
  store_tile(sums, nb, y, ldy);
}

template <int R, int V>
void tile_portable(const float* w, int64_t K, const float* xp, int64_t nb, float* y, int64_t ldy) {
  float sums[R][V * kBlock] = {};
  for (int64_t k = 0; k < K; ++k)
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v)
        for (int64_t j = 0; j < kBlock; ++j)
          sums[r][v * kBlock + j] =
              std::fma(w[r * K + k], xp[v * K * kBlock + k * kBlock + j], sums[r][v * kBlock + j]);
  store_tile(sums, nb, y, ldy);
}

// The kernels and their tiles: kRows weight rows × kBlocks packed blocks (AVX-512: 12 × 32 inputs,
// 24 sums + 2 inputs + 1 broadcast of its 32 registers; AVX2: 6 × 16, 12 + 2 + 1 of 16).
struct Avx512 {
  static constexpr int kRows = 12, kBlocks = 2;
  template <int R, int V>
  static void tile(const float* w, int64_t K, const float* xp, int64_t nb, float* y, int64_t ldy, bool first) {
    tile_avx512<R, V>(w, K, xp, nb, y, ldy, first);
  }
};
struct Avx2 {
  static constexpr int kRows = 6, kBlocks = 1;
  template <int R, int V>
  static void tile(const float* w, int64_t K, const float* xp, int64_t nb, float* y, int64_t ldy, bool first) {
    tile_avx2<R, V>(w, K, xp, nb, y, ldy);
  }
};
struct Portable {
  static constexpr int kRows = 4, kBlocks = 1;
  template <int R, int V>
  static void tile(const float* w, int64_t K, const float* xp, int64_t nb, float* y, int64_t ldy, bool first) {
    tile_portable<R, V>(w, K, xp, nb, y, ldy);
  }
};

/// y[b, r] for the R weight rows w and every input b < B: kBlocks packed blocks at a time (the
/// weights stay in L1 while the packed inputs stream from L2), then a last single block.
template <class Kernel, int R>
void tile_inputs(const float* w, int64_t K, const float* xp, int64_t B, float* y, int64_t ldy) {
  constexpr int64_t step = Kernel::kBlocks * kBlock;
  int64_t b = 0;
  for (; b + step <= B; b += step)
    Kernel::template tile<R, Kernel::kBlocks>(w, K, xp + b * K, step, y + b * ldy, ldy, b == 0);
  for (; b < B; b += kBlock)
    Kernel::template tile<R, 1>(w, K, xp + b * K, std::min(kBlock, B - b), y + b * ldy, ldy, b == 0);
}

/// Output rows n0..n1 (at most kRows of them) of one weight part: a full tile, else tiles of 4
/// rows and single rows.
template <class Kernel>
void rows(const float* xp, int64_t B, int64_t K, const float* W, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  int64_t n = n0;
  if (n1 - n == Kernel::kRows) return tile_inputs<Kernel, Kernel::kRows>(W + n * K, K, xp, B, y + n, ldy);
  for (; n + 4 <= n1; n += 4) tile_inputs<Kernel, 4>(W + n * K, K, xp, B, y + n, ldy);
  for (; n < n1; ++n) tile_inputs<Kernel, 1>(W + n * K, K, xp, B, y + n, ldy);
}

// Entry points per kernel: `flatten` inlines the tiles (compiled for their ISA) into the loops.
using RowsFn = void (*)(const float*, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t);
__attribute__((target("avx512f,avx2,fma"), flatten)) void rows_avx512(const float* xp, int64_t B, int64_t K,
                                                                      const float* W, int64_t n0, int64_t n1, float* y,
                                                                      int64_t ldy) {
  rows<Avx512>(xp, B, K, W, n0, n1, y, ldy);
}
__attribute__((target("avx2,fma"), flatten)) void rows_avx2(const float* xp, int64_t B, int64_t K, const float* W,
                                                            int64_t n0, int64_t n1, float* y, int64_t ldy) {
  rows<Avx2>(xp, B, K, W, n0, n1, y, ldy);
}
void rows_portable(const float* xp, int64_t B, int64_t K, const float* W, int64_t n0, int64_t n1, float* y,
                   int64_t ldy) {
  rows<Portable>(xp, B, K, W, n0, n1, y, ldy);
}

/// The kernel and its tile height for this CPU, chosen once.
struct Choice {
  RowsFn rows;
  int64_t tile_rows;
};
Choice choice() {
  static const Choice chosen = cpu_has_avx512() ? Choice{rows_avx512, Avx512::kRows}
                               : cpu_has_avx2() ? Choice{rows_avx2, Avx2::kRows}
                                                : Choice{rows_portable, Portable::kRows};
  return chosen;
}

}  // namespace

void gemm_linear(const float* x, int64_t B, int64_t K, const std::vector<WeightPart>& parts, float* y, int64_t ldy) {
  if (B <= 0) return;
  const Choice kernel = choice();
  const int64_t blocks = (B + kBlock - 1) / kBlock;
  thread_local std::vector<float> packed;
  packed.resize(size_t(blocks * kBlock * K));
  float* xp = packed.data();
  // Work units: tiles of tile_rows output rows within a part (a part's last tile may be shorter).
  std::vector<int64_t> first_unit{0};  // first_unit[i]: the first unit of part i
  for (const auto& part : parts)
    first_unit.push_back(first_unit.back() + (part.N + kernel.tile_rows - 1) / kernel.tile_rows);
  const int64_t units = first_unit.back();
  // One fork and join per product, as at::parallel_for would (libtorch's OpenMP runtime and thread
  // count), with the packing split across the threads too and a barrier before the tiles read it:
  // packed serially, the other threads waited through it (~8% of a 2-thread prefill at `small`).
  const int threads = at::in_parallel_region() ? 1 : int(std::min<int64_t>(at::get_num_threads(), units));
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    for (int64_t blk = t; blk < blocks; blk += nt) pack_block(x, B, K, blk, xp);
#pragma omp barrier
    const int64_t per = (units + nt - 1) / nt;
    for (int64_t u = t * per; u < std::min(units, (t + 1) * per); ++u) {
      const size_t i = size_t(std::upper_bound(first_unit.begin(), first_unit.end(), u) - first_unit.begin() - 1);
      int64_t column = 0;  // the part's first column of y
      for (size_t j = 0; j < i; ++j) column += parts[j].N;
      const int64_t n0 = (u - first_unit[i]) * kernel.tile_rows, n1 = std::min(parts[i].N, n0 + kernel.tile_rows);
      kernel.rows(xp, B, K, parts[i].W, n0, n1, y + column, ldy);
    }
  }
}

bool gemm_linear_vectorised() { return cpu_has_avx2(); }

int gemm_kernel_threads() { return detail::parallel_for_threads_here(); }

}  // namespace fbt
