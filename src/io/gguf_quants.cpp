// ggml tensor types: names (ggml.h's enum ggml_type), block layouts and dequantization to fp32.
#include "fbt/io/gguf_quants.h"

#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include <c10/util/Half.h>

#include "fbt/util/error.h"

namespace fbt {
namespace {

// ggml.h's enum ggml_type; the gaps are ids ggml has retired.
const std::map<uint32_t, std::string>& type_names() {
  static const std::map<uint32_t, std::string> names = {
      {0, "F32"},      {1, "F16"},     {2, "Q4_0"},     {3, "Q4_1"},   {6, "Q5_0"},    {7, "Q5_1"},   {8, "Q8_0"},
      {9, "Q8_1"},     {10, "Q2_K"},   {11, "Q3_K"},    {12, "Q4_K"},  {13, "Q5_K"},   {14, "Q6_K"},  {15, "Q8_K"},
      {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"}, {20, "IQ4_NL"}, {21, "IQ3_S"}, {22, "IQ2_S"},
      {23, "IQ4_XS"},  {24, "I8"},     {25, "I16"},     {26, "I32"},   {27, "I64"},    {28, "F64"},   {29, "IQ1_M"},
      {30, "BF16"},    {34, "TQ1_0"},  {35, "TQ2_0"},   {39, "MXFP4"}};
  return names;
}

enum : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = kGgmlQ4_0,
  kQ4_1 = 3,
  kQ5_0 = kGgmlQ5_0,
  kQ5_1 = 7,
  kQ8_0 = kGgmlQ8_0,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = kGgmlQ4_K,
  kQ5_K = 13,
  kQ6_K = kGgmlQ6_K,
  kQ8_K = 15,
  kBF16 = 30
};
constexpr int64_t kGgmlBlock = 32;    // values per block of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (QK4_0 ...)
constexpr int64_t kSuperBlock = 256;  // values per super-block of the K types (QK_K)

float half_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
}

/// Plain floats of `dtype` (F32, F16, BF16), copied out of the file's bytes and widened.
torch::Tensor widen(const uint8_t* data, int64_t n, torch::Dtype dtype) {
  auto t = torch::empty({n}, dtype);
  std::memcpy(t.data_ptr(), data, static_cast<size_t>(n) * t.element_size());
  return t.to(torch::kFloat);
}

/// A block's fp16 scale `name` at `p`, refused when it is not finite (a corrupt file: ggml would
/// spread inf/NaN over the block's values and every product they enter).
float scale_at(const uint8_t* p, const char* name, int64_t block) {
  const float v = half_at(p);
  if (!std::isfinite(v))
    throw Error("block " + std::to_string(block) + " has a non-finite scale " + name + " (" + std::to_string(v) + ")");
  return v;
}

// The 32-value types (ggml-common.h block_q4_0 ... block_q8_0). In the 4- and 5-bit types byte j
// holds q_j in its low nibble and q_(j+16) in its high one; Q5_0/Q5_1 keep the fifth bits in a
// little-endian uint32 qh, bit j for q_j and bit j + 16 for q_(j+16).
void dequantize_small_block(uint32_t type, const uint8_t* block, int64_t b, float* x) {
  const float d = scale_at(block, "d", b);
  if (type == kQ8_0) {
    for (int64_t i = 0; i < kGgmlBlock; ++i) x[i] = d * static_cast<float>(static_cast<int8_t>(block[2 + i]));
    return;
  }
  // Q4_0/Q5_0 centre their values at 8/16 (an integer shift, rounded once as ggml does); Q4_1/Q5_1
  // store the minimum m after d.
  const bool has_min = type == kQ4_1 || type == kQ5_1;
  const bool five_bit = type == kQ5_0 || type == kQ5_1;
  const float m = has_min ? scale_at(block + 2, "m", b) : 0.0f;
  const int shift = has_min ? 0 : five_bit ? 16 : 8;
  const uint8_t* p = block + (has_min ? 4 : 2);
  uint32_t qh = 0;
  if (five_bit) {
    std::memcpy(&qh, p, 4);
    p += 4;
  }
  for (int64_t j = 0; j < kGgmlBlock / 2; ++j) {
    const int high0 = five_bit ? static_cast<int>((qh >> j) & 1) << 4 : 0;
    const int high1 = five_bit ? static_cast<int>((qh >> (j + 16)) & 1) << 4 : 0;
    x[j] = static_cast<float>(((p[j] & 0x0F) | high0) - shift) * d + m;
    x[j + kGgmlBlock / 2] = static_cast<float>(((p[j] >> 4) | high1) - shift) * d + m;
  }
}

/// Scale and minimum j (0..7) of the 12 packed bytes of a Q4_K/Q5_K super-block: 6 bits each,
/// j < 4 in the low 6 bits of bytes j and j + 4, j >= 4 split between the nibbles of byte j + 4 and
/// the top 2 bits of bytes j − 4 and j (ggml's get_scale_min_k4).
void scale_min_k4(int j, const uint8_t* q, float& scale, float& min) {
  if (j < 4) {
    scale = static_cast<float>(q[j] & 63);
    min = static_cast<float>(q[j + 4] & 63);
  } else {
    scale = static_cast<float>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    min = static_cast<float>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The K types: super-blocks of 256 values in 16 sub-blocks of 16 (Q2_K, Q3_K, Q6_K) or 8 of 32
// (Q4_K, Q5_K), each with its own integer scale (and minimum) times the super-block's fp16 d (and
// dmin). Layouts and value order as ggml-common.h and ggml-quants.c's dequantize_row_q*_K.

/// Q2_K (84 bytes): scales[16] (low nibble scale, high nibble min), qs[64] (2-bit, four values per
/// byte at shifts 0, 2, 4, 6), fp16 d, fp16 dmin. x = d·scale·q − dmin·min.
void dequantize_q2_k(const uint8_t* block, int64_t b, float* y) {
  const uint8_t* scales = block;
  const uint8_t* q = block + 16;
  const float d = scale_at(block + 80, "d", b), dmin = scale_at(block + 82, "dmin", b);
  int is = 0;
  for (int n = 0; n < kSuperBlock; n += 128, q += 32)
    for (int shift = 0; shift < 8; shift += 2)
      for (int half = 0; half < 2; ++half, ++is) {
        const float dl = d * static_cast<float>(scales[is] & 0xF), ml = dmin * static_cast<float>(scales[is] >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
      }
}

/// Q3_K (110 bytes): hmask[32] (the third bit, inverted: a clear bit subtracts 4), qs[64] (low 2
/// bits as Q2_K), scales[12] (sixteen 6-bit scales, offset by 32), fp16 d. x = d·(scale−32)·q.
void dequantize_q3_k(const uint8_t* block, int64_t b, float* y) {
  const uint8_t* hmask = block;
  const uint8_t* q = block + 32;
  const uint8_t* packed = block + 96;
  const float d = scale_at(block + 108, "d", b);
  // Scale i: its low 4 bits are nibble (i / 8) of byte i % 8, its high 2 bits bits 2·(i / 4)..+1
  // of byte 8 + i % 4 (ggml's kmask1/kmask2 unpacking, written per scale).
  int scales[16];
  for (int i = 0; i < 16; ++i) {
    const int low = (packed[i % 8] >> (4 * (i / 8))) & 0xF;
    const int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
    scales[i] = (low | high << 4) - 32;
  }
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < kSuperBlock; n += 128, q += 32)
    for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1))
      for (int half = 0; half < 2; ++half, ++is) {
        const float dl = d * static_cast<float>(scales[is]);
        for (int l = 16 * half; l < 16 * half + 16; ++l)
          *y++ = dl * static_cast<float>(((q[l] >> shift) & 3) - ((hmask[l] & m) ? 0 : 4));
      }
}

/// Q4_K (144 bytes) and Q5_K (176): fp16 d, fp16 dmin, scales[12] (scale_min_k4), then for Q5_K
/// qh[32] (the fifth bit of value l of sub-block s is bit s of qh[l]), then qs[128]: each 32 bytes
/// hold two sub-blocks, the low nibbles first. x = d·scale·q − dmin·min.
void dequantize_q45_k(bool five_bit, const uint8_t* block, int64_t b, float* y) {
  const float d = scale_at(block, "d", b), dmin = scale_at(block + 2, "dmin", b);
  const uint8_t* scales = block + 4;
  const uint8_t* qh = block + 16;
  const uint8_t* q = block + (five_bit ? 48 : 16);
  for (int s = 0; s < 8; ++s) {
    float scale, min;
    scale_min_k4(s, scales, scale, min);
    const float dl = d * scale, ml = dmin * min;
    const int nibble_shift = 4 * (s % 2);
    const uint8_t* qs = q + 32 * (s / 2);
    for (int l = 0; l < 32; ++l) {
      const int high = five_bit && (qh[l] >> s & 1) ? 16 : 0;
      *y++ = dl * static_cast<float>(((qs[l] >> nibble_shift) & 0xF) + high) - ml;
    }
  }
}

/// Q6_K (210 bytes): ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16], fp16 d; each
/// half of 128 values takes 64 bytes of ql, 32 of qh and 8 scales. x = d·scale·(q − 32).
void dequantize_q6_k(const uint8_t* block, int64_t b, float* y) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(block + 192);
  const float d = scale_at(block + 208, "d", b);
  for (int n = 0; n < kSuperBlock; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
}

/// Q8_K (292 bytes): fp32 d, int8 qs[256], int16 bsums[16] (sums of 16 values, unused here). x = d·q.
void dequantize_q8_k(const uint8_t* block, int64_t b, float* y) {
  float d;
  std::memcpy(&d, block, 4);
  if (!std::isfinite(d))
    throw Error("block " + std::to_string(b) + " has a non-finite scale d (" + std::to_string(d) + ")");
  for (int i = 0; i < kSuperBlock; ++i) y[i] = d * static_cast<float>(static_cast<int8_t>(block[4 + i]));
}

}  // namespace

std::string ggml_type_name(uint32_t type) {
  const auto it = type_names().find(type);
  return it == type_names().end() ? "type " + std::to_string(type) : it->second;
}

std::optional<GgmlBlockLayout> ggml_block_layout(uint32_t type) {
  switch (type) {
    case kF32: return GgmlBlockLayout{1, 4};
    case kF16: return GgmlBlockLayout{1, 2};
    case kBF16: return GgmlBlockLayout{1, 2};
    case kQ8_0: return GgmlBlockLayout{kGgmlBlock, 2 + kGgmlBlock};
    case kQ4_0: return GgmlBlockLayout{kGgmlBlock, 2 + kGgmlBlock / 2};
    case kQ4_1: return GgmlBlockLayout{kGgmlBlock, 4 + kGgmlBlock / 2};
    case kQ5_0: return GgmlBlockLayout{kGgmlBlock, 6 + kGgmlBlock / 2};
    case kQ5_1: return GgmlBlockLayout{kGgmlBlock, 8 + kGgmlBlock / 2};
    case kQ2_K: return GgmlBlockLayout{kSuperBlock, 84};
    case kQ3_K: return GgmlBlockLayout{kSuperBlock, 110};
    case kQ4_K: return GgmlBlockLayout{kSuperBlock, 144};
    case kQ5_K: return GgmlBlockLayout{kSuperBlock, 176};
    case kQ6_K: return GgmlBlockLayout{kSuperBlock, 210};
    case kQ8_K: return GgmlBlockLayout{kSuperBlock, 292};
    default: return std::nullopt;
  }
}

torch::Tensor dequantize_ggml(uint32_t type, const uint8_t* data, int64_t n) {
  if (type == kF32) return widen(data, n, torch::kFloat);
  if (type == kF16) return widen(data, n, torch::kHalf);
  if (type == kBF16) return widen(data, n, torch::kBFloat16);
  auto out = torch::empty({n}, torch::kFloat);
  dequantize_blocks(type, data, n, out.data_ptr<float>());
  return out;
}

void dequantize_blocks(uint32_t type, const uint8_t* data, int64_t n, float* x) {
  const auto layout = ggml_block_layout(type);
  if (!layout || layout->elements == 1)
    throw Error("internal: dequantize_blocks called for type " + ggml_type_name(type));
  for (int64_t b = 0; b < n / layout->elements; ++b, x += layout->elements) {
    const uint8_t* block = data + b * layout->bytes;
    switch (type) {
      case kQ2_K: dequantize_q2_k(block, b, x); break;
      case kQ3_K: dequantize_q3_k(block, b, x); break;
      case kQ4_K: dequantize_q45_k(false, block, b, x); break;
      case kQ5_K: dequantize_q45_k(true, block, b, x); break;
      case kQ6_K: dequantize_q6_k(block, b, x); break;
      case kQ8_K: dequantize_q8_k(block, b, x); break;
      default: dequantize_small_block(type, block, b, x);
    }
  }
}

const char* quant_format_name(QuantFormat format) {
  switch (format) {
    case QuantFormat::Q8_0: return "Q8_0";
    case QuantFormat::Q4_0: return "Q4_0";
    case QuantFormat::Q5_0: return "Q5_0";
    case QuantFormat::Q4_K: return "Q4_K";
    case QuantFormat::Q6_K: return "Q6_K";
  }
  return "?";
}

uint32_t quant_format_ggml_type(QuantFormat format) {
  switch (format) {
    case QuantFormat::Q8_0: return kGgmlQ8_0;
    case QuantFormat::Q4_0: return kGgmlQ4_0;
    case QuantFormat::Q5_0: return kGgmlQ5_0;
    case QuantFormat::Q4_K: return kGgmlQ4_K;
    case QuantFormat::Q6_K: return kGgmlQ6_K;
  }
  return 0;
}

int64_t quant_block_values(QuantFormat format) {
  return format == QuantFormat::Q4_K || format == QuantFormat::Q6_K ? kSuperBlock : kGgmlBlock;
}

bool quant_format_tiles(QuantFormat format) { return quant_block_values(format) == kGgmlBlock; }

std::optional<QuantFormat> quant_format_of_ggml_type(uint32_t type) {
  for (auto f : {QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q5_0, QuantFormat::Q4_K, QuantFormat::Q6_K})
    if (quant_format_ggml_type(f) == type) return f;
  return std::nullopt;
}

QuantFormat quant_format_named(const std::string& name, const std::string& origin) {
  for (auto f : {QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q5_0, QuantFormat::Q4_K, QuantFormat::Q6_K})
    if (name == quant_format_name(f)) return f;
  throw Error(origin + ": quantisation format \"" + name + "\" (expected Q8_0, Q4_0, Q5_0, Q4_K or Q6_K)");
}

std::string ggml_supported_types() {
  return "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K";
}

namespace {
/// Bytes of a Q8_0 / Q4_0 / Q5_0 block; throws for other types.
int64_t tile8_block_bytes(uint32_t type) {
  if (type != kGgmlQ8_0 && type != kGgmlQ4_0 && type != kGgmlQ5_0)
    throw Error("tiles of 8 rows hold Q8_0, Q4_0 or Q5_0 blocks, not " + ggml_type_name(type));
  return ggml_block_layout(type)->bytes;
}
}  // namespace

void tile8_blocks(uint32_t type, int64_t rows, int64_t cols, uint8_t* data) {
  const int64_t bb = tile8_block_bytes(type), nb = cols / kGgmlBlock, chunks = (bb - 2) / 4, tile_bytes = 8 * nb * bb;
  std::vector<uint8_t> rows8(tile_bytes);  // one tile's rows as they were: a tile occupies their bytes
  for (int64_t t = 0; t < rows / 8; ++t) {
    uint8_t* tile = data + t * tile_bytes;
    std::memcpy(rows8.data(), tile, tile_bytes);
    for (int64_t ib = 0; ib < nb; ++ib)
      for (int64_t r = 0; r < 8; ++r) {
        const uint8_t* in = rows8.data() + (r * nb + ib) * bb;
        uint8_t* out = tile + ib * 8 * bb;
        std::memcpy(out + 2 * r, in, 2);
        for (int64_t c = 0; c < chunks; ++c) std::memcpy(out + 16 + 32 * c + 4 * r, in + 2 + 4 * c, 4);
      }
  }
}

void untile8_block(uint32_t type, int64_t rows, int64_t cols, const uint8_t* data, int64_t n, int64_t ib,
                   uint8_t* out) {
  const int64_t bb = tile8_block_bytes(type), nb = cols / kGgmlBlock, chunks = (bb - 2) / 4;
  if (n >= rows / 8 * 8) {
    std::memcpy(out, data + (n * nb + ib) * bb, bb);  // a row after the tiles
    return;
  }
  const uint8_t* block = data + ((n / 8) * nb + ib) * 8 * bb;
  const int64_t r = n % 8;
  std::memcpy(out, block + 2 * r, 2);
  for (int64_t c = 0; c < chunks; ++c) std::memcpy(out + 2 + 4 * c, block + 16 + 32 * c + 4 * r, 4);
}

}  // namespace fbt
