// Importing GGUF files of the Llama family (llama.cpp's llama, qwen2, qwen3 architectures) into
// an fbt model with the Llama block, the tokenizer as Hugging Face files, and run provenance.
#pragma once
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fbt/io/gguf.h"
#include "fbt/io/hf_import.h"

namespace fbt {

/// The general.architecture values import_gguf_model reads: "llama", "qwen2", "qwen3".
std::vector<std::string> gguf_supported_architectures();

/// The fbt ModelConfig of a GGUF file (llama.cpp's keys, prefixed by the architecture ARCH):
/// ARCH.block_count, embedding_length, feed_forward_length, attention.head_count(_kv),
/// attention.key_length (head_dim), attention.layer_norm_rms_epsilon, context_length,
/// rope.freq_base; vocab size from tokenizer.ggml.tokens, else ARCH.vocab_size, else token_embd's
/// rows. The tensors decide the rest as llama.cpp's loader does: no output.weight = tied head;
/// blk.0.attn_q.bias = q/k/v biases, blk.0.attn_output.bias = output bias; qwen3 = QK-norm.
/// doc_separator_id = tokenizer.ggml.eos_token_id. Throws fbt::Error naming the file and the key
/// or tensor for another architecture (listing the supported ones), a missing or mistyped key,
/// RoPE scaling (ARCH.rope.scaling.type other than none, or a rope_freqs tensor: not supported
/// yet), or a partial rotary dimension (ARCH.rope.dimension_count != head_dim).
ModelConfig gguf_model_config(const GgufFile& file, const HfImportOptions& options);

/// The GGUF tensor name of an fbt parameter, or "" for the fusion and input norm: llama.cpp's
/// names (gguf-py's tensor_mapping.py) of hf_tensor_name's HF module names. embedding.weight ->
/// token_embd.weight, final_norm.weight -> output_norm.weight, lm_head.weight -> output.weight,
/// blocks.L.attn.wq.bias -> blk.L.attn_q.bias, blocks.L.mlp_norm_in.weight -> blk.L.ffn_norm.weight.
std::string gguf_tensor_name(const std::string& fbt_name);

/// Undoes llama.cpp's permutation of the llama architecture's attn_q/attn_k rows
/// (convert_hf_to_gguf.py, LlamaModel.permute: per head, HF's rotate-half order [x_0..x_(Dh/2-1),
/// y_0..] becomes the interleaved pairs [x_0, y_0, x_1, y_1, ...] ggml's RoPE expects). `w` is
/// [n_head·Dh, ...] (a weight or a bias); fbt's RoPE is rotate-half, so it needs HF's order back.
torch::Tensor unpermute_llama_qk(const torch::Tensor& w, int64_t n_head);

/// The head count whose rows unpermute_llama_qk must un-permute in GGUF tensor `gguf_name` of an
/// `arch` file (llama's attn_q: n_heads, attn_k: n_kv_heads), or 0 for every other tensor.
int64_t gguf_permuted_heads(const std::string& gguf_name, const std::string& arch, const ModelConfig& config);

/// Reads the GGUF file at `path` (gguf.h) and builds the fbt model: every tensor dequantized to
/// fp32 (ggml_supported_types(): the plain floats, Q4_0 ... Q8_0 and the K types Q2_K ... Q8_K, so
/// a Q4_K_M file with its Q6_K tensors imports), attn_q/attn_k un-permuted for the llama architecture,
/// the fusion initialised as the HF import does (build_imported_model). The tokenizer becomes HF
/// files (gguf_tokenizer.h); `source` records the file, its sampled sha256, architecture,
/// general.name and the tensor types. Throws fbt::Error naming the file and the key or tensor for
/// everything wrong: a missing, unexpected or misshapen tensor, an unsupported tensor type (by its
/// name, e.g. IQ4_XS), architecture or tokenizer.
HfImport import_gguf_model(const std::string& path, const HfImportOptions& options = {});

}  // namespace fbt
