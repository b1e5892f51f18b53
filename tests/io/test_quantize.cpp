// Quantised checkpoints (quantized_checkpoint.h): a model's matrix products saved as the CPU
// decoder's Q8_0 / Q4_0 blocks load as a Skeleton with no fp32 matrix, and decode to the same bits
// as the fp32 model quantised at load; fp32 consumers refuse them; damaged ones are named.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "fbt/infer/cpu_decoder.h"
#include "fbt/infer/decode.h"
#include "fbt/io/checkpoint.h"
#include "fbt/io/quantized_checkpoint.h"
#include "temp_dir.h"
#include "cpu_prefill.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;

std::vector<ModelConfig> quantize_configs() {
  auto paper = ModelConfig::preset("debug");  // block fbt: head gates, sandwich norms
  auto llama = ModelConfig::preset("debug");  // the Llama block, untied head (the embedding stays fp32)
  llama.block = BlockKind::Llama;
  llama.qk_norm = false;
  llama.tie_embeddings = false;
  return {paper, llama};
}

/// The options of a decoder whose quantized_groups() a checkpoint is written from (as fbt quantize's:
/// ggml's row-major layout).
CpuDecoderOptions writer_options(DecodeWeights weights) {
  CpuDecoderOptions options{/*batch_invariant=*/true, weights};
  options.quant_layout = QuantLayout::Rows;
  return options;
}

/// Prefill of a fixed prompt, then four Soft steps: the logits of every call, [B,V] each.
std::vector<torch::Tensor> soft_decode(CpuDecoder& decoder, const ModelConfig& config) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  auto tokens = torch::randint(4, config.vocab_size, {2, 6}, torch::kLong);
  KVCache cache(config, 2, 10, torch::dtype(torch::kFloat));
  std::vector<torch::Tensor> out{testing::cpu_prefill(decoder, tokens, torch::ones({2, 6}, torch::kBool), cache)};
  for (int s = 0; s < 4; ++s) out.push_back(decoder.step(out.back().argmax(-1), DecodeMode::Soft, cache));
  return out;
}

TEST(Quantize, LoadedRunDecodesAsTheModelQuantisedAtLoad) {
  testing::TempDir tmp;
  for (const auto& config : quantize_configs())
    for (const auto& [weights, name] : {std::pair{DecodeWeights::Int8, "int8"}, {DecodeWeights::Int4, "int4"}}) {
      SCOPED_TRACE(enum_to_string(config.block) + " " + name);
      auto model = testing::make_test_model(config);
      CpuDecoder at_load(model, CpuDecoderOptions{/*batch_invariant=*/true, weights});  // in tiles of 8 rows
      const CpuDecoder writer(model, writer_options(weights));
      EXPECT_THROW(at_load.quantized_groups(), Error);
      const auto path = (tmp.path / (enum_to_string(config.block) + name + ".safetensors")).string();
      save_quantized_model(path, model, nlohmann::json::object(), 3, name, writer.quantized_groups());

      CheckpointInfo info;
      auto loaded = load_model(path, &info);
      ASSERT_TRUE(info.quantized);
      for (const auto& g : info.quantized->groups) EXPECT_TRUE(g.tiled) << g.parts[0];  // read in place, no copy
      EXPECT_EQ(info.quantized->weights, name);
      EXPECT_EQ(info.step, 3);
      EXPECT_EQ(info.quantized->groups.size(), writer.quantized_groups().size());
      // No fp32 matrix exists: every grouped parameter is an empty skeleton tensor.
      int64_t grouped = 0;
      for (const auto& g : info.quantized->groups)
        for (const auto& part : g.parts) {
          EXPECT_EQ(loaded->named_parameters()[part].numel(), 0) << part;
          ++grouped;
        }
      // head, W_U, W_G, then per layer q/k/v(/gate), gate/up and o (d_ff 176 is no multiple of 32: down stays fp32)
      EXPECT_EQ(grouped, 3 + (config.block == BlockKind::Llama ? 6 : 7) * config.n_layers);
      if (!config.tie_embeddings) {
        EXPECT_TRUE(torch::equal(loaded->named_parameters()["embedding.weight"],
                                 model->named_parameters()["embedding.weight"]));
      }

      CpuDecoderOptions options{/*batch_invariant=*/true, weights};
      options.prequantized = info.quantized;
      CpuDecoder from_file(loaded, options);
      EXPECT_EQ(from_file.matmul_weight_bytes(true), at_load.matmul_weight_bytes(true));
      const auto want = soft_decode(at_load, config), got = soft_decode(from_file, config);
      for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << "call " << i;
    }
}

TEST(Quantize, Fp32ConsumersRefuseAQuantisedCheckpoint) {
  testing::TempDir tmp;
  auto model = testing::make_test_model();
  CpuDecoder decoder(model, writer_options(DecodeWeights::Int8));
  const auto path = (tmp.path / "q.safetensors").string();
  save_quantized_model(path, model, nlohmann::json::object(), 0, "int8", decoder.quantized_groups());
  expect_error([&] { load_weights(path, model); }, {path, "quantised checkpoint", "fp32 run it was made from"});
  expect_error([&] { assign_tensors(load_tensors(path), model, path); }, {path, "quantised checkpoint"});
  EXPECT_TRUE(read_checkpoint_info(path).quantized);
}

// A group whose stored rows disagree with the config (here: one row short) loads as stored, and
// the decoder names it before reading past its blocks.
TEST(Quantize, MisshapenGroupIsNamedByTheDecoder) {
  testing::TempDir tmp;
  auto model = testing::make_test_model();
  CpuDecoder decoder(model, writer_options(DecodeWeights::Int8));
  auto groups = decoder.quantized_groups();
  const auto it =
      std::find_if(groups.begin(), groups.end(), [](const auto& g) { return g.parts[0] == "blocks.0.attn.wo.weight"; });
  ASSERT_NE(it, groups.end());
  --it->rows;
  const auto path = (tmp.path / "q.safetensors").string();
  save_quantized_model(path, model, nlohmann::json::object(), 0, "int8", groups);
  CheckpointInfo info;
  auto loaded = load_model(path, &info);
  CpuDecoderOptions options{false, DecodeWeights::Int8};
  options.prequantized = info.quantized;
  expect_error([&] { CpuDecoder(loaded, options); },
               {"'blocks.0.attn.wo.weight'", "are 63 x 64", "model config gives 64 x 64"});
}

TEST(Quantize, MetadataIsChecked) {
  const auto group = [](nlohmann::json edit) {
    nlohmann::json g{{"parts", {"fusion.w_u.weight"}}, {"format", "Q8_0"}, {"rows", 64}, {"cols", 64}};
    if (!edit.is_null()) g.update(edit);
    return nlohmann::json{{"weights", "int8"}, {"groups", {g}}};
  };
  EXPECT_EQ(quantized_weights_from_json(group(nlohmann::json::object()), "f").groups.at(0).bytes(), 64 * 2 * 34);
  expect_error(
      [&] {
        quantized_weights_from_json({{"weights", "int3"}, {"groups", nlohmann::json::array()}}, "f");
      },
      {"f: metadata field 'quantized'.weights is \"int3\""});
  expect_error([&] { quantized_weights_from_json(group({{"format", "Q5_K"}}), "f"); }, {"fusion.w_u.weight", "Q5_K"});
  expect_error([&] { quantized_weights_from_json(group({{"cols", 48}}), "f"); }, {"64 x 48", "32-value blocks"});
  expect_error([&] { quantized_weights_from_json(group({{"parts", nlohmann::json::array()}}), "f"); }, {"no parts"});
  expect_error([&] { quantized_weights_from_json(group({{"rows", "many"}}), "f"); }, {"'quantized' is malformed"});
  auto twice = group(nlohmann::json::object());
  twice["groups"].push_back(twice["groups"][0]);
  expect_error([&] { quantized_weights_from_json(twice, "f"); }, {"'fusion.w_u.weight' is in two groups"});
}

}  // namespace
}  // namespace fbt
