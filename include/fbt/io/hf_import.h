// Importing Hugging Face Llama-family checkpoints (LlamaForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM) into an fbt model with the Llama block, and writing it as an fbt run directory.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fbt/model/config.h"
#include "fbt/model/model.h"

namespace fbt {

/// The config.json model_type values import_hf_model reads: "llama", "qwen2", "qwen3".
std::vector<std::string> hf_supported_model_types();

/// Settings of an import that HF's config.json does not give.
struct HfImportOptions {
  int64_t context = 0;  ///< model context (KV cache, positions); 0: max_position_embeddings
  /// The fusion put on top of the imported stack (SPEC §4). Residual, the default:
  /// W_U = 0, so the import is the base model in every decoding mode and a warm start
  /// (`fbt train --init-from`) starts from it; glu / glu_plus_token start with W_U = I.
  Fusion fusion = Fusion::Residual;
  double fusion_gate_init_std = 0.02;  ///< std of W_G (seeded by `seed`)
  uint64_t seed = 0;                   ///< seed of W_G's draw
};

/// The fbt ModelConfig of an HF config.json object `hf` (`origin` names the file in errors):
/// block llama; vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
/// num_key_value_heads, head_dim, intermediate_size, max_position_embeddings, rms_norm_eps,
/// tie_word_embeddings, RoPE θ and llama3 scaling (transformers 5's rope_parameters or 4's
/// rope_theta + rope_scaling), attention biases (llama: attention_bias on q/k/v/o; qwen2: q/k/v;
/// qwen3: attention_bias on q/k/v/o), QK-norm (qwen3); doc_separator_id = eos_token_id when it
/// is one id in the vocabulary. Throws fbt::Error naming `origin` and the field for a model_type
/// outside hf_supported_model_types (listing them), a hidden_act other than silu, mlp_bias,
/// sliding-window layers, an unsupported rope type, or a missing or mistyped field.
ModelConfig hf_model_config(const nlohmann::json& hf, const std::string& origin, const HfImportOptions& options);

/// The HF tensor name of an fbt parameter, or "" for the fusion and input-norm parameters that
/// HF models do not have: embedding.weight -> model.embed_tokens.weight, blocks.L.attn.wq.bias ->
/// model.layers.L.self_attn.q_proj.bias, blocks.L.mlp_norm_in.weight ->
/// model.layers.L.post_attention_layernorm.weight, final_norm.weight -> model.norm.weight, ...
/// (modeling_llama.py's module names).
std::string hf_tensor_name(const std::string& fbt_name);

/// An imported model (from HF or GGUF, gguf_import.h) and what the run directory records about it.
struct HfImport {
  FBT model{nullptr};  ///< fp32, CPU, eval mode
  /// tokenizer.json content (a GGUF import synthesizes one); written by write_hf_tokenizer_dir.
  nlohmann::json hf_tokenizer;
  /// tokenizer_config.json's bos_token, eos_token, pad_token, add_bos_token and chat_template
  /// (those present; special tokens as strings or {"content": ...}).
  nlohmann::json hf_tokenizer_config = nlohmann::json::object();
  nlohmann::json source;  ///< provenance: directory or file, model_type/architecture, files, dtypes
};

/// The fbt parameters of an importer, by fbt name (FBT::named_parameters()).
using ImportParams = torch::OrderedDict<std::string, torch::Tensor>;

/// The part every importer shares: an FBT of `config` whose fusion starts as SPEC §4 says (W_U =
/// I, or 0 for fusion residual; W_G ~ N(0, options.fusion_gate_init_std) drawn with options.seed), whose imported
/// parameters `fill` copies in (under NoGradGuard), and whose input norm's gain is then the per-dimension RMS of the
/// embedding table (FBT::match_input_norm_to_embedding). Returned in eval mode.
FBT build_imported_model(const ModelConfig& config, const HfImportOptions& options,
                         const std::function<void(ImportParams& params)>& fill);

/// The run.json record of that fusion init ("fusion_init" of the import's provenance): w_u
/// "zero" (fusion residual) or "identity", w_g_std, seed, input_norm.
nlohmann::json fusion_init_record(const HfImportOptions& options);

/// Reads DIR/config.json and DIR/model.safetensors or the shards listed by
/// DIR/model.safetensors.index.json (BF16/F16/F32 tensors, converted to fp32), and builds the
/// fbt model. Reads DIR/tokenizer.json (required: sentencepiece-only directories, with just
/// tokenizer.model, are not supported) and DIR/tokenizer_config.json (optional); a special token
/// tokenizer_config.json does not name is taken from config.json's bos/eos/pad_token_id. The
/// tokenizer is checked (HfBpeTokenizer::from_hf) here, before anything is written. fbt's RoPE is rotate-half like
/// HF's, so q/k weights are copied unpermuted. The fusion, which HF models lack, starts as in SPEC §4: W_U = I (W_U = 0
/// for fusion residual, the default) and W_G ~ N(0, fusion_gate_init_std) drawn with `seed`; the input norm's gain is
/// the per-dimension RMS of the embedding table (FBT::match_input_norm_to_embedding), so a glu fused input has the
/// scale of the raw embedding the Llama block's plain input is. The standard mode then computes exactly the HF model's
/// logits, and with fusion residual so does every other mode (tests/model/test_fusion_residual.cpp). Throws fbt::Error
/// naming the file for a missing config or weights file, a missing tensor, a tensor of the wrong shape, an unexpected
/// tensor, or a bad field.
HfImport import_hf_model(const std::string& dir, const HfImportOptions& options = {});

/// Writes `imported` as an fbt run directory (run_dir.h): RUNDIR/step-0000000/model.safetensors
/// (save_model, step 0, recording the tokenizer's meta block), RUNDIR/latest, RUNDIR/tokenizer/
/// (write_hf_tokenizer_dir: tokenizer.json, meta.json, chat_template.jinja) and RUNDIR/run.json
/// (config and provenance), all under RUNDIR.partial renamed to RUNDIR at the end
/// (write_directory_atomic): a failure leaves no stub. RUNDIR must not exist or be empty;
/// otherwise fbt::Error naming it, before anything is written.
void write_imported_run(const HfImport& imported, const std::string& run_dir);

}  // namespace fbt
