// 8-bit weights for CPU decoding: GGUF's Q8_0 block format and its matrix-vector product.
#pragma once
#include <cstdint>
#include <vector>

#include "fbt/io/gguf_quants.h"

namespace fbt {

/// A [N, K] weight matrix in Q8_0 blocks, row-major, so a row is one stream of memory
/// (ggml-quants.c quantize_row_q8_0_ref: d = max|w|/127 over the block, q = round(w/d)).
/// 1.0625 bytes per weight, against 4 for fp32.
struct Q8Matrix {
  int64_t rows = 0, cols = 0;   ///< N, K (K a multiple of 32)
  std::vector<BlockQ8> blocks;  ///< [N, K/32], row-major

  static constexpr int64_t kBlock = 32;

  /// Quantises W [N, K] row-major fp32. A Q8_0 tensor dequantised on import quantises back to
  /// its own blocks (the block maximum is ±127·d), so GGUF Q8_0 weights keep their values.
  /// Throws fbt::Error unless K is a positive multiple of 32.
  static Q8Matrix quantize(const float* W, int64_t N, int64_t K);
  /// Row n dequantised into out [K].
  void dequantize_row(int64_t n, float* out) const;
  /// Bytes of the blocks.
  int64_t bytes() const { return int64_t(blocks.size() * sizeof(BlockQ8)); }
};

/// How q8_linear treats the input rows.
enum class Q8Activations {
  Int8,  ///< quantised per block of 32 to int8 with an fp32 scale, integer dot products (llama.cpp's Q8_0·Q8_0)
  Fp32,  ///< kept in fp32; the weights are widened to fp32 block by block
};

/// y[B,N] = x[B,K] · Wᵀ with W in Q8_0, fp32 in and out: per block, the dot product of the 32
/// values (exact in int32 for Int8 activations) times the scales, blocks summed in order into 8
/// partial sums added pairwise. Like batch_invariant_linear, a row's result is the same bits at
/// any B (serving), and rows n are split across libtorch's intra-op threads. AVX2 where the CPU
/// has it (chosen at run time), else portable code. x may not alias y.
void q8_linear(const float* x, int64_t B, const Q8Matrix& W, float* y, Q8Activations activations);

}  // namespace fbt
