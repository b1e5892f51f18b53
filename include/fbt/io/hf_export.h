// Exporting an fbt model with the Llama block (imported or trained) as a Hugging Face model
// directory that transformers loads: config.json + model.safetensors, with the fusion weights
// kept beside them in fbt_fusion.safetensors, which transformers ignores.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "fbt/model/config.h"
#include "fbt/model/model.h"

namespace fbt {

/// The transformers model_type a Llama-block config is exported as: "qwen3" with QK-norm,
/// "qwen2" with biases on q/k/v but not on o, else "llama" (modeling_llama.py, whose
/// attention_bias covers q/k/v/o). Throws fbt::Error naming the setting for the paper's block
/// (block fbt: no transformers counterpart), a sliding window, qwen2 with head_dim != D/H, or
/// a bias combination none of the three has.
std::string hf_model_type(const ModelConfig& config);

/// config.json for `config` (transformers 4's keys, which transformers 5 also reads):
/// architectures, model_type, sizes, head_dim, hidden_act silu, max_position_embeddings =
/// context, rms_norm_eps, rope_theta and rope_scaling (llama3), attention_bias,
/// tie_word_embeddings, bos/eos/pad_token_id from the tokenizer block (`tokenizer`: bos_id,
/// eos_id, pad_id; negative or absent ids are left out), torch_dtype float32. The inverse of
/// hf_model_config (hf_import.h) on every setting HF models have.
nlohmann::json hf_config_json(const ModelConfig& config, const nlohmann::json& tokenizer);

/// Writes `model` (block llama) as the HF directory `out_dir` (must not exist or be empty):
/// config.json; model.safetensors with every parameter HF has under its HF name (hf_tensor_name),
/// fp32; fbt_fusion.safetensors with the fusion and input-norm weights and the full fbt model
/// config in its metadata; and, when given, `tokenizer_dir`'s tokenizer.json, tokenizer_config.json
/// and chat_template.jinja (copied as they are). The files are written into OUT.partial and
/// renamed to OUT at the end, so a failure leaves no half-written model. transformers then loads
/// OUT and computes fbt's standard-mode logits. Throws fbt::Error naming the setting or path at
/// fault (hf_model_type's errors; an existing non-empty OUT; I/O errors).
void export_hf_model(const FBT& model, const nlohmann::json& tokenizer, const std::string& tokenizer_dir,
                     const std::string& out_dir);

}  // namespace fbt
