// ggml tensor types of GGUF files: their names, block layouts, and dequantization to fp32.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <torch/types.h>

namespace fbt {

/// ggml_type ids (ggml.h) of the block formats fbt also keeps quantised for decoding (quant_gemv.h).
constexpr uint32_t kGgmlQ4_0 = 2, kGgmlQ8_0 = 8;

/// The name of a ggml_type id as ggml.h spells it ("F32", "Q4_0", "Q4_K", ...), or "type N"
/// for an id ggml does not define.
std::string ggml_type_name(uint32_t type);

/// How a type fbt can dequantize stores its values: `bytes` bytes hold `elements` consecutive
/// values (1 for plain floats, 32 for the block types).
struct GgmlBlockLayout {
  int64_t elements = 1, bytes = 4;
};

/// The layout of `type` when fbt can dequantize it (F32, F16, BF16, Q8_0, Q4_0, Q4_1), else
/// nullopt.
std::optional<GgmlBlockLayout> ggml_block_layout(uint32_t type);

/// The `n` values stored at `data` in `type` as an fp32 tensor [n] (ggml's dequantize_row_*; the
/// block layouts of ggml's docs/gguf.md and ggml-common.h, all little-endian):
///   Q8_0: fp16 d, then 32 int8 q;            x_i = q_i · d
///   Q4_0: fp16 d, then 16 bytes;             x_i = (q_i − 8) · d
///   Q4_1: fp16 d, fp16 m, then 16 bytes;     x_i = q_i · d + m
/// where in the 4-bit types byte j holds q_j in its low nibble and q_(j+16) in its high one.
/// `n` must be a multiple of the block size and `data` must hold n / elements × bytes bytes
/// (the caller checks both against the file); `type` must have a layout.
torch::Tensor dequantize_ggml(uint32_t type, const uint8_t* data, int64_t n);

/// dequantize_ggml into out [n] (fp32) for a block type (Q8_0, Q4_0, Q4_1).
void dequantize_blocks(uint32_t type, const uint8_t* data, int64_t n, float* out);

}  // namespace fbt
