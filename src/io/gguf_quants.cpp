// ggml tensor types: names (ggml.h's enum ggml_type), block layouts and dequantization to fp32.
#include "fbt/io/gguf_quants.h"

#include <cstring>
#include <map>

#include <c10/util/Half.h>

#include "fbt/util/error.h"

namespace fbt {
namespace {

// ggml.h's enum ggml_type; the gaps are ids ggml has retired.
const std::map<uint32_t, std::string>& type_names() {
  static const std::map<uint32_t, std::string> names = {
      {0, "F32"},      {1, "F16"},     {2, "Q4_0"},     {3, "Q4_1"},     {6, "Q5_0"},    {7, "Q5_1"},
      {8, "Q8_0"},     {9, "Q8_1"},    {10, "Q2_K"},    {11, "Q3_K"},    {12, "Q4_K"},   {13, "Q5_K"},
      {14, "Q6_K"},    {15, "Q8_K"},   {16, "IQ2_XXS"}, {17, "IQ2_XS"},  {18, "IQ3_XXS"}, {19, "IQ1_S"},
      {20, "IQ4_NL"},  {21, "IQ3_S"},  {22, "IQ2_S"},   {23, "IQ4_XS"},  {24, "I8"},     {25, "I16"},
      {26, "I32"},     {27, "I64"},    {28, "F64"},     {29, "IQ1_M"},   {30, "BF16"},   {34, "TQ1_0"},
      {35, "TQ2_0"},   {39, "MXFP4"}};
  return names;
}

enum : uint32_t { kF32 = 0, kF16 = 1, kQ4_0 = kGgmlQ4_0, kQ4_1 = 3, kQ8_0 = kGgmlQ8_0, kBF16 = 30 };
constexpr int64_t kGgmlBlock = 32;  // values per block of Q8_0, Q4_0, Q4_1

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
  if (!layout || layout->elements != kGgmlBlock)
    throw Error("internal: dequantize_blocks called for type " + ggml_type_name(type));
  for (int64_t b = 0; b < n / kGgmlBlock; ++b, x += kGgmlBlock) {
    const uint8_t* block = data + b * layout->bytes;
    const float d = half_at(block);
    if (type == kQ8_0) {
      for (int64_t i = 0; i < kGgmlBlock; ++i) x[i] = d * static_cast<float>(static_cast<int8_t>(block[2 + i]));
      continue;
    }
    // Q4_0 centres the nibbles at 8 (an integer shift, rounded once as ggml does); Q4_1 stores
    // the minimum m after d.
    const bool q4_1 = type == kQ4_1;
    const float m = q4_1 ? half_at(block + 2) : 0.0f;
    const int shift = q4_1 ? 0 : 8;
    const uint8_t* q = block + (q4_1 ? 4 : 2);
    for (int64_t j = 0; j < kGgmlBlock / 2; ++j) {
      x[j] = static_cast<float>((q[j] & 0x0F) - shift) * d + m;
      x[j + kGgmlBlock / 2] = static_cast<float>((q[j] >> 4) - shift) * d + m;
    }
  }
}

}  // namespace fbt
