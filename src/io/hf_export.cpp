// fbt model (block llama) -> Hugging Face Llama/Qwen2/Qwen3 directory.
#include "fbt/io/hf_export.h"

#include <filesystem>

#include "fbt/io/hf_import.h"
#include "fbt/io/run_dir.h"
#include "fbt/io/safetensors.h"
#include "fbt/util/atomic_file.h"
#include "fbt/util/build_info.h"
#include "fbt/util/error.h"

namespace fbt {
namespace fs = std::filesystem;

std::string hf_model_type(const ModelConfig& c) {
  if (c.block != BlockKind::Llama)
    throw Error(
        "model.block is \"fbt\" (the paper's block: input norm on plain inputs, scaled branches, head "
        "gates), which no transformers model has; only block llama models can be exported");
  if (c.window > 0)
    throw Error("model.window is " + std::to_string(c.window) + "; sliding-window layers are not exported");
  if (c.qk_norm) {
    if (c.attention_bias != c.attention_out_bias)
      throw Error("model.attention_bias and model.attention_out_bias differ; Qwen3 (QK-norm) has both or neither");
    return "qwen3";
  }
  if (c.attention_bias && !c.attention_out_bias) {
    if (c.head_dim_override > 0)
      throw Error("model.head_dim is " + std::to_string(c.head_dim_override) + " with Qwen2's biases; Qwen2 has D/H");
    return "qwen2";
  }
  if (c.attention_bias != c.attention_out_bias)
    throw Error("model.attention_out_bias without model.attention_bias: no transformers model has that");
  return "llama";
}

nlohmann::json hf_config_json(const ModelConfig& c, const nlohmann::json& tokenizer) {
  const auto type = hf_model_type(c);
  const std::string arch = type == "llama"   ? "LlamaForCausalLM"
                           : type == "qwen2" ? "Qwen2ForCausalLM"
                                             : "Qwen3ForCausalLM";
  nlohmann::json j = {{"architectures", {arch}},
                      {"model_type", type},
                      {"vocab_size", c.vocab_size},
                      {"hidden_size", c.d_model},
                      {"intermediate_size", c.d_ff},
                      {"num_hidden_layers", c.n_layers},
                      {"num_attention_heads", c.n_heads},
                      {"num_key_value_heads", c.n_kv_heads},
                      {"head_dim", c.head_dim()},
                      {"hidden_act", "silu"},
                      {"max_position_embeddings", c.context},
                      {"rms_norm_eps", c.norm_eps},
                      {"rope_theta", c.rope_theta},
                      {"rope_scaling", nullptr},
                      {"tie_word_embeddings", c.tie_embeddings},
                      {"torch_dtype", "float32"}};
  if (type != "qwen2") j["attention_bias"] = c.attention_bias;
  if (type == "llama") j["mlp_bias"] = false;
  if (type == "qwen2") j["use_sliding_window"] = false;
  if (c.rope_scaling == RopeScaling::Llama3)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling_factor},
                         {"low_freq_factor", c.rope_low_freq_factor},
                         {"high_freq_factor", c.rope_high_freq_factor},
                         {"original_max_position_embeddings", c.rope_original_context}};
  for (const auto& [fbt_key, hf_key] :
       {std::pair{"bos_id", "bos_token_id"}, {"eos_id", "eos_token_id"}, {"pad_id", "pad_token_id"}}) {
    const auto id = tokenizer.is_object() ? tokenizer.value(fbt_key, nlohmann::json()) : nlohmann::json();
    if (id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < c.vocab_size) j[hf_key] = id;
  }
  return j;
}

void export_hf_model(const FBT& model, const nlohmann::json& tokenizer, const std::string& tokenizer_dir,
                     const std::string& out_dir) {
  const auto& c = model->config();
  const auto config = hf_config_json(c, tokenizer);  // refuses what cannot be exported, first
  NamedTensors hf, own;
  for (const auto& p : model->named_parameters()) {
    const auto name = hf_tensor_name(p.key());
    (name.empty() ? own : hf)
        .emplace_back(name.empty() ? p.key() : name, p.value().detach().to(torch::kCPU, torch::kFloat));
  }
  const nlohmann::json provenance = {{"exported_by", "fbt export"}, {"git_sha", git_sha()}};
  write_directory_atomic(out_dir, [&](const std::string& dir) {
    const fs::path partial(dir);
    save_tensors((partial / "model.safetensors").string(), hf, provenance);
    save_tensors((partial / "fbt_fusion.safetensors").string(), own,
                 {{"exported_by", "fbt export"}, {"git_sha", git_sha()}, {"model_config", c.to_json()}});
    write_file_atomic((partial / "config.json").string(), config.dump(2) + "\n");
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
      if (!tokenizer_dir.empty() && fs::is_regular_file(fs::path(tokenizer_dir) / name))
        fs::copy_file(fs::path(tokenizer_dir) / name, partial / name);
  });
}

}  // namespace fbt
