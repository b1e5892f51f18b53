// What quant_linear's kernels share (quant_gemv.cpp: the 32-value formats; quant_gemv_k.cpp: the
// K formats): the input rows of one product and a kernel's signature. Internal to src/infer.
#pragma once
#include <cstdint>

#include "fbt/infer/quant_gemv.h"

namespace fbt::detail {

/// The input rows of one product: fp32 x [B, K], and for Int8 activations their blocks of 32.
struct QuantInputs {
  const float* x;
  const int8_t* xq;   ///< [B, K] int8 values
  const float* dx;    ///< [B, K/32] fp32 scales: x ≈ xq · dx
  const int32_t* sx;  ///< [B, K/32] Σ of each block's 32 int8 values (the formats with an offset or a minimum)
  int64_t K;
};

/// The rows n0..n1 of y [B, ldy] (columns n0..n1) for the B input rows.
using QuantRowsFn = void (*)(const QuantMatrix& W, const QuantInputs& in, int64_t B, float* y, int64_t ldy, int64_t n0,
                             int64_t n1);

/// Adds 8 partial sums pairwise (4+4, 2+2, 1+1).
inline float reduce8(float* a) {
  for (int half = 4; half >= 1; half /= 2)
    for (int j = 0; j < half; ++j) a[j] += a[j + half];
  return a[0];
}

/// The SIMD kernel of a K format (Q4_K, Q6_K) with int8 activations: AVX2, or AVX-512 VNNI where
/// the CPU has it (the same integer sums: the same bits); nullptr on CPUs without AVX2.
QuantRowsFn k_quant_simd_kernel(QuantFormat format);

/// Any format's rows by dequantising each block (gguf_quants.h) and summing w·(xq·dx) (Int8) or
/// w·x (Fp32) in fp32, block by block into 8 partial sums (block i into sum i mod 8), then
/// pairwise: the portable path of the K formats and their path with fp32 activations.
void dequantized_rows(const QuantMatrix& W, const QuantInputs& in, int64_t B, float* y, int64_t ldy, int64_t n0,
                      int64_t n1, Q8Activations act);

}  // namespace fbt::detail
