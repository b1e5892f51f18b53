// GGUF tensor types (issue 17): each block layout dequantized from bytes written by hand, against
// values computed by hand from ggml's formulas (gguf_quants.h).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "fbt/io/gguf_quants.h"

namespace fbt {
namespace {

enum : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 8, BF16 = 30 };

/// The little-endian bytes of a uint16 (an fp16 or bf16 bit pattern).
void put16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(v & 0xFF);
  out.push_back(v >> 8);
}

std::vector<float> values(const torch::Tensor& t) { return {t.data_ptr<float>(), t.data_ptr<float>() + t.numel()}; }

TEST(GgufQuants, TypeNamesAndLayouts) {
  EXPECT_EQ(ggml_type_name(12), "Q4_K");
  EXPECT_EQ(ggml_type_name(30), "BF16");
  EXPECT_EQ(ggml_type_name(4), "type 4");  // retired id
  EXPECT_EQ(ggml_block_layout(Q8_0)->bytes, 34);
  EXPECT_EQ(ggml_block_layout(Q4_0)->bytes, 18);
  EXPECT_EQ(ggml_block_layout(Q4_1)->bytes, 20);
  EXPECT_EQ(ggml_block_layout(Q4_1)->elements, 32);
  EXPECT_FALSE(ggml_block_layout(23).has_value());  // IQ4_XS
}

TEST(GgufQuants, PlainFloats) {
  const std::vector<float> f32 = {1.5f, -2.25f, 0.0f};
  std::vector<uint8_t> bytes(12);
  std::memcpy(bytes.data(), f32.data(), 12);
  EXPECT_EQ(values(dequantize_ggml(F32, bytes.data(), 3)), f32);
  // fp16: 1.0 = 0x3C00, -2.0 = 0xC000, 0.5 = 0x3800, 65504 = 0x7BFF (the largest)
  bytes.clear();
  for (uint16_t h : {0x3C00, 0xC000, 0x3800, 0x7BFF}) put16(bytes, h);
  EXPECT_EQ(values(dequantize_ggml(F16, bytes.data(), 4)), (std::vector<float>{1.0f, -2.0f, 0.5f, 65504.0f}));
  // bf16 is the high half of an fp32: 1.0 = 0x3F80, 3.0 = 0x4040, -0.15625 = 0xBE20
  bytes.clear();
  for (uint16_t h : {0x3F80, 0x4040, 0xBE20}) put16(bytes, h);
  EXPECT_EQ(values(dequantize_ggml(BF16, bytes.data(), 3)), (std::vector<float>{1.0f, 3.0f, -0.15625f}));
}

// Two Q8_0 blocks: d = 0.5 (0x3800) with q_i = i - 16, then d = -2 (0xC000) with q_i = 127, -128, 0, ...
TEST(GgufQuants, Q8_0) {
  std::vector<uint8_t> bytes;
  put16(bytes, 0x3800);
  for (int i = 0; i < 32; ++i) bytes.push_back(static_cast<uint8_t>(static_cast<int8_t>(i - 16)));
  put16(bytes, 0xC000);
  bytes.push_back(127);
  bytes.push_back(0x80);  // -128
  for (int i = 2; i < 32; ++i) bytes.push_back(0);
  ASSERT_EQ(bytes.size(), 68u);
  const auto x = values(dequantize_ggml(Q8_0, bytes.data(), 64));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(x[i], 0.5f * static_cast<float>(i - 16)) << i;
  EXPECT_EQ(x[32], -254.0f);
  EXPECT_EQ(x[33], 256.0f);
  for (int i = 34; i < 64; ++i) EXPECT_EQ(x[i], 0.0f) << i;  // -0 compares equal to 0
}

// Q4_0: d = 2 (0x4000); byte j = (15 - j) << 4 | j, so element j holds q = j and element j + 16
// holds q = 15 - j; x = (q - 8) · d.
TEST(GgufQuants, Q4_0LowNibblesFirst) {
  std::vector<uint8_t> bytes;
  put16(bytes, 0x4000);
  for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>((15 - j) << 4 | j));
  const auto x = values(dequantize_ggml(Q4_0, bytes.data(), 32));
  EXPECT_EQ(x[0], -16.0f);   // (0 - 8) · 2
  EXPECT_EQ(x[15], 14.0f);   // (15 - 8) · 2
  EXPECT_EQ(x[16], 14.0f);   // q = 15 - 0
  EXPECT_EQ(x[31], -16.0f);  // q = 15 - 15
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(x[j], 2.0f * static_cast<float>(j - 8)) << j;
    EXPECT_EQ(x[j + 16], 2.0f * static_cast<float>(7 - j)) << j;
  }
}

// Q4_1: d = 0.25 (0x3400), m = -1 (0xBC00); byte j = 0x5 << 4 | (j % 16): x_j = j/4 - 1, x_(j+16) = 0.25.
TEST(GgufQuants, Q4_1ScaleAndMinimum) {
  std::vector<uint8_t> bytes;
  put16(bytes, 0x3400);
  put16(bytes, 0xBC00);
  for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>(0x50 | j));
  const auto x = values(dequantize_ggml(Q4_1, bytes.data(), 32));
  EXPECT_EQ(x[0], -1.0f);
  EXPECT_EQ(x[4], 0.0f);
  EXPECT_EQ(x[15], 2.75f);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(x[j], 0.25f * static_cast<float>(j) - 1.0f) << j;
    EXPECT_EQ(x[j + 16], 0.25f) << j;  // 5 · 0.25 - 1
  }
}

}  // namespace
}  // namespace fbt
