// Quantised weights for CPU decoding: ggml's Q8_0, Q4_0, Q5_0, Q4_K and Q6_K block formats and their
// matrix-vector product.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fbt/io/gguf_quants.h"

namespace fbt {

/// How a QuantMatrix orders its blocks in memory (the same bytes, permuted).
enum class QuantLayout {
  Rows,    ///< ggml's: row-major, row n's K/32 blocks one after the other (what files hold)
  Tiles8,  ///< the int8-activation kernel's (gguf_quants.h, tile8_blocks): rows in tiles of 8, a
           ///< tile's block column stored as the 8 scales, then 32-byte chunks holding 4 values of
           ///< each of the 8 rows, so one load feeds 8 rows' dot products and their 8 results land
           ///< in the lanes of one register; a last N mod 8 rows follow in the Rows layout
};

/// A [N, K] weight matrix in blocks of one QuantFormat, row-major, so a row is one stream of
/// memory (ggml-quants.c quantize_row_q8_0_ref / quantize_row_q4_0_ref), or in tiles of 8 rows
/// (QuantLayout::Tiles8). Q8_0 takes 1.0625 bytes per weight, Q6_K 0.8203, Q5_0 0.6875, Q4_0 and
/// Q4_K 0.5625, against 4 for fp32.
class QuantMatrix {
 public:
  static constexpr int64_t kBlock = 32;  ///< values per block of the 32-value formats and of the int8 activations

  /// Quantises W [N, K] row-major fp32. A Q8_0 tensor dequantised from a GGUF file quantises back
  /// to its own blocks (the block maximum is ±127·d), so imported Q8_0 weights keep their values;
  /// so do Q4_0 ones quantised by ggml's reference rule (the maximum is −8·d), not those of
  /// llama-quantize with an importance matrix. Throws fbt::Error unless K is a positive multiple
  /// of 32, or for a format other than Q8_0 and Q4_0.
  static QuantMatrix quantize(QuantFormat format, const float* W, int64_t N, int64_t K);
  /// The [N, K] matrix whose blocks are already at `data` in `layout` (a quantised checkpoint's,
  /// loaded by load_model), read in place and kept alive by `owner`. Throws fbt::Error unless K is
  /// a positive multiple of the format's block values (32, or 256 for Q4_K and Q6_K), or for
  /// Tiles8 of a format it does not hold.
  static QuantMatrix from_blocks(QuantFormat format, int64_t N, int64_t K, const uint8_t* data,
                                 std::shared_ptr<uint8_t> owner, QuantLayout layout = QuantLayout::Rows);

  QuantFormat format() const { return format_; }
  QuantLayout layout() const { return layout_; }
  int64_t rows() const { return rows_; }  ///< N
  int64_t cols() const { return cols_; }  ///< K
  /// Bytes of one block (34 for Q8_0, 18 for Q4_0, 22 for Q5_0, 144 for Q4_K, 210 for Q6_K), its
  /// values (quant_block_values) and the bytes of the whole matrix.
  int64_t block_bytes() const;
  int64_t block_values() const { return quant_block_values(format_); }
  int64_t bytes() const { return bytes_; }
  /// The bytes of block `ib` (of block_values()) of row `n` in ggml's layout: any row in the Rows layout, and in
  /// Tiles8 the last N mod 8 rows (n ≥ tiled_rows()). Throws fbt::Error for a row inside a tile.
  const uint8_t* block(int64_t n, int64_t ib) const;
  /// Rows in tiles of 8: 8·⌊N/8⌋ in the Tiles8 layout, 0 in Rows.
  int64_t tiled_rows() const { return layout_ == QuantLayout::Tiles8 ? rows_ / 8 * 8 : 0; }
  /// The bytes of tile t (rows 8t..8t+7) in the Tiles8 layout: K/32 block columns of 8 blocks' bytes.
  const uint8_t* tile(int64_t t) const { return data_ + t * (cols_ / kBlock) * 8 * block_bytes(); }
  /// Block ib of row n in ggml's layout (block_bytes() of them) copied to `out`, in any layout.
  void copy_block(int64_t n, int64_t ib, uint8_t* out) const;
  /// Row n dequantised into out [K].
  void dequantize_row(int64_t n, float* out) const;
  /// Copies the blocks to `destination` (bytes() of them, kept alive by `owner`) in `layout` and
  /// frees their current memory: CpuDecoder gathers every matrix into one huge-page mapping
  /// (huge_pages.h), in the Tiles8 layout for int8 activations. Throws fbt::Error for a layout
  /// change other than Rows → Tiles8.
  void move_to(uint8_t* destination, std::shared_ptr<uint8_t> owner, QuantLayout layout = QuantLayout::Rows);

 private:
  QuantFormat format_ = QuantFormat::Q8_0;
  QuantLayout layout_ = QuantLayout::Rows;
  int64_t rows_ = 0, cols_ = 0, bytes_ = 0;
  std::shared_ptr<uint8_t> owner_;  ///< the memory holding the blocks
  uint8_t* data_ = nullptr;         ///< [N, K/block_values()] blocks
};

/// How quant_linear treats the input rows.
enum class Q8Activations {
  Int8,  ///< quantised per block of 32 to int8 with an fp32 scale, integer dot products (llama.cpp's
         ///< vec_dot_q8_0_q8_0 / vec_dot_q4_0_q8_0)
  Fp32,  ///< kept in fp32; the weights are widened to fp32 block by block
};

/// y[B,N] = x[B,K] · Wᵀ with W quantised, fp32 in and out: per block, the dot product of the 32
/// values (exact in int32 for Int8 activations) times the scales, the blocks summed in a fixed
/// order (Rows layout, AVX2: 8 lanes of partial sums within each block, even and odd blocks in two
/// chains added at the end; portable code: block i into partial sum i mod 8; then pairwise.
/// Tiles8 layout: each block's exact int32 sum, converted to fp32, times fp32(d_w·d_x), added in
/// block order by fused multiply-adds, in SIMD and portable code alike: the same bits). Like
/// batch_invariant_linear, a row's result is the same bits at any B (serving), and rows n are split
/// across libtorch's intra-op threads. The AVX2 kernel is chosen once at run time where the CPU
/// has it (with Int8 activations on AVX-512 VNNI CPUs its vpdpbusd variant: the same int32 block
/// sums, so the same bits); AVX2 and portable code round differently for the Rows layout, but one
/// process only ever runs one. Throws fbt::Error for a Tiles8 matrix with Fp32 activations. x may
/// not alias y.
///
/// Q5_0 takes Q4_0's steps with values q − 16. The K formats, with int8 activations in blocks of 32
/// (not llama.cpp's Q8_K blocks of 256: the activations are quantised once, by one rule, for every
/// format), per 32-value block: Q4_K float(Σ q·xq) times fp32((d·s)·d_x), less (dmin·m)·(d_x·Σxq)
/// in a chain of its own; Q6_K 4-value sums of (q − 32)·xq (exact int32) times their 16-value
/// sub-block's scale s and d·d_x. On AVX-512 VNNI CPUs two blocks share a 512-bit vpdpbusd and one
/// chain of fused multiply-adds (other bits than the AVX2 kernel's, whose even and odd blocks go
/// to two chains; a process runs one). Their portable code (and every K product with fp32
/// activations) dequantises a super-block (gguf_quants.h) and sums w·(xq·d_x) or w·x. The K
/// formats stay in the Rows layout. FBT_CPU (cpu_features.h) caps the kernels' level.
///
/// y's rows are `ldy` apart (0: N), so products of stacked matrices in several formats fill their
/// columns of one output.
void quant_linear(const float* x, int64_t B, const QuantMatrix& W, float* y, Q8Activations activations,
                  int64_t ldy = 0);

/// at::parallel_for's thread count in this kernel's translation unit (decode_kernel_threads(),
/// batch_gemv.h, checks both kernel files).
int quant_kernel_threads();
}  // namespace fbt
