// GGUF K-quants and the 5-bit types: random blocks of every type dequantize as gguf-py (ggml's own
// Python package) does; files written by llama.cpp's llama-quantize (Q4_K_M, and a Q5_K_M with
// Q3_K embeddings and a Q2_K head) import with transformers' logits of the same files; corrupt
// blocks and rows that are not whole super-blocks are named. Fixtures:
// tests/fixtures/gguf/make_k_quant_fixtures.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "expect_error.h"
#include "fbt/io/gguf.h"
#include "fbt/io/gguf_import.h"
#include "fbt/io/gguf_quants.h"
#include "fbt/io/safetensors.h"
#include "temp_dir.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;

const fs::path kKQuantDir = fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "gguf";

TEST(GgufKQuants, LayoutsAreGgmls) {
  // ggml-common.h's static_asserts: sizeof(block_q2_K) = 2·2 + 256/16 + 256/4, ...
  const std::vector<std::tuple<uint32_t, int64_t, int64_t>> layouts = {{6, 32, 22},    {7, 32, 24},    {10, 256, 84},
                                                                       {11, 256, 110}, {12, 256, 144}, {13, 256, 176},
                                                                       {14, 256, 210}, {15, 256, 292}};
  for (const auto& [type, elements, bytes] : layouts) {
    SCOPED_TRACE(ggml_type_name(type));
    ASSERT_TRUE(ggml_block_layout(type).has_value());
    EXPECT_EQ(ggml_block_layout(type)->elements, elements);
    EXPECT_EQ(ggml_block_layout(type)->bytes, bytes);
  }
  for (uint32_t iq : {16u, 17u, 18u, 19u, 20u, 21u, 22u, 23u, 29u})
    EXPECT_FALSE(ggml_block_layout(iq).has_value()) << iq;
}

// Three blocks of random bits (random finite fp16 scales) per type, dequantized by gguf-py.
TEST(GgufKQuants, RandomBlocksEqualGgufPy) {
  const auto fixture = load_foreign_tensors((kKQuantDir / "k_quant_blocks.safetensors").string()).tensors;
  const std::map<std::string, uint32_t> types = {{"Q4_0", 2},  {"Q4_1", 3},  {"Q5_0", 6},  {"Q5_1", 7},  {"Q8_0", 8},
                                                 {"Q2_K", 10}, {"Q3_K", 11}, {"Q4_K", 12}, {"Q5_K", 13}, {"Q6_K", 14}};
  int checked = 0;
  for (const auto& [name, type] : types) {
    SCOPED_TRACE(name);
    torch::Tensor bytes, expected;
    for (const auto& [key, t] : fixture) {
      if (key == name + ".bytes") bytes = t;
      if (key == name + ".values") expected = t;
    }
    ASSERT_TRUE(bytes.defined() && expected.defined());
    ASSERT_EQ(bytes.numel() / ggml_block_layout(type)->bytes * ggml_block_layout(type)->elements, expected.numel());
    const auto got = dequantize_ggml(type, bytes.data_ptr<uint8_t>(), expected.numel());
    // The same float operations as ggml up to their order: equal to rounding.
    const double scale = expected.abs().max().item<double>();
    EXPECT_LE(testing::max_abs_diff(got, expected), 1e-6 * scale);
    ++checked;
  }
  EXPECT_EQ(checked, 10);
}

// Q8_K (fp32 d, 256 int8, 16 int16 sums that dequantization ignores), worked by hand.
TEST(GgufKQuants, Q8_KByHand) {
  std::vector<uint8_t> block(292, 0);
  const float d = 0.125f;
  std::memcpy(block.data(), &d, 4);
  for (int i = 0; i < 256; ++i) block[4 + i] = static_cast<uint8_t>(static_cast<int8_t>(i - 128));
  const auto x = dequantize_ggml(15, block.data(), 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(x[i].item<float>(), 0.125f * static_cast<float>(i - 128)) << i;
}

TEST(GgufKQuants, LlamaQuantizeFilesGiveTransformersLogits) {
  for (const std::string name : {"llama_q4_k_m", "llama_k_mix"}) {
    SCOPED_TRACE(name);
    const auto path = (kKQuantDir / (name + ".gguf")).string();
    auto imported = import_gguf_model(path);
    torch::Tensor tokens, expected;  // [1,16] int64, [1,16,384] fp32: transformers on the same file
    for (const auto& [key, t] : load_foreign_tensors((kKQuantDir / (name + ".expected.safetensors")).string()).tensors)
      (key == "tokens" ? tokens : expected) = t;
    torch::NoGradGuard no_grad;
    const double diff = testing::max_abs_diff(imported.model->forward(tokens), expected);
    const double scale = expected.abs().max().item<double>();
    std::cout << "[ GgufKQuants ] " << name << ": max |logit - transformers| = " << diff << " (max |logit| " << scale
              << ")\n";
    EXPECT_LT(diff, 1e-4 * scale);
  }
  // The mix holds every K type llama-quantize writes, each counted in the import's provenance.
  const auto mix = import_gguf_model((kKQuantDir / "llama_k_mix.gguf").string());
  const auto& types = mix.source.at("tensor_types");
  for (const char* t : {"Q2_K", "Q3_K", "Q5_K", "Q6_K"}) EXPECT_TRUE(types.contains(t)) << types.dump();
}

/// A copy of fixture `name` in `dir` with `edit` applied to the bytes of tensor `tensor`'s data.
std::string with_tensor_bytes(const fs::path& dir, const std::string& name, const std::string& tensor,
                              const std::function<void(char*)>& edit) {
  const auto source = (kKQuantDir / (name + ".gguf")).string();
  const auto f = read_gguf(source);
  std::ifstream in(source, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  edit(&bytes[f.data_offset + f.find(tensor)->offset]);
  const auto path = (dir / (name + ".damaged.gguf")).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(GgufKQuants, NonFiniteScaleIsNamed) {
  testing::TempDir tmp;
  // blk.0.attn_q.weight is Q4_K in the Q4_K_M file: block 0's d (bytes 0-1) becomes fp16 inf.
  const auto path = with_tensor_bytes(tmp.path, "llama_q4_k_m", "blk.0.attn_q.weight", [](char* block) {
    block[0] = 0x00;
    block[1] = 0x7C;
  });
  const auto f = read_gguf(path);
  ASSERT_EQ(ggml_type_name(f.find("blk.0.attn_q.weight")->type), "Q4_K");
  expect_error([&] { import_gguf_model(path); },
               {"'" + path + "': tensor 'blk.0.attn_q.weight' (Q4_K): block 0 has a non-finite scale d (inf)"});
}

TEST(GgufKQuants, TruncatedSuperBlocksAreNamed) {
  testing::TempDir tmp;
  const auto source = (kKQuantDir / "llama_k_mix.gguf").string();
  const auto path = (tmp.path / "truncated.gguf").string();
  fs::copy_file(source, path);
  fs::resize_file(path, fs::file_size(source) - 100);  // inside the last tensor's last super-block
  const auto tensors = read_gguf(source).tensors;
  const auto last = std::max_element(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
                      return a.offset < b.offset;
                    })->name;
  expect_error([&] { read_gguf(path); }, {"'" + path + "'", "tensor '" + last + "'", "run past the end of the file"});
}

}  // namespace
}  // namespace fbt
