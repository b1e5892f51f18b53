// Hugging Face export (issue 17): exporting an imported fixture gives back the tensors and the
// config settings transformers wrote (so transformers loads the same model: its logits are the
// fixture's expected ones, tests/io/test_hf_import.cpp), the fusion is kept beside them, and what
// cannot be exported is refused without leaving files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "cli_test_helpers.h"
#include "expect_error.h"
#include "fbt/io/hf_export.h"
#include "fbt/io/hf_import.h"
#include "fbt/io/safetensors.h"
#include "fbt/util/error.h"
#include "temp_dir.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

const fs::path kHfExportDir = fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "hf";

/// Every tensor of the safetensors files in `dir` (one file or shards), as fp32, by name.
std::map<std::string, torch::Tensor> tensors_in(const fs::path& dir, const std::string& skip = "") {
  std::map<std::string, torch::Tensor> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (entry.path().extension() != ".safetensors" || name == "expected_logits.safetensors" || name == skip) continue;
    for (const auto& [key, t] : load_foreign_tensors(entry.path().string()).tensors) out[key] = t.to(torch::kFloat);
  }
  return out;
}

nlohmann::json json_of(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

TEST(HfExport, GivesBackTheTensorsAndSettingsTransformersWrote) {
  testing::TempDir tmp;
  for (const std::string name : {"llama_tied", "llama_untied", "llama3_rope", "qwen2", "qwen3"}) {
    SCOPED_TRACE(name);
    const auto imported = import_hf_model((kHfExportDir / name).string());
    const auto out = tmp.path / name;
    export_hf_model(imported.model, nlohmann::json::object(), "", out.string());
    const auto theirs = tensors_in(kHfExportDir / name), ours = tensors_in(out, "fbt_fusion.safetensors");
    ASSERT_EQ(ours.size(), theirs.size());
    for (const auto& [key, t] : theirs) {
      ASSERT_TRUE(ours.count(key)) << key;
      EXPECT_TRUE(torch::equal(ours.at(key), t)) << key;  // stored dtypes convert to fp32 exactly
    }
    const auto fixture = json_of(kHfExportDir / name / "config.json"), exported = json_of(out / "config.json");
    for (const char* key : {"model_type", "architectures", "vocab_size", "hidden_size", "intermediate_size",
                            "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "rms_norm_eps",
                            "tie_word_embeddings", "max_position_embeddings"})
      EXPECT_EQ(exported.at(key), fixture.at(key)) << key;
    // RoPE (transformers 5 wrote rope_parameters, the export writes 4's keys) and the biases,
    // QK-norm and head_dim: both files read as the same fbt config (but the document separator,
    // the eos_token_id that comes from the tokenizer block, not given here).
    auto ours_config = hf_model_config(exported, "exported", {}).to_json();
    auto theirs_config = hf_model_config(fixture, "fixture", {}).to_json();
    ours_config.erase("doc_separator_id");
    theirs_config.erase("doc_separator_id");
    EXPECT_EQ(ours_config, theirs_config);
    // The fusion and input norm, which HF models lack, are kept with the fbt config.
    const auto fusion = load_tensors((out / "fbt_fusion.safetensors").string());
    EXPECT_EQ(fusion.tensors.size(), 3u);  // fusion.w_u, fusion.w_g, input_norm
    EXPECT_EQ(ModelConfig::from_json(fusion.metadata.at("model_config"), "fusion"), imported.model->config());
  }
}

TEST(HfExport, RefusesWhatTransformersHasNotAndLeavesNoFiles) {
  testing::TempDir tmp;
  auto paper = ModelConfig::preset("debug");  // block fbt
  FBT model(paper);
  testing::expect_error([&] { export_hf_model(model, {}, "", (tmp.path / "a").string()); }, {"block"});
  EXPECT_FALSE(fs::exists(tmp.path / "a"));
  EXPECT_FALSE(fs::exists(tmp.path / "a.partial"));
  auto llama = import_hf_model((kHfExportDir / "llama_tied").string()).model->config();
  llama.attention_out_bias = true;  // a bias on o without q/k/v: no transformers model has it
  testing::expect_error([&] { hf_model_type(llama); }, {"attention_out_bias"});
  const auto busy = tmp.path / "busy";
  testing::write_file(busy / "keep.txt", "x");
  const auto imported = import_hf_model((kHfExportDir / "llama_tied").string());
  testing::expect_error([&] { export_hf_model(imported.model, {}, "", busy.string()); }, {"not an empty directory"});
  EXPECT_EQ(testing::slurp(busy / "keep.txt"), "x");
}

}  // namespace
}  // namespace fbt
