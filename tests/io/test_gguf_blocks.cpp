// A quantised run with a GGUF file's own blocks (gguf_blocks.h, `fbt quantize --from-gguf`): a
// Q4_K_M file written by llama.cpp's llama-quantize (tests/fixtures/gguf/make_k_quant_fixtures.py)
// decodes from its Q4_K and Q6_K blocks to transformers' logits of the same file; a run trained
// after its import, another model's file or the same model's at another quantisation is refused.
#include <gtest/gtest.h>

#include <filesystem>

#include "expect_error.h"
#include "fbt/infer/cpu_decoder.h"
#include "fbt/io/checkpoint.h"
#include "fbt/io/gguf_blocks.h"
#include "fbt/io/gguf_import.h"
#include "fbt/io/safetensors.h"
#include "temp_dir.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;

const fs::path kDir = fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "gguf";

/// The Standard-mode logits [T, V] of tokens [1, T], one decode step per token.
torch::Tensor step_logits(CpuDecoder& decoder, const ModelConfig& config, const torch::Tensor& tokens) {
  torch::NoGradGuard no_grad;
  KVCache cache(config, 1, tokens.size(1), torch::dtype(torch::kFloat));
  std::vector<torch::Tensor> rows;
  for (int64_t t = 0; t < tokens.size(1); ++t)
    rows.push_back(decoder.step(tokens.select(1, t).contiguous(), DecodeMode::Standard, cache)[0]);
  return torch::stack(rows);
}

/// The decoder's int8 groups of `model` (as fbt quantize writes them) with the file's blocks.
GgufBlockGroups file_groups(const std::string& path, FBT& model) {
  CpuDecoderOptions options{/*batch_invariant=*/true, DecodeWeights::Int8};
  options.quant_layout = QuantLayout::Rows;
  const CpuDecoder writer(model, options);
  return gguf_block_groups(read_gguf(path), model, writer.quantized_groups());
}

TEST(GgufBlocks, Q4KMFileDecodesFromItsOwnBlocksToTransformersLogits) {
  const auto path = (kDir / "llama_q4_k_m.gguf").string();
  auto imported = import_gguf_model(path);
  auto& model = imported.model;
  const auto& config = model->config();
  const auto blocks = file_groups(path, model);
  // Every matrix product of the file is kept (token_embd is no product: the head is untied); the
  // fusion is fbt's own.
  const auto& types = imported.source.at("tensor_types");
  EXPECT_EQ(blocks.kept.at("Q4_K") + blocks.kept.at("Q6_K"),
            types.at("Q4_K").get<int64_t>() + types.at("Q6_K").get<int64_t>() - 1);
  EXPECT_EQ(blocks.requantised, (std::vector<std::string>{"fusion.w_u.weight", "fusion.w_g.weight"}));
  // attn_v (Q6_K in llama.cpp's Q4_K_M mix) splits q/k/v into runs of one format.
  const auto* v = [&]() -> const QuantizedGroup* {
    for (const auto& g : blocks.groups)
      if (g.parts.back() == "blocks.0.attn.wv.weight") return &g;
    return nullptr;
  }();
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->format, "Q6_K");
  EXPECT_EQ(v->parts.size(), 1u);

  torch::Tensor tokens, expected;  // [1,16] int64, [1,16,V]: transformers on the same file
  for (const auto& [key, t] : load_foreign_tensors((kDir / "llama_q4_k_m.expected.safetensors").string()).tensors)
    (key == "tokens" ? tokens : expected) = t;
  const double scale = expected.abs().max().item<double>();
  // With fp32 activations the blocks give the file's weights exactly: transformers' logits to rounding.
  auto weights = std::make_shared<QuantizedWeights>();
  weights->weights = "int8";
  weights->groups = blocks.groups;
  CpuDecoderOptions fp32{/*batch_invariant=*/true, DecodeWeights::Int8};
  fp32.activations = Q8Activations::Fp32;
  fp32.prequantized = weights;
  CpuDecoder exact(model, fp32);
  EXPECT_EQ(exact.matmul_weight_bytes(false), [&] {
    int64_t bytes = 0;
    for (const auto& g : blocks.groups)
      if (g.parts[0].rfind("fusion.", 0) != 0) bytes += g.bytes();
    return bytes;
  }());
  const double exact_diff = testing::max_abs_diff(step_logits(exact, config, tokens), expected[0]);
  EXPECT_LT(exact_diff, 1e-4 * scale);

  // Saved and loaded as `fbt quantize` does, decoded with int8 activations (the kernels of
  // quant_gemv_k.cpp): the activations' rounding only.
  testing::TempDir tmp;
  const auto file = (tmp.path / "q.safetensors").string();
  save_quantized_model(file, model, nlohmann::json::object(), 0, "int8", blocks.groups);
  CheckpointInfo info;
  auto loaded = load_model(file, &info);
  CpuDecoderOptions int8{/*batch_invariant=*/true, DecodeWeights::Int8};
  int8.prequantized = info.quantized;
  CpuDecoder fast(loaded, int8);
  const auto got = step_logits(fast, config, tokens);
  const double int8_diff = testing::max_abs_diff(got, expected[0]);
  std::cout << "[ GgufBlocks ] max |logit - transformers|: fp32 activations " << exact_diff << ", int8 " << int8_diff
            << " (max |logit| " << scale << ")\n";
  EXPECT_LT(int8_diff, 3e-2 * scale);
  EXPECT_TRUE(torch::equal(got.argmax(-1), expected[0].argmax(-1)));
}

TEST(GgufBlocks, ATrainedRunOrAnotherFileIsRefused) {
  const auto path = (kDir / "llama_q4_k_m.gguf").string();
  auto imported = import_gguf_model(path);
  {
    torch::NoGradGuard no_grad;
    imported.model->named_parameters()["blocks.0.mlp.w_up.weight"].mul_(1.001f);
  }
  expect_error([&] { file_groups(path, imported.model); },
               {path, "'blk.0.ffn_up.weight' (Q4_K)", "does not dequantise to parameter 'blocks.0.mlp.w_up.weight'",
                "trained after its import"});
  auto other = import_gguf_model((kDir / "llama_untied_q8_0.gguf").string());
  expect_error([&] { file_groups(path, other.model); }, {path, "has shape", "not the file this run was imported from"});
  // The same model at another quantisation (Q5_K_M with Q3_K embeddings and a Q2_K head): its
  // tensors are checked even where their type is not kept (Q5_K).
  auto same = import_gguf_model(path);
  const auto mix = (kDir / "llama_k_mix.gguf").string();
  expect_error([&] { file_groups(mix, same.model); }, {mix, "does not dequantise to parameter"});
}

}  // namespace
}  // namespace fbt
