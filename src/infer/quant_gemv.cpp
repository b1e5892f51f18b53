// QuantMatrix and quant_linear (include/fbt/infer/quant_gemv.h): ggml's block formats and a
// matrix-vector product that streams each weight row once per group of input rows; the kernels of
// the 32-value formats (Q8_0, Q4_0, Q5_0) here, the K formats' in quant_gemv_k.cpp.
#include "fbt/infer/quant_gemv.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include "fbt/infer/parallel_probe.h"
#include "fbt/io/gguf_quants.h"
#include "fbt/util/cpu_features.h"
#include "fbt/util/error.h"
#include "quant_kernel.h"

namespace fbt {
namespace {

constexpr int64_t kBlock = QuantMatrix::kBlock;
constexpr int64_t kScaleBytes = 2;  // the fp16 d before every block's values
/// Software prefetch: the next tile's weights (its NR rows, contiguous) as one stream, this many bytes
/// ahead; without it four rows read side by side defeat the hardware prefetcher (~3× slower, measured).
constexpr int64_t kPrefetchAhead = 256;

using Inputs = detail::QuantInputs;
using detail::reduce8;

constexpr int64_t block_bytes_of(QuantFormat format) {
  switch (format) {
    case QuantFormat::Q8_0: return kScaleBytes + kBlock;
    case QuantFormat::Q4_0: return kScaleBytes + kBlock / 2;
    case QuantFormat::Q5_0: return kScaleBytes + 4 + kBlock / 2;
    case QuantFormat::Q4_K: return 144;
    case QuantFormat::Q6_K: return 210;
  }
  return 0;
}

/// The offset of the unsigned values of Q4_0 (8) and Q5_0 (16): the weight is d·(q − centre).
constexpr int centre_of(QuantFormat format) {
  return format == QuantFormat::Q4_0 ? 8 : format == QuantFormat::Q5_0 ? 16 : 0;
}

/// The fifth bits of a Q5_0 block (bit j: value j) as 0x10 in byte j of a register.
__attribute__((target("avx2,fma,f16c"))) inline __m256i q5_high_bits(uint32_t qh) {
  const __m256i byte_of_bit = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  const __m256i bit_in_byte = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  const __m256i bits = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(qh)), byte_of_bit), bit_in_byte);
  return _mm256_and_si256(_mm256_cmpeq_epi8(bits, bit_in_byte), _mm256_set1_epi8(0x10));
}

uint16_t fp16_bits_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return bits;
}

/// 1/d, or 0 where d is 0 or so small (|d| < ~3e−39) that 1/d overflows: such a block quantises to
/// zeros (v·inf would be inf or NaN, and its conversion to an integer undefined).
float inverse_scale(float d) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  return std::isfinite(id) ? id : 0.0f;
}

/// Quantises one block of 32 values to Q8_0: q = round(v/d), d = max|v|/127 (0 for an all-zero
/// block). The rule of the weights and of the Int8 activations. Returns d as computed in fp32 (the
/// caller rounds it to fp16 for weights).
float quantize_block_q8(const float* v, int8_t* q) {
  float amax = 0;
  for (int64_t i = 0; i < kBlock; ++i) amax = std::max(amax, std::abs(v[i]));
  const float d = amax / 127.0f, id = inverse_scale(d);
  for (int64_t i = 0; i < kBlock; ++i) {
    const float r = std::round(v[i] * id);
    q[i] = int8_t(std::isfinite(r) ? r : 0.0f);  // NaN (a NaN input) would convert to an integer undefined
  }
  return d;
}

/// Quantises one block of 32 values to Q4_0 (quantize_row_q4_0_ref): m the first value of largest
/// |v|, d = m/−8, q = min(15, trunc(v/d + 8.5)); byte j of qs holds q_j low and q_(j+16) high.
/// Returns d in fp32.
float quantize_block_q4(const float* v, uint8_t* qs) {
  float amax = 0, max = 0;
  for (int64_t i = 0; i < kBlock; ++i) {
    if (amax < std::abs(v[i])) {
      amax = std::abs(v[i]);
      max = v[i];
    }
  }
  const float d = max / -8.0f, id = inverse_scale(d);
  auto q = [&](float x) {  // a NaN value quantises to 8 (zero): its conversion to an integer would be undefined
    const float t = x * id + 8.5f;
    return uint8_t(std::isfinite(t) ? std::min<int>(15, int(int8_t(t))) : 8);
  };
  for (int64_t j = 0; j < kBlock / 2; ++j) qs[j] = uint8_t(q(v[j]) | (q(v[j + kBlock / 2]) << 4));
  return d;
}

// ---- Portable kernel: block i goes to partial sum i mod 8. ----

/// The 32 values of a weight block as int8 (Q4_0: q − 8; Q5_0: q − 16, bit 4 of q_j bit j of qh).
void unpack_block(QuantFormat format, const uint8_t* block, int8_t* q) {
  const uint8_t* v = block + kScaleBytes;
  if (format == QuantFormat::Q8_0) {
    std::memcpy(q, v, kBlock);
    return;
  }
  uint32_t qh = 0;
  if (format == QuantFormat::Q5_0) {
    std::memcpy(&qh, v, sizeof qh);
    v += sizeof qh;
  }
  const int centre = centre_of(format);
  for (int64_t j = 0; j < kBlock / 2; ++j) {
    q[j] = int8_t(((v[j] & 0x0F) | ((qh >> j & 1) << 4)) - centre);
    q[j + kBlock / 2] = int8_t(((v[j] >> 4) | ((qh >> (j + 16) & 1) << 4)) - centre);
  }
}

float dot_portable(const QuantMatrix& W, int64_t n, const Inputs& in, int64_t b, Q8Activations act) {
  const int64_t K = in.K, nb = K / kBlock;
  float acc[8] = {};
  int8_t wq[kBlock];
  for (int64_t ib = 0; ib < nb; ++ib) {
    const uint8_t* w = W.block(n, ib);
    const float dw = float(c10::Half(fp16_bits_at(w), c10::Half::from_bits()));
    unpack_block(W.format(), w, wq);
    float block;
    if (act == Q8Activations::Int8) {
      const int8_t* xq = in.xq + b * K + ib * kBlock;
      int32_t s = 0;
      for (int64_t i = 0; i < kBlock; ++i) s += int32_t(wq[i]) * int32_t(xq[i]);
      block = float(s) * (dw * in.dx[b * nb + ib]);
    } else {
      const float* x = in.x + b * K + ib * kBlock;
      float s = 0;
      for (int64_t i = 0; i < kBlock; ++i) s += float(wq[i]) * x[i];
      block = s * dw;
    }
    acc[ib % 8] += block;
  }
  return reduce8(acc);
}

void rows_portable(const QuantMatrix& W, const Inputs& in, int64_t B, float* y, int64_t ldy, int64_t n0, int64_t n1,
                   Q8Activations act) {
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t b = 0; b < B; ++b) y[b * ldy + n] = dot_portable(W, n, in, b, act);
}

// ---- AVX2 kernel: 8 partial sums per dot product in one register. ----

/// The 32 values of a Q8_0 weight block (int8), a Q4_0 one (its nibbles q, 0..15, unsigned: the
/// value is q − 8) or a Q5_0 one (q, 0..31: the value is q − 16) in one register.
template <QuantFormat F>
__attribute__((target("avx2,fma,f16c"))) inline __m256i load_block(const uint8_t* block) {
  if constexpr (F == QuantFormat::Q8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + kScaleBytes));
  } else {
    const uint8_t* v = block + kScaleBytes + (F == QuantFormat::Q5_0 ? 4 : 0);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v));
    const __m128i nibble = _mm_set1_epi8(0x0F);
    const __m128i low = _mm_and_si128(packed, nibble), high = _mm_and_si128(_mm_srli_epi16(packed, 4), nibble);
    const __m256i q = _mm256_set_m128i(high, low);
    if constexpr (F == QuantFormat::Q4_0) return q;
    uint32_t qh;
    std::memcpy(&qh, block + kScaleBytes, sizeof qh);
    return _mm256_or_si256(q, q5_high_bits(qh));
  }
}

/// block_dot_i8's 8 int32 sums in one instruction (vpdpbusd: unsigned bytes × signed bytes, each
/// group of 4 added to an int32 lane, exactly), the same sums of the same groups as maddubs + madd:
/// Q8_0 |w| against sign(w)·x, Q4_0 / Q5_0 the unsigned q against x added to −8Σx / −16Σx
/// (`offset`, lane 0).
template <QuantFormat F>
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni"))) inline __m256i block_sums_vnni(__m256i wv,
                                                                                                    __m256i xv,
                                                                                                    __m256i offset) {
  if constexpr (F == QuantFormat::Q8_0)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
  else
    return _mm256_dpbusd_epi32(_mm256_sub_epi32(_mm256_setzero_si256(), offset), wv, xv);
}

/// A weight block wv (load_block) against an int8 input block xv: 8 int32 sums of 4 products each
/// (their total is the block's exact dot product), as floats. Q8_0: maddubs of |w| and sign(w)·x
/// (cannot saturate: |q| ≤ 127, so 2·127² < 2¹⁵). Q4_0 / Q5_0: maddubs of the unsigned q and x
/// (2·31·127 < 2¹⁵), less 8·Σx / 16·Σx (`offset`, in lane 0 only): Σ(q − 8)x = Σqx − 8Σx, exactly.
template <QuantFormat F, bool VNNI>
__attribute__((target("avx2,fma,f16c"))) inline __m256 block_dot_i8(__m256i wv, __m256i xv, __m256i offset) {
  __m256i sums;
  if constexpr (VNNI) {
    sums = block_sums_vnni<F>(wv, xv, offset);
  } else {
    __m256i pairs;
    if constexpr (F == QuantFormat::Q8_0)
      pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
    else
      pairs = _mm256_maddubs_epi16(wv, xv);
    sums = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    if constexpr (F != QuantFormat::Q8_0) sums = _mm256_sub_epi32(sums, offset);
  }
  return _mm256_cvtepi32_ps(sums);
}

/// The low 8 int8 values of v as fp32.
__attribute__((target("avx2,fma,f16c"))) inline __m256 widen8(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

/// A weight block wv (load_block) against 32 fp32 inputs: 8 partial sums.
template <QuantFormat F>
__attribute__((target("avx2,fma,f16c"))) inline __m256 block_dot_f32(__m256i wv, const float* x) {
  if constexpr (F != QuantFormat::Q8_0) wv = _mm256_sub_epi8(wv, _mm256_set1_epi8(centre_of(F)));
  const __m128i lo = _mm256_castsi256_si128(wv), hi = _mm256_extracti128_si256(wv, 1);
  __m256 s = _mm256_mul_ps(widen8(lo), _mm256_loadu_ps(x));
  s = _mm256_fmadd_ps(widen8(_mm_srli_si128(lo, 8)), _mm256_loadu_ps(x + 8), s);
  s = _mm256_fmadd_ps(widen8(hi), _mm256_loadu_ps(x + 16), s);
  return _mm256_fmadd_ps(widen8(_mm_srli_si128(hi, 8)), _mm256_loadu_ps(x + 24), s);
}

/// y[b0 + c, n + r] for the NR weight rows n.. and the BC input rows b0..: two 8-lane accumulators
/// per dot product, the even blocks in one and the odd in the other, each in order, added at the
/// end (two chains of fused multiply-adds: one would make the product wait on its latency at batch
/// 1); every dot product takes the same steps in any tile, so tiling changes no bit. The NR rows
/// share each input block's loads; the next tile's rows (contiguous) are prefetched as one stream.
template <int NR, int BC, Q8Activations ACT, QuantFormat F, bool VNNI>
__attribute__((target("avx2,fma,f16c"))) inline void tile_avx2(const QuantMatrix& W, int64_t n, const Inputs& in,
                                                               int64_t b0, float* y, int64_t ldy) {
  const int64_t K = in.K, nb = K / kBlock, bb = block_bytes_of(F);
  const uint8_t* rows = W.block(n, 0);  // NR rows of nb blocks, contiguous
  __m256 even[NR][BC], odd[NR][BC];
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < BC; ++c) even[r][c] = odd[r][c] = _mm256_setzero_ps();
  // acc[r][c] += block ib of row n + r · block ib of input row b0 + c
  auto add_block = [&](int64_t ib, __m256(*acc)[BC]) __attribute__((always_inline, target("avx2,fma,f16c"))) {
    if constexpr (NR > 1) {  // a single row streams best on the hardware prefetcher alone
      const uint8_t* ahead = rows + NR * nb * bb + NR * ib * bb + kPrefetchAhead;  // the NR blocks of this step
      for (int64_t at = 0; at < NR * bb; at += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + at), _MM_HINT_T0);
    }
    __m256i xv[BC], offset[BC]{};  // offset: Q4_0 and Q5_0 only
    float dx[BC];
    for (int c = 0; c < BC; ++c) {
      const int64_t at = (b0 + c) * nb + ib;
      if constexpr (ACT == Q8Activations::Int8) {
        xv[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in.xq + at * kBlock));
        if constexpr (F != QuantFormat::Q8_0)
          offset[c] = _mm256_setr_epi32(centre_of(F) * in.sx[at], 0, 0, 0, 0, 0, 0, 0);
        dx[c] = in.dx[at];
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const uint8_t* w = rows + (r * nb + ib) * bb;
      const float dw = _cvtsh_ss(fp16_bits_at(w));
      const __m256i wv = load_block<F>(w);
#pragma GCC unroll 4
      for (int c = 0; c < BC; ++c) {
        if constexpr (ACT == Q8Activations::Int8)
          acc[r][c] =
              _mm256_fmadd_ps(block_dot_i8<F, VNNI>(wv, xv[c], offset[c]), _mm256_set1_ps(dw * dx[c]), acc[r][c]);
        else
          acc[r][c] =
              _mm256_fmadd_ps(block_dot_f32<F>(wv, in.x + (b0 + c) * K + ib * kBlock), _mm256_set1_ps(dw), acc[r][c]);
      }
    }
  };
  int64_t ib = 0;
  for (; ib + 2 <= nb; ib += 2) {
    add_block(ib, even);
    add_block(ib + 1, odd);
  }
  if (ib < nb) add_block(ib, even);
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < BC; ++c) {
      alignas(32) float a[8];
      _mm256_store_ps(a, _mm256_add_ps(even[r][c], odd[r][c]));
      y[(b0 + c) * ldy + n + r] = reduce8(a);
    }
}

/// The rows n0..n1 of y for the BC input rows b0..: NR weight rows at a time, then single rows.
template <int NR, int BC, Q8Activations ACT, QuantFormat F, bool VNNI>
__attribute__((target("avx2,fma,f16c"))) inline void group_avx2(const QuantMatrix& W, const Inputs& in, int64_t b0,
                                                                float* y, int64_t ldy, int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + NR <= n1; n += NR) tile_avx2<NR, BC, ACT, F, VNNI>(W, n, in, b0, y, ldy);
  for (; n < n1; ++n) tile_avx2<1, BC, ACT, F, VNNI>(W, n, in, b0, y, ldy);
}

/// At batch 1 tiles of four weight rows (sharing the input's loads and offset: Q4_0 +5–30%, Q8_0
/// even, measured); above, one weight row streamed past four inputs (the 16 registers hold 8 dot
/// products' two chains).
template <Q8Activations ACT, QuantFormat F, bool VNNI>
__attribute__((target("avx2,fma,f16c"))) inline void rows_tiled(const QuantMatrix& W, const Inputs& in, int64_t B,
                                                                float* y, int64_t ldy, int64_t n0, int64_t n1) {
  if (B == 1) return group_avx2<4, 1, ACT, F, VNNI>(W, in, 0, y, ldy, n0, n1);
  int64_t b = 0;
  for (; b + 4 <= B; b += 4) group_avx2<1, 4, ACT, F, VNNI>(W, in, b, y, ldy, n0, n1);
  if (b + 2 <= B) group_avx2<1, 2, ACT, F, VNNI>(W, in, b, y, ldy, n0, n1), b += 2;
  if (b < B) group_avx2<1, 1, ACT, F, VNNI>(W, in, b, y, ldy, n0, n1);
}

// The entry points: `flatten` inlines the tiles into them, compiled for the entry's instructions.
template <Q8Activations ACT, QuantFormat F>
__attribute__((target("avx2,fma,f16c"), flatten)) void rows_avx2(const QuantMatrix& W, const Inputs& in, int64_t B,
                                                                 float* y, int64_t ldy, int64_t n0, int64_t n1) {
  rows_tiled<ACT, F, false>(W, in, B, y, ldy, n0, n1);
}
/// Int8 activations with vpdpbusd (the same sums: the same bits as rows_avx2).
template <QuantFormat F>
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni"), flatten)) void rows_vnni(
    const QuantMatrix& W, const Inputs& in, int64_t B, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  rows_tiled<Q8Activations::Int8, F, true>(W, in, B, y, ldy, n0, n1);
}

using RowsFn = detail::QuantRowsFn;

// ---- The Tiles8 layout with int8 activations: 8 weight rows' dot products per register. ----

/// y[b, n] for any row n of a Tiles8 matrix by scalar code (CPUs without AVX2, and the last
/// N mod 8 rows): per block s = Σ_j w_j·xq_j exactly in int32 (Q4_0: w_j = q_j − 8), then
/// acc = fma(float(s), d_w·d_x, acc) in block order: the steps of tile8_avx2 for each lane, so the
/// same bits.
float dot_tiles8_portable(const QuantMatrix& W, int64_t n, const Inputs& in, int64_t b) {
  const int64_t nb = in.K / kBlock;
  uint8_t w[block_bytes_of(QuantFormat::Q8_0)];
  int8_t q[kBlock];
  float acc = 0.0f;
  for (int64_t ib = 0; ib < nb; ++ib) {
    W.copy_block(n, ib, w);
    unpack_block(W.format(), w, q);
    const int64_t at = b * nb + ib;
    const int8_t* xq = in.xq + at * kBlock;
    int32_t s = 0;
    for (int64_t j = 0; j < kBlock; ++j) s += int32_t(q[j]) * xq[j];
    const float dw = float(c10::Half(fp16_bits_at(w), c10::Half::from_bits()));
    acc = std::fma(float(s), dw * in.dx[at], acc);
  }
  return acc;
}

/// Software prefetch of a tile's stream this many block columns ahead.
constexpr int64_t kTilePrefetchColumns = 4;

/// The 4 bytes of xq from value 4k, in every 32-bit lane.
__attribute__((target("avx2,fma,f16c"))) inline __m256i broadcast4(const int8_t* xq, int k) {
  int32_t v;
  std::memcpy(&v, xq + 4 * k, sizeof v);
  return _mm256_set1_epi32(v);
}

/// One tile block column's weights as register operands, w[k] holding values 4k..4k+3 of the 8
/// rows: Q4_0 as unsigned nibbles, Q5_0 as unsigned 5-bit q (0..31); Q8_0 as int8, with a[k] = |w[k]|.
template <QuantFormat F>
struct TileWeights {
  __m256i w[8], a[F == QuantFormat::Q8_0 ? 8 : 1];
};

template <QuantFormat F>
__attribute__((target("avx2,fma,f16c"))) inline void load_tile_weights(const uint8_t* values, TileWeights<F>& t) {
  if constexpr (F == QuantFormat::Q8_0) {
    for (int k = 0; k < 8; ++k) {
      t.w[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + 32 * k));
      t.a[k] = _mm256_sign_epi8(t.w[k], t.w[k]);
    }
  } else {
    const uint8_t* qs = values + (F == QuantFormat::Q5_0 ? 32 : 0);  // Q5_0: after the rows' qh
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    for (int c = 0; c < 4; ++c) {
      const __m256i chunk = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
      t.w[c] = _mm256_and_si256(chunk, nibble);
      t.w[c + 4] = _mm256_and_si256(_mm256_srli_epi16(chunk, 4), nibble);
    }
    if constexpr (F == QuantFormat::Q5_0) {
      // Lane r of qh is row r's fifth bits (bit j: value j). Values `first`..first+3 of w[k]: their 4
      // bits to bit 0 of bytes 0..3 (× 0x00204081 puts bit j at bit 8j, the copies never overlap),
      // then 0x10.
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values));
      for (int k = 0; k < 8; ++k) {
        const int first = 4 * k;  // w[k] holds values 4k..4k+3 (k ≥ 4: the high nibbles)
        const __m256i bits = _mm256_and_si256(_mm256_srl_epi32(qh, _mm_cvtsi32_si128(first)), _mm256_set1_epi32(0xF));
        const __m256i spread =
            _mm256_and_si256(_mm256_mullo_epi32(bits, _mm256_set1_epi32(0x00204081)), _mm256_set1_epi32(0x01010101));
        t.w[k] = _mm256_or_si256(t.w[k], _mm256_slli_epi32(spread, 4));
      }
    }
  }
}

/// Lane r: the exact int32 dot product of block row r with the block's 32 int8 inputs xq (Q4_0:
/// Σ q·xq − 8·Σxq, `sx`; Q5_0: − 16·Σxq) by vpdpbusd in two chains (Q8_0: |w| against sign(w)·x,
/// as block_dot_i8).
template <QuantFormat F>
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni"))) inline __m256i tile8_sums_vnni(
    const TileWeights<F>& t, const int8_t* xq, int32_t sx) {
  __m256i even = _mm256_set1_epi32(-centre_of(F) * sx);
  __m256i odd = _mm256_setzero_si256();
  for (int k = 0; k < 8; k += 2) {
    if constexpr (F == QuantFormat::Q8_0) {
      even = _mm256_dpbusd_epi32(even, t.a[k], _mm256_sign_epi8(broadcast4(xq, k), t.w[k]));
      odd = _mm256_dpbusd_epi32(odd, t.a[k + 1], _mm256_sign_epi8(broadcast4(xq, k + 1), t.w[k + 1]));
    } else {
      even = _mm256_dpbusd_epi32(even, t.w[k], broadcast4(xq, k));
      odd = _mm256_dpbusd_epi32(odd, t.w[k + 1], broadcast4(xq, k + 1));
    }
  }
  return _mm256_add_epi32(even, odd);
}

/// tile8_sums_vnni's integers by maddubs: Q4_0's products added in int16 (|Σ| ≤ 8·2·15·127 =
/// 30480 < 2¹⁵), Q5_0's four k at a time (4·2·31·127 = 31496), Q8_0's widened one by one (2·127²
/// fits int16, twice that would not).
template <QuantFormat F>
__attribute__((target("avx2,fma,f16c"))) inline __m256i tile8_sums_avx2(const TileWeights<F>& t, const int8_t* xq,
                                                                        int32_t sx) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (F == QuantFormat::Q8_0) {
    __m256i sums = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) {
      const __m256i pairs = _mm256_maddubs_epi16(t.a[k], _mm256_sign_epi8(broadcast4(xq, k), t.w[k]));
      sums = _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, ones));
    }
    return sums;
  } else {
    constexpr int group = F == QuantFormat::Q5_0 ? 4 : 8;  // k added in int16 before widening
    __m256i sums = _mm256_set1_epi32(-centre_of(F) * sx);
    for (int k0 = 0; k0 < 8; k0 += group) {
      __m256i pairs = _mm256_maddubs_epi16(t.w[k0], broadcast4(xq, k0));
      for (int k = k0 + 1; k < k0 + group; ++k)
        pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(t.w[k], broadcast4(xq, k)));
      sums = _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, ones));
    }
    return sums;
  }
}

/// y[b0 + c, 8t..8t+7] for tile t and the BC input rows b0..: each block column's weights are
/// loaded once for all BC inputs; lane r of acc[c] is row 8t + r's dot product, its blocks added
/// in order (dot_tiles8_portable's steps).
template <int BC, QuantFormat F, bool VNNI>
__attribute__((target("avx2,fma,f16c"))) inline void tile8_avx2(const QuantMatrix& W, int64_t t, const Inputs& in,
                                                                int64_t b0, float* y, int64_t ldy) {
  const int64_t nb = in.K / kBlock, column_bytes = 8 * block_bytes_of(F);
  const uint8_t* tile = W.tile(t);
  __m256 acc[BC];
  for (int c = 0; c < BC; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const uint8_t* column = tile + ib * column_bytes;
    for (int64_t at = 0; at < column_bytes; at += 64)  // the stream kTilePrefetchColumns ahead
      _mm_prefetch(reinterpret_cast<const char*>(column + kTilePrefetchColumns * column_bytes + at), _MM_HINT_T0);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(column)));
    TileWeights<F> weights;
    load_tile_weights<F>(column + 8 * kScaleBytes, weights);
#pragma GCC unroll 4
    for (int c = 0; c < BC; ++c) {
      const int64_t at = (b0 + c) * nb + ib;
      const int32_t sx = F != QuantFormat::Q8_0 ? in.sx[at] : 0;
      __m256i s;
      if constexpr (VNNI)
        s = tile8_sums_vnni<F>(weights, in.xq + at * kBlock, sx);
      else
        s = tile8_sums_avx2<F>(weights, in.xq + at * kBlock, sx);
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(in.dx[at])), acc[c]);
    }
  }
  for (int c = 0; c < BC; ++c) _mm256_storeu_ps(y + (b0 + c) * ldy + 8 * t, acc[c]);
}

/// Tiles t0..t1 against all B input rows: per tile, the inputs in groups of 4, 2, 1 (the tile's
/// blocks stay in L1 across them).
template <QuantFormat F, bool VNNI>
__attribute__((target("avx2,fma,f16c"))) inline void tiles8_rows(const QuantMatrix& W, const Inputs& in, int64_t B,
                                                                 float* y, int64_t ldy, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    int64_t b = 0;
    for (; b + 4 <= B; b += 4) tile8_avx2<4, F, VNNI>(W, t, in, b, y, ldy);
    if (b + 2 <= B) tile8_avx2<2, F, VNNI>(W, t, in, b, y, ldy), b += 2;
    if (b < B) tile8_avx2<1, F, VNNI>(W, t, in, b, y, ldy);
  }
}
template <QuantFormat F>
__attribute__((target("avx2,fma,f16c"), flatten)) void tiles8_avx2(const QuantMatrix& W, const Inputs& in, int64_t B,
                                                                   float* y, int64_t ldy, int64_t t0, int64_t t1) {
  tiles8_rows<F, false>(W, in, B, y, ldy, t0, t1);
}
template <QuantFormat F>
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni"), flatten)) void tiles8_vnni(
    const QuantMatrix& W, const Inputs& in, int64_t B, float* y, int64_t ldy, int64_t t0, int64_t t1) {
  tiles8_rows<F, true>(W, in, B, y, ldy, t0, t1);
}

/// quant_linear of a Tiles8 matrix: tiles split across the intra-op threads, the last N mod 8
/// rows with the last tiles.
void tiles8_linear(const QuantMatrix& W, const Inputs& in, int64_t B, float* y, int64_t ldy) {
  const int64_t tiles = W.tiled_rows() / 8, N = W.rows();
  const bool vnni = cpu_has_avx512_vnni();
  RowsFn simd = nullptr;
  if (cpu_has_avx2()) switch (W.format()) {
      case QuantFormat::Q8_0: simd = vnni ? tiles8_vnni<QuantFormat::Q8_0> : tiles8_avx2<QuantFormat::Q8_0>; break;
      case QuantFormat::Q4_0: simd = vnni ? tiles8_vnni<QuantFormat::Q4_0> : tiles8_avx2<QuantFormat::Q4_0>; break;
      case QuantFormat::Q5_0: simd = vnni ? tiles8_vnni<QuantFormat::Q5_0> : tiles8_avx2<QuantFormat::Q5_0>; break;
      default: break;  // the K formats have no tiles
    }
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 13) / in.K);  // quant_linear's grain of rows / 8
  at::parallel_for(0, tiles + 1, grain, [&](int64_t t0, int64_t t1) {
    const int64_t last = std::min(t1, tiles);  // index `tiles` stands for the rows after the tiles
    if (simd && t0 < last) simd(W, in, B, y, ldy, t0, last);
    const int64_t n0 = simd ? std::max(8 * t0, W.tiled_rows()) : 8 * t0, n1 = t1 > tiles ? N : 8 * last;
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t b = 0; b < B; ++b) y[b * ldy + n] = dot_tiles8_portable(W, n, in, b);
  });
}

/// The SIMD kernel of a 32-value format (Q8_0, Q4_0, Q5_0) and activation kind (AVX-512 VNNI
/// where the CPU has it and the activations are int8, else AVX2).
template <QuantFormat F>
RowsFn simd_kernel_of(Q8Activations act) {
  if (act == Q8Activations::Fp32) return rows_avx2<Q8Activations::Fp32, F>;
  if (cpu_has_avx512_vnni()) return rows_vnni<F>;
  return rows_avx2<Q8Activations::Int8, F>;
}
RowsFn simd_kernel(QuantFormat format, Q8Activations act) {
  switch (format) {
    case QuantFormat::Q8_0: return simd_kernel_of<QuantFormat::Q8_0>(act);
    case QuantFormat::Q4_0: return simd_kernel_of<QuantFormat::Q4_0>(act);
    case QuantFormat::Q5_0: return simd_kernel_of<QuantFormat::Q5_0>(act);
    default: return act == Q8Activations::Int8 ? detail::k_quant_simd_kernel(format) : nullptr;
  }
}

}  // namespace

int64_t QuantMatrix::block_bytes() const { return block_bytes_of(format_); }

const uint8_t* QuantMatrix::block(int64_t n, int64_t ib) const {
  if (n < tiled_rows()) throw Error("QuantMatrix::block: row " + std::to_string(n) + " lies in a tile of 8 rows");
  return data_ + (n * (cols_ / block_values()) + ib) * block_bytes();  // the Tiles8 rest starts where the tiles end
}

void QuantMatrix::copy_block(int64_t n, int64_t ib, uint8_t* out) const {
  if (layout_ == QuantLayout::Rows)
    std::memcpy(out, block(n, ib), size_t(block_bytes()));
  else
    untile8_block(quant_format_ggml_type(format_), rows_, cols_, data_, n, ib, out);
}

void QuantMatrix::move_to(uint8_t* destination, std::shared_ptr<uint8_t> owner, QuantLayout layout) {
  if (layout != layout_ && layout_ != QuantLayout::Rows)
    throw Error("QuantMatrix::move_to: blocks in tiles of 8 rows cannot go back to rows");
  if (layout == QuantLayout::Tiles8 && !quant_format_tiles(format_))
    throw Error(std::string("QuantMatrix::move_to: tiles of 8 rows hold Q8_0, Q4_0 or Q5_0 blocks, not ") +
                quant_format_name(format_));
  std::memcpy(destination, data_, size_t(bytes_));
  if (layout != layout_) tile8_blocks(quant_format_ggml_type(format_), rows_, cols_, destination);
  layout_ = layout;
  owner_ = std::move(owner);
  data_ = destination;
}

QuantMatrix QuantMatrix::from_blocks(QuantFormat format, int64_t N, int64_t K, const uint8_t* data,
                                     std::shared_ptr<uint8_t> owner, QuantLayout layout) {
  const int64_t values = quant_block_values(format);
  if (K <= 0 || K % values != 0)
    throw Error(std::string(quant_format_name(format)) + " needs rows of a positive multiple of " +
                std::to_string(values) + " values (got " + std::to_string(K) + ")");
  if (layout == QuantLayout::Tiles8 && !quant_format_tiles(format))
    throw Error(std::string("tiles of 8 rows hold Q8_0, Q4_0 or Q5_0 blocks, not ") + quant_format_name(format));
  QuantMatrix m;
  m.format_ = format;
  m.layout_ = layout;
  m.rows_ = N;
  m.cols_ = K;
  m.bytes_ = N * (K / values) * m.block_bytes();
  m.owner_ = std::move(owner);
  m.data_ = const_cast<uint8_t*>(data);  // read only: move_to, the one writer, is not called on these
  return m;
}

QuantMatrix QuantMatrix::quantize(QuantFormat format, const float* W, int64_t N, int64_t K) {
  if (format != QuantFormat::Q8_0 && format != QuantFormat::Q4_0)
    throw Error(std::string("fbt quantises to Q8_0 and Q4_0, not ") + quant_format_name(format) +
                " (whose blocks come from GGUF files)");
  const int64_t bytes = N * K / kBlock * block_bytes_of(format);
  std::shared_ptr<uint8_t> owner(new uint8_t[std::max<int64_t>(bytes, 1)], std::default_delete<uint8_t[]>());
  QuantMatrix m = from_blocks(format, N, K, owner.get(), owner);
  const int64_t blocks = N * K / kBlock, bb = m.block_bytes();
  for (int64_t i = 0; i < blocks; ++i) {
    uint8_t* block = m.data_ + i * bb;
    const float d = format == QuantFormat::Q8_0
                        ? quantize_block_q8(W + i * kBlock, reinterpret_cast<int8_t*>(block + kScaleBytes))
                        : quantize_block_q4(W + i * kBlock, block + kScaleBytes);
    const uint16_t bits = c10::Half(d).x;
    std::memcpy(block, &bits, sizeof bits);
  }
  return m;
}

void QuantMatrix::dequantize_row(int64_t n, float* out) const {
  const uint32_t type = quant_format_ggml_type(format_);
  if (n >= tiled_rows()) return dequantize_blocks(type, block(n, 0), cols_, out);
  uint8_t b[block_bytes_of(QuantFormat::Q8_0)];
  for (int64_t ib = 0; ib < cols_ / kBlock; ++ib) {
    copy_block(n, ib, b);
    dequantize_blocks(type, b, kBlock, out + ib * kBlock);
  }
}

int quant_kernel_threads() { return detail::parallel_for_threads_here(); }

void quant_linear(const float* x, int64_t B, const QuantMatrix& W, float* y, Q8Activations act, int64_t ldy) {
  const int64_t K = W.cols(), nb = K / kBlock;
  if (ldy == 0) ldy = W.rows();
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> dx;
  thread_local std::vector<int32_t> sx;
  if (act == Q8Activations::Int8) {
    // Q4_0's and Q5_0's offsets (tile_avx2) and Q4_K's minimums need each block's Σxq.
    const bool sums = W.format() != QuantFormat::Q8_0 && W.format() != QuantFormat::Q6_K;
    xq.resize(B * K);
    dx.resize(B * nb);
    sx.resize(sums ? B * nb : 0);
    for (int64_t i = 0; i < B * nb; ++i) {
      dx[i] = quantize_block_q8(x + i * kBlock, xq.data() + i * kBlock);
      if (!sums) continue;
      sx[i] = 0;
      for (int64_t j = 0; j < kBlock; ++j) sx[i] += xq[i * kBlock + j];
    }
  }
  const Inputs in{x, xq.data(), dx.data(), sx.data(), K};
  if (W.layout() == QuantLayout::Tiles8) {
    if (act != Q8Activations::Int8) throw Error("quant_linear: a matrix in tiles of 8 rows needs int8 activations");
    return tiles8_linear(W, in, B, y, ldy);
  }
  const RowsFn simd = cpu_has_avx2() ? simd_kernel(W.format(), act) : nullptr;
  const bool k_format = W.block_values() != kBlock;
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / K);  // ~64 KiB of Q8_0 weights per task
  at::parallel_for(0, W.rows(), grain, [&](int64_t n0, int64_t n1) {
    if (simd)
      simd(W, in, B, y, ldy, n0, n1);
    else if (k_format)
      detail::dequantized_rows(W, in, B, y, ldy, n0, n1, act);
    else
      rows_portable(W, in, B, y, ldy, n0, n1, act);
  });
}

}  // namespace fbt
