// quant_linear's kernels for ggml's K formats (Q4_K, Q6_K: super-blocks of 256 values whose
// sub-blocks carry their own scales, gguf_quants.h) read in place with int8 activations in blocks of
// 32, and the dequantising path every format can take.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "fbt/io/gguf_quants.h"
#include "fbt/util/cpu_features.h"
#include "quant_kernel.h"

// GCC 12's AVX-512 intrinsics (inserti64x4, cvtepi32_ps, permutexvar...) start from
// _mm512_undefined_*() and then warn that it may be used uninitialized (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace fbt::detail {
namespace {

constexpr int64_t kBlock = QuantMatrix::kBlock;  // values per activation block
constexpr int64_t kSuper = 256;                  // values per super-block
constexpr int64_t kSubBlocks = kSuper / kBlock;  // activation blocks per super-block
constexpr int64_t kQ4KBytes = 144, kQ6KBytes = 210;
/// Software prefetch of the next tile's rows (quant_gemv.cpp's tile_avx2 does the same), bytes ahead.
constexpr int64_t kPrefetchAhead = 256;

uint16_t fp16_bits_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return bits;
}

/// Q4_K's 8 six-bit scales and 8 mins (ggml's get_scale_min_k4: scale j < 4 is byte j's low 6
/// bits, min j < 4 byte j + 4's; for j ≥ 4 the low 4 bits are byte j + 4's low (scale) or high
/// (min) nibble and the top 2 bits the top 2 bits of byte j − 4 (scale) or j (min)), one per byte.
inline void q4_k_scales_mins(const uint8_t* packed, uint64_t& scales, uint64_t& mins) {
  uint32_t a[3];
  std::memcpy(a, packed, sizeof a);
  constexpr uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, bits45 = 0x30303030;
  const uint32_t scales_hi = (a[2] & low4) | ((a[0] >> 2) & bits45);  // (byte >> 6) << 4 of bytes 0..3
  const uint32_t mins_hi = ((a[2] >> 4) & low4) | ((a[1] >> 2) & bits45);
  scales = (a[0] & low6) | uint64_t(scales_hi) << 32;
  mins = (a[1] & low6) | uint64_t(mins_hi) << 32;
}

/// 8 int32 lanes, each the exact sum of 4 products of unsigned weights w (0..15) and int8 inputs x
/// (maddubs + madd: 2·15·127 < 2¹⁵, no saturation).
__attribute__((target("avx2,fma,f16c"))) inline __m256i sums_u8_i8(__m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

/// A zmm whose lanes 0..7 are lane i of v and lanes 8..15 lane i + 1.
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni"))) inline __m512 lane_pair(__m256 v, int i) {
  const __m512i index = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_set1_epi32(i)), _mm256_set1_epi32(i + 1), 1);
  return _mm512_permutexvar_ps(index, _mm512_zextps256_ps512(v));
}

/// The sum of v's 8 lanes, pairwise (reduce8).
__attribute__((target("avx2,fma,f16c"))) inline float lane_sum(__m256 v) {
  alignas(32) float a[8];
  _mm256_store_ps(a, v);
  return reduce8(a);
}

/// v's low 8 lanes plus its high 8.
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni"))) inline __m256 halves_added(__m512 v) {
  return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

/// The next tile's NR rows (contiguous) as one stream, at this super-block's progress.
template <int NR>
__attribute__((target("avx2,fma,f16c"))) inline void prefetch_next_tile(const uint8_t* rows, int64_t row_bytes,
                                                                        int64_t sb, int64_t bb) {
  if constexpr (NR > 1) {  // a single row streams best on the hardware prefetcher alone
    const uint8_t* ahead = rows + NR * row_bytes + NR * sb * bb + kPrefetchAhead;
    for (int64_t at = 0; at < NR * bb; at += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + at), _MM_HINT_T0);
  }
}

/// Q4_K's 8 scales times d and 8 mins times dmin of super-block `w`, as fp32 lanes.
__attribute__((target("avx2,fma,f16c"))) inline void q4_k_factors(const uint8_t* w, __m256& d_scale, __m256& dmin_min) {
  uint64_t scales, mins;
  q4_k_scales_mins(w + 4, scales, mins);
  d_scale = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(fp16_bits_at(w))),
                          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(scales)))));
  dmin_min = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(fp16_bits_at(w + 2))),
                           _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(mins)))));
}

/// The activation scales d_x of super-block sb's 8 blocks of input row b, and d_x·Σxq.
__attribute__((target("avx2,fma,f16c"))) inline void block_scales(const QuantInputs& in, int64_t b, int64_t sb,
                                                                  __m256& dx, __m256& dx_sum) {
  const int64_t at = b * (in.K / kBlock) + sb * kSubBlocks;
  dx = _mm256_loadu_ps(in.dx + at);
  dx_sum = _mm256_mul_ps(dx, _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in.sx + at))));
}

/// y[b0 + c, n + r] (rows ldy apart) for the NR Q4_K rows n.. and the BC input rows b0..: per
/// 32-value sub-block s, float(Σ q·xq) times fp32((d·s)·d_x) into the even or odd chain, and per
/// super-block (dmin·m)·(d_x·Σxq) for its 8 sub-blocks into the min chain (8 lanes, one per
/// sub-block); y = Σ lanes of (even + odd − min). Every dot product takes these steps in any tile.
template <int NR, int BC>
__attribute__((target("avx2,fma,f16c"))) inline void tile_q4_k(const QuantMatrix& W, int64_t n, const QuantInputs& in,
                                                               int64_t b0, float* y, int64_t ldy) {
  const int64_t nsb = in.K / kSuper, nb = in.K / kBlock;
  const uint8_t* rows = W.block(n, 0);  // NR rows of nsb super-blocks, contiguous
  __m256 even[NR][BC], odd[NR][BC], min[NR][BC];
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < BC; ++c) even[r][c] = odd[r][c] = min[r][c] = _mm256_setzero_ps();
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    prefetch_next_tile<NR>(rows, nsb * kQ4KBytes, sb, kQ4KBytes);
    __m256 dx[BC], dx_sum[BC];  // the super-block's 8 activation scales, and d_x·Σxq
    for (int c = 0; c < BC; ++c) block_scales(in, b0 + c, sb, dx[c], dx_sum[c]);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const uint8_t* w = rows + (r * nsb + sb) * kQ4KBytes;
      __m256 d_scale, dmin_min;
      q4_k_factors(w, d_scale, dmin_min);
      __m256i q[kSubBlocks];  // sub-block s: the low (even s) or high (odd s) nibbles of bytes 32·(s/2)..
      for (int p = 0; p < 4; ++p) {
        const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * p));
        q[2 * p] = _mm256_and_si256(packed, nibble);
        q[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble);
      }
#pragma GCC unroll 4
      for (int c = 0; c < BC; ++c) {
        alignas(32) float f[kSubBlocks];
        _mm256_store_ps(f, _mm256_mul_ps(d_scale, dx[c]));
        min[r][c] = _mm256_fmadd_ps(dmin_min, dx_sum[c], min[r][c]);
        const int8_t* xq = in.xq + ((b0 + c) * nb + sb * kSubBlocks) * kBlock;
        for (int s = 0; s < kSubBlocks; s += 2) {
          const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + s * kBlock));
          const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + (s + 1) * kBlock));
          even[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums_u8_i8(q[s], x0)), _mm256_set1_ps(f[s]), even[r][c]);
          odd[r][c] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums_u8_i8(q[s + 1], x1)), _mm256_set1_ps(f[s + 1]), odd[r][c]);
        }
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < BC; ++c)
      y[(b0 + c) * ldy + n + r] = lane_sum(_mm256_sub_ps(_mm256_add_ps(even[r][c], odd[r][c]), min[r][c]));
}

/// The four 32-value blocks k of one half (128 values) of a Q6_K super-block, q (0..63) or, with
/// `centred`, q − 32 as int8: block k's low 4 bits are the low (k < 2) or high nibbles of ql bytes
/// 32·(k % 2).., its top 2 bits bits 2k, 2k + 1 of the 32 qh bytes (dequantize_q6_k's order).
template <bool centred>
__attribute__((target("avx2,fma,f16c"))) inline void q6_k_half(const uint8_t* ql, const uint8_t* qh, __m256i* q) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
  const __m256i nibble = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30), offset = _mm256_set1_epi8(32);
  // Each shift moves bits within their byte before the mask keeps bits 4..5 (or 0..3).
  const __m256i high[4] = {_mm256_and_si256(_mm256_slli_epi16(h, 4), bits45),
                           _mm256_and_si256(_mm256_slli_epi16(h, 2), bits45), _mm256_and_si256(h, bits45),
                           _mm256_and_si256(_mm256_srli_epi16(h, 2), bits45)};
  const __m256i low[4] = {_mm256_and_si256(a, nibble), _mm256_and_si256(b, nibble),
                          _mm256_and_si256(_mm256_srli_epi16(a, 4), nibble),
                          _mm256_and_si256(_mm256_srli_epi16(b, 4), nibble)};
  for (int k = 0; k < 4; ++k) {
    q[k] = _mm256_or_si256(low[k], high[k]);
    if constexpr (centred) q[k] = _mm256_sub_epi8(q[k], offset);
  }
}

/// y for the NR Q6_K rows n.. and BC input rows b0..: per 32-value block j, 8 int32 lanes of 4
/// products (q − 32)·xq each, multiplied exactly by their 16-value sub-block's int8 scale
/// (maddubs of |q − 32| and sign(q − 32)·xq: |·| ≤ 2·32·127, then madd with the scales), converted
/// and multiplied by fp32(d·d_x) into the even or odd chain.
template <int NR, int BC>
__attribute__((target("avx2,fma,f16c"))) inline void tile_q6_k(const QuantMatrix& W, int64_t n, const QuantInputs& in,
                                                               int64_t b0, float* y, int64_t ldy) {
  const int64_t nsb = in.K / kSuper, nb = in.K / kBlock;
  const uint8_t* rows = W.block(n, 0);
  __m256 even[NR][BC], odd[NR][BC];
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < BC; ++c) even[r][c] = odd[r][c] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    prefetch_next_tile<NR>(rows, nsb * kQ6KBytes, sb, kQ6KBytes);
    __m256 dx[BC];
    for (int c = 0; c < BC; ++c) dx[c] = _mm256_loadu_ps(in.dx + (b0 + c) * nb + sb * kSubBlocks);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const uint8_t* w = rows + (r * nsb + sb) * kQ6KBytes;
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(fp16_bits_at(w + 208)));
      alignas(32) float f[BC][kSubBlocks];  // fp32(d·d_x) of each block
      for (int c = 0; c < BC; ++c) _mm256_store_ps(f[c], _mm256_mul_ps(d, dx[c]));
      const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 192));
      for (int half = 0; half < 2; ++half) {
        // Scales 8·half.. as int32 lanes holding the scale in both int16 halves (madd's operand).
        const __m256i s32 = _mm256_cvtepi8_epi32(half == 0 ? scales : _mm_unpackhi_epi64(scales, scales));
        const __m256i s_pairs =
            _mm256_or_si256(_mm256_and_si256(s32, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(s32, 16));
        __m256i q[4];
        q6_k_half<true>(w + 64 * half, w + 128 + 32 * half, q);
        for (int k = 0; k < 4; ++k) {
          // Lanes 0..3 (values 0..15 of the block) take sub-block scale 2k, lanes 4..7 scale 2k + 1.
          const __m256i block_scales = _mm256_permutevar8x32_epi32(
              s_pairs, _mm256_setr_epi32(2 * k, 2 * k, 2 * k, 2 * k, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1));
          const __m256i magnitude = _mm256_sign_epi8(q[k], q[k]);
          const int64_t j = 4 * half + k;
#pragma GCC unroll 4
          for (int c = 0; c < BC; ++c) {
            const __m256i x = _mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(in.xq + ((b0 + c) * nb + sb * kSubBlocks + j) * kBlock));
            const __m256i sums =
                _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(x, q[k])), block_scales);
            __m256& acc = j % 2 == 0 ? even[r][c] : odd[r][c];
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(f[c][j]), acc);
          }
        }
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < BC; ++c) y[(b0 + c) * ldy + n + r] = lane_sum(_mm256_add_ps(even[r][c], odd[r][c]));
}

// ---- AVX-512 VNNI: two 32-value blocks per 512-bit register and one vpdpbusd. ----

/// tile_q4_k on AVX-512 VNNI CPUs: sub-blocks 2p and 2p + 1 in one register (their values are the
/// low and high nibbles of the same 32 bytes, their inputs 64 consecutive bytes), Σ q·xq by
/// vpdpbusd, times fp32((d·s)·d_x) lane by lane into one chain; the min chain as tile_q4_k's. The
/// same integers as the AVX2 kernel's, summed in another order (other bits; one process runs one).
template <int NR, int BC>
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni"))) inline void tile_q4_k_512(
    const QuantMatrix& W, int64_t n, const QuantInputs& in, int64_t b0, float* y, int64_t ldy) {
  const int64_t nsb = in.K / kSuper, nb = in.K / kBlock;
  const uint8_t* rows = W.block(n, 0);
  __m512 acc[NR][BC];
  __m256 min[NR][BC];
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < BC; ++c) acc[r][c] = _mm512_setzero_ps(), min[r][c] = _mm256_setzero_ps();
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    prefetch_next_tile<NR>(rows, nsb * kQ4KBytes, sb, kQ4KBytes);
    __m256 dx[BC], dx_sum[BC];
    for (int c = 0; c < BC; ++c) block_scales(in, b0 + c, sb, dx[c], dx_sum[c]);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const uint8_t* w = rows + (r * nsb + sb) * kQ4KBytes;
      __m256 d_scale, dmin_min;
      q4_k_factors(w, d_scale, dmin_min);
      __m512i q[4];  // sub-blocks 2p (bytes 0..31) and 2p + 1
      for (int p = 0; p < 4; ++p) {
        const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * p));
        q[p] = _mm512_and_si512(_mm512_inserti64x4(_mm512_zextsi256_si512(packed), _mm256_srli_epi16(packed, 4), 1),
                                nibble);
      }
#pragma GCC unroll 4
      for (int c = 0; c < BC; ++c) {
        const __m256 f = _mm256_mul_ps(d_scale, dx[c]);
        min[r][c] = _mm256_fmadd_ps(dmin_min, dx_sum[c], min[r][c]);
        const int8_t* xq = in.xq + ((b0 + c) * nb + sb * kSubBlocks) * kBlock;
        for (int p = 0; p < 4; ++p) {
          const __m512i x = _mm512_loadu_si512(xq + 2 * p * kBlock);
          const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[p], x);
          acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), lane_pair(f, 2 * p), acc[r][c]);
        }
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < BC; ++c)
      y[(b0 + c) * ldy + n + r] = lane_sum(_mm256_sub_ps(halves_added(acc[r][c]), min[r][c]));
}

/// tile_q6_k on AVX-512 VNNI CPUs: blocks j and j + 1 in one register, q unsigned (0..63) by
/// vpdpbusd less 32·Σxq (vpdpbusd of 32s, once per input and super-block): 16 lanes, 4 per 16-value
/// sub-block, each times fp32(s·(d·d_x)) of its sub-block into one chain, the lanes added at the end.
template <int NR, int BC>
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni"))) inline void tile_q6_k_512(
    const QuantMatrix& W, int64_t n, const QuantInputs& in, int64_t b0, float* y, int64_t ldy) {
  const int64_t nsb = in.K / kSuper, nb = in.K / kBlock;
  const uint8_t* rows = W.block(n, 0);
  __m512 acc[NR][BC];
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < BC; ++c) acc[r][c] = _mm512_setzero_ps();
  // Lane l of a block pair belongs to the pair's 16-value sub-block l / 4.
  const __m512i quarter = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1)),
                                             _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3), 1);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    prefetch_next_tile<NR>(rows, nsb * kQ6KBytes, sb, kQ6KBytes);
    __m256 dx[BC];
    __m512i x[BC][4], offset[BC][4];  // input block pairs (2i, 2i + 1), and 32·Σxq of each 4 values
    for (int c = 0; c < BC; ++c) {
      dx[c] = _mm256_loadu_ps(in.dx + (b0 + c) * nb + sb * kSubBlocks);
      const int8_t* xq = in.xq + ((b0 + c) * nb + sb * kSubBlocks) * kBlock;
      for (int i = 0; i < 4; ++i) {
        x[c][i] = _mm512_loadu_si512(xq + 2 * i * kBlock);
        offset[c][i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(32), x[c][i]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const uint8_t* w = rows + (r * nsb + sb) * kQ6KBytes;
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(fp16_bits_at(w + 208)));
      const __m512 scales =
          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 192))));
      __m256 d_dx[BC];
      for (int c = 0; c < BC; ++c) d_dx[c] = _mm256_mul_ps(d, dx[c]);
      for (int half = 0; half < 2; ++half) {
        __m256i q[4];
        q6_k_half<false>(w + 64 * half, w + 128 + 32 * half, q);
        for (int k = 0; k < 4; k += 2) {
          const int j = 4 * half + k;  // the pair's first block
          const __m512i pair = _mm512_inserti64x4(_mm512_zextsi256_si512(q[k]), q[k + 1], 1);
          const __m512 pair_scales = _mm512_permutexvar_ps(_mm512_add_epi32(quarter, _mm512_set1_epi32(2 * j)), scales);
#pragma GCC unroll 4
          for (int c = 0; c < BC; ++c) {
            const __m512i sums =
                _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), pair, x[c][j / 2]), offset[c][j / 2]);
            acc[r][c] =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(pair_scales, lane_pair(d_dx[c], j)), acc[r][c]);
          }
        }
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < BC; ++c) y[(b0 + c) * ldy + n + r] = lane_sum(halves_added(acc[r][c]));
}

/// One tile of format F: Q4_K or Q6_K, with 512-bit vpdpbusd (VNNI) or AVX2.
template <QuantFormat F, int NR, int BC, bool VNNI>
__attribute__((target("avx2,fma,f16c"))) inline void tile_k(const QuantMatrix& W, int64_t n, const QuantInputs& in,
                                                            int64_t b0, float* y, int64_t ldy) {
  if constexpr (F == QuantFormat::Q4_K && VNNI)
    tile_q4_k_512<NR, BC>(W, n, in, b0, y, ldy);
  else if constexpr (F == QuantFormat::Q4_K)
    tile_q4_k<NR, BC>(W, n, in, b0, y, ldy);
  else if constexpr (VNNI)
    tile_q6_k_512<NR, BC>(W, n, in, b0, y, ldy);
  else
    tile_q6_k<NR, BC>(W, n, in, b0, y, ldy);
}

/// The rows n0..n1: at batch 1 four weight rows at a time sharing the input's loads (then single
/// rows), above it one weight row against four, two, one inputs (quant_gemv.cpp's rows_tiled).
template <QuantFormat F, bool VNNI>
__attribute__((target("avx2,fma,f16c"))) inline void rows_k(const QuantMatrix& W, const QuantInputs& in, int64_t B,
                                                            float* y, int64_t ldy, int64_t n0, int64_t n1) {
  if (B == 1) {
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) tile_k<F, 4, 1, VNNI>(W, n, in, 0, y, ldy);
    for (; n < n1; ++n) tile_k<F, 1, 1, VNNI>(W, n, in, 0, y, ldy);
    return;
  }
  for (int64_t n = n0; n < n1; ++n) {
    int64_t b = 0;
    for (; b + 4 <= B; b += 4) tile_k<F, 1, 4, VNNI>(W, n, in, b, y, ldy);
    if (b + 2 <= B) tile_k<F, 1, 2, VNNI>(W, n, in, b, y, ldy), b += 2;
    if (b < B) tile_k<F, 1, 1, VNNI>(W, n, in, b, y, ldy);
  }
}

template <QuantFormat F>
__attribute__((target("avx2,fma,f16c"), flatten)) void rows_k_avx2(const QuantMatrix& W, const QuantInputs& in,
                                                                   int64_t B, float* y, int64_t ldy, int64_t n0,
                                                                   int64_t n1) {
  rows_k<F, false>(W, in, B, y, ldy, n0, n1);
}
template <QuantFormat F>
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni"), flatten)) void rows_k_vnni(
    const QuantMatrix& W, const QuantInputs& in, int64_t B, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  rows_k<F, true>(W, in, B, y, ldy, n0, n1);
}

}  // namespace

QuantRowsFn k_quant_simd_kernel(QuantFormat format) {
  if (!cpu_has_avx2()) return nullptr;
  const bool vnni = cpu_has_avx512_vnni();
  if (format == QuantFormat::Q4_K) return vnni ? rows_k_vnni<QuantFormat::Q4_K> : rows_k_avx2<QuantFormat::Q4_K>;
  if (format == QuantFormat::Q6_K) return vnni ? rows_k_vnni<QuantFormat::Q6_K> : rows_k_avx2<QuantFormat::Q6_K>;
  return nullptr;
}

void dequantized_rows(const QuantMatrix& W, const QuantInputs& in, int64_t B, float* y, int64_t ldy, int64_t n0,
                      int64_t n1, Q8Activations act) {
  const int64_t K = in.K, values = W.block_values(), nb = K / kBlock;
  const uint32_t type = quant_format_ggml_type(W.format());
  std::vector<float> w(static_cast<size_t>(values)), acc(static_cast<size_t>(8 * B));
  std::vector<uint8_t> block(static_cast<size_t>(W.block_bytes()));
  for (int64_t n = n0; n < n1; ++n) {
    std::fill(acc.begin(), acc.end(), 0.0f);  // input b's 8 partial sums at 8b
    for (int64_t ib = 0; ib < K / values; ++ib) {
      W.copy_block(n, ib, block.data());  // dequantised once for every input row
      dequantize_blocks(type, block.data(), values, w.data());
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i0 = 0; i0 < values; i0 += kBlock) {  // one activation block
          const int64_t at = b * K + ib * values + i0;
          float s = 0;
          for (int64_t i = 0; i < kBlock; ++i)
            s += w[size_t(i0 + i)] *
                 (act == Q8Activations::Int8 ? float(in.xq[at + i]) * in.dx[at / kBlock] : in.x[at + i]);
          acc[size_t(8 * b + (at / kBlock - b * nb) % 8)] += s;
        }
    }
    for (int64_t b = 0; b < B; ++b) y[b * ldy + n] = reduce8(acc.data() + 8 * b);
  }
}

}  // namespace fbt::detail
