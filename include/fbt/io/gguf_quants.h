// ggml tensor types of GGUF files: their names, block layouts, and dequantization to fp32.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <torch/types.h>

namespace fbt {

/// ggml_type ids (ggml.h) of the block formats fbt also keeps quantised for decoding (quant_gemv.h).
constexpr uint32_t kGgmlQ4_0 = 2, kGgmlQ5_0 = 6, kGgmlQ8_0 = 8, kGgmlQ4_K = 12, kGgmlQ6_K = 14;

/// A block format of ggml (ggml-common.h; gguf_quants.h spells out every layout): consecutive values
/// of a weight row with their scales. fbt quantises to Q8_0 and Q4_0 itself; Q5_0, Q4_K and Q6_K
/// blocks come from GGUF files (`fbt quantize --from-gguf`), read in place.
enum class QuantFormat {
  Q8_0,  ///< 34 bytes / 32 values: d, 32 int8 q;  w_i = d·q_i, d = max|w|/127, q = round(w/d)
  Q4_0,  ///< 18 bytes / 32 values: d, 16 bytes of two 4-bit q each;  w_i = d·(q_i − 8), d = m/−8 with
         ///< m the value of largest |w|, q = min(15, trunc(w/d + 8.5)); byte j holds q_j (low nibble)
         ///< and q_(j+16)
  Q5_0,  ///< 22 bytes / 32 values: d, the fifth bits qh, 16 bytes as Q4_0;  w_i = d·(q_i − 16)
  Q4_K,  ///< 144 bytes / 256 values: d, dmin, 8 sub-blocks of 32 with 6-bit scale s and min m;
         ///< w_i = d·s·q_i − dmin·m, q 4-bit
  Q6_K,  ///< 210 bytes / 256 values: 16 sub-blocks of 16 with int8 scales s, then d;
         ///< w_i = d·s·(q_i − 32), q 6-bit
};

/// The name of `format` as ggml spells it ("Q8_0", "Q4_0", "Q5_0", "Q4_K", "Q6_K").
const char* quant_format_name(QuantFormat format);
/// The ggml_type id of `format`.
uint32_t quant_format_ggml_type(QuantFormat format);
/// Values per block of `format`: 32, or 256 for the K formats' super-blocks.
int64_t quant_block_values(QuantFormat format);
/// Whether the Tiles8 layout (quant_gemv.h) holds `format`: Q8_0, Q4_0 and Q5_0; the K formats stay in Rows.
bool quant_format_tiles(QuantFormat format);

/// The format of ggml type `type` where it is one of these, else nullopt.
std::optional<QuantFormat> quant_format_of_ggml_type(uint32_t type);
/// The format named `name` ("Q8_0", "Q4_0", "Q5_0", "Q4_K", "Q6_K"); throws fbt::Error naming
/// `origin` otherwise.
QuantFormat quant_format_named(const std::string& name, const std::string& origin);

/// The name of a ggml_type id as ggml.h spells it ("F32", "Q4_0", "Q4_K", ...), or "type N"
/// for an id ggml does not define.
std::string ggml_type_name(uint32_t type);

/// How a type fbt can dequantize stores its values: `bytes` bytes hold `elements` consecutive
/// values (1 for plain floats, 32 for the Q4_0 ... Q8_0 blocks, 256 for the K super-blocks).
struct GgmlBlockLayout {
  int64_t elements = 1, bytes = 4;
};

/// The layout of `type` when fbt can dequantize it (ggml_supported_types()), else nullopt (the IQ
/// types, Q8_1, the ternary and MXFP4 types, ids ggml does not define).
std::optional<GgmlBlockLayout> ggml_block_layout(uint32_t type);

/// The names of the types fbt can dequantize, comma-separated, for error messages.
std::string ggml_supported_types();

/// The `n` values stored at `data` in `type` as an fp32 tensor [n] (ggml's dequantize_row_*; the
/// block layouts of ggml's docs/gguf.md and ggml-common.h, all little-endian; d, m and dmin fp16
/// except Q8_K's fp32 d):
///   Q8_0: d, then 32 int8 q;                         x_i = q_i · d
///   Q4_0: d, then 16 bytes;                          x_i = (q_i − 8) · d
///   Q4_1: d, m, then 16 bytes;                       x_i = q_i · d + m
///   Q5_0: d, 4 bytes qh, 16 bytes;                   x_i = (q_i − 16) · d   (bit 4 of q_i: bit i of qh)
///   Q5_1: d, m, 4 bytes qh, 16 bytes;                x_i = q_i · d + m
///   Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K: super-blocks of 256 values whose 16 (or 8) sub-blocks carry
///   their own 4- to 8-bit scales (and minimums), times d (and dmin); gguf_quants.cpp spells out
///   each layout.
/// where in the 32-value 4- and 5-bit types byte j holds q_j in its low nibble and q_(j+16) in its
/// high one. `n` must be a multiple of the block size and `data` must hold n / elements × bytes
/// bytes (the caller checks both against the file); `type` must have a layout. Throws fbt::Error
/// ("block 3 has a non-finite scale d (inf)") for a block whose scale is inf or NaN.
torch::Tensor dequantize_ggml(uint32_t type, const uint8_t* data, int64_t n);

/// dequantize_ggml into out [n] (fp32) for a block type (any supported type but F32, F16, BF16).
void dequantize_blocks(uint32_t type, const uint8_t* data, int64_t n, float* out);

/// Reorders the rows × cols/32 blocks of a Q8_0, Q4_0 or Q5_0 matrix at `data`, in ggml's
/// row-major layout, in place into tiles of 8 rows (the layout of fbt's int8-activation kernels,
/// quant_gemv.h's QuantLayout::Tiles8; the idea of llama.cpp's Q4_0 repacking): tile t (rows
/// 8t..8t+7) holds its block columns ib = 0.. one after the other, each as the 8 rows' fp16 scales
/// (16 bytes) then chunks of 32 bytes, chunk c holding bytes 4c..4c+3 of each row's bytes after its
/// scale in row order (Q8_0: 8 chunks, values 4c..4c+3; Q4_0: 4 chunks, whose low nibbles are
/// values 4c..4c+3 and high nibbles values 16+4c..19+4c; Q5_0: chunk 0 the 8 rows' fifth bits qh,
/// then Q4_0's 4 chunks); the last rows mod 8 stay row-major after the tiles. The same bytes,
/// permuted within each tile. Throws fbt::Error for another type.
void tile8_blocks(uint32_t type, int64_t rows, int64_t cols, uint8_t* data);

/// Block ib of row n of a tile8_blocks matrix, copied to `out` in ggml's layout (34, 18 or 22 bytes).
void untile8_block(uint32_t type, int64_t rows, int64_t cols, const uint8_t* data, int64_t n, int64_t ib, uint8_t* out);

}  // namespace fbt
