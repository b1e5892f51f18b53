// GGUF llama/qwen2/qwen3 files -> fbt model (block llama), HF tokenizer files and provenance.
#include "fbt/io/gguf_import.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "fbt/data/hf_tokenizer.h"
#include "fbt/io/gguf_quants.h"
#include "fbt/io/gguf_tokenizer.h"
#include "fbt/util/error.h"
#include "fbt/util/hash.h"
#include "fbt/util/json_fields.h"

namespace fbt {
namespace fs = std::filesystem;

namespace {

std::string where(const GgufFile& f) { return "'" + f.path + "'"; }

/// Metadata `key` of `f` as T; missing (with no fallback) or mistyped is an fbt::Error naming the
/// file and the key.
template <class T>
T meta(const GgufFile& f, const std::string& key, const T* fallback = nullptr) {
  if (!f.metadata.contains(key)) {
    if (fallback) return *fallback;
    throw Error(where(f) + ": metadata key '" + key + "' is missing");
  }
  T out{};
  read_field(f.metadata.at(key), where(f) + ": metadata '" + key + "'", out);
  return out;
}
template <class T>
T meta_or(const GgufFile& f, const std::string& key, T fallback) {
  return meta<T>(f, key, &fallback);
}

/// The vocabulary size: the token list's length, else ARCH.vocab_size, else token_embd's rows.
int64_t vocab_size(const GgufFile& f, const std::string& arch) {
  if (f.metadata.contains("tokenizer.ggml.tokens")) {
    const auto& tokens = f.metadata.at("tokenizer.ggml.tokens");
    if (!tokens.is_array()) throw Error(where(f) + ": metadata 'tokenizer.ggml.tokens' is not an array");
    return static_cast<int64_t>(tokens.size());
  }
  if (f.metadata.contains(arch + ".vocab_size")) return meta<int64_t>(f, arch + ".vocab_size");
  const auto* embd = f.find("token_embd.weight");
  if (!embd || embd->ne.size() != 2)
    throw Error(where(f) + ": no vocabulary size (no token list, " + arch + ".vocab_size or 2-D token_embd.weight)");
  return embd->ne[1];
}

/// RoPE: θ from ARCH.rope.freq_base; scaling (ARCH.rope.scaling.type, or llama.cpp's per-dimension
/// rope_freqs tensor for llama3-style scaling) is not read yet, so it is refused rather than ignored.
void read_rope(const GgufFile& f, const std::string& arch, ModelConfig& c) {
  c.rope_theta = meta_or<double>(f, arch + ".rope.freq_base", 10000.0);
  const auto scaling = meta_or<std::string>(f, arch + ".rope.scaling.type", "none");
  if (scaling != "none")
    throw Error(where(f) + ": metadata '" + arch + ".rope.scaling.type' is \"" + scaling +
                "\"; RoPE scaling from GGUF is not supported yet");
  if (f.find("rope_freqs.weight"))
    throw Error(where(f) +
                ": tensor 'rope_freqs.weight' (per-dimension RoPE factors, llama3 scaling) is not supported yet");
  const auto rot = meta_or<int64_t>(f, arch + ".rope.dimension_count", c.head_dim());
  if (rot != c.head_dim())
    throw Error(where(f) + ": metadata '" + arch + ".rope.dimension_count' is " + std::to_string(rot) +
                " but the head dimension is " + std::to_string(c.head_dim()) +
                "; partial rotary embeddings are not supported");
}

/// The tensors of `f` copied into `params` (fbt names), dequantized and, for llama, q/k un-permuted;
/// returns the count of each stored type. Every tensor must be used exactly once.
std::map<std::string, int> load_tensors(const GgufFile& f, const std::string& arch, const ModelConfig& c,
                                        ImportParams& params) {
  std::map<std::string, int> types;
  std::set<std::string> used;
  for (auto& p : params) {
    const auto name = gguf_tensor_name(p.key());
    if (name.empty()) continue;  // fusion.*, input_norm.weight: fbt's own
    const auto* info = f.find(name);
    if (!info) throw Error(where(f) + ": missing tensor '" + name + "' (for fbt parameter '" + p.key() + "')");
    if (info->shape() != p.value().sizes().vec())
      throw Error(where(f) + ": tensor '" + name + "' has shape " + c10::str(at::IntArrayRef(info->shape())) +
                  " (GGUF dims reversed) but the metadata implies " + c10::str(p.value().sizes()));
    auto t = read_gguf_tensor(f, *info);
    if (const int64_t heads = gguf_permuted_heads(name, arch, c)) t = unpermute_llama_qk(t, heads);
    p.value().copy_(t);
    ++types[ggml_type_name(info->type)];
    used.insert(name);
  }
  for (const auto& t : f.tensors)
    if (!used.count(t.name))
      throw Error(where(f) + ": unexpected tensor '" + t.name + "' (not part of a " + arch +
                  " model with this metadata)");
  return types;
}

}  // namespace

std::vector<std::string> gguf_supported_architectures() { return {"llama", "qwen2", "qwen3"}; }

ModelConfig gguf_model_config(const GgufFile& f, const HfImportOptions& options) {
  const auto arch = meta<std::string>(f, "general.architecture");
  const auto supported = gguf_supported_architectures();
  if (std::find(supported.begin(), supported.end(), arch) == supported.end())
    throw Error(where(f) + ": architecture \"" + arch +
                "\" (general.architecture) is not supported (supported: llama, qwen2, qwen3)");
  ModelConfig c;
  c.block = BlockKind::Llama;
  c.vocab_size = vocab_size(f, arch);
  c.d_model = meta<int64_t>(f, arch + ".embedding_length");
  c.n_layers = meta<int64_t>(f, arch + ".block_count");
  c.n_heads = meta<int64_t>(f, arch + ".attention.head_count");
  c.n_kv_heads = meta_or<int64_t>(f, arch + ".attention.head_count_kv", c.n_heads);
  c.head_dim_override = meta_or<int64_t>(f, arch + ".attention.key_length", 0);
  if (c.head_dim_override * c.n_heads == c.d_model) c.head_dim_override = 0;  // the usual D/H
  c.d_ff = meta<int64_t>(f, arch + ".feed_forward_length");
  c.context = options.context > 0 ? options.context : meta<int64_t>(f, arch + ".context_length");
  c.window = 0;
  c.norm_eps = meta<double>(f, arch + ".attention.layer_norm_rms_epsilon");
  c.tie_embeddings = f.find("output.weight") == nullptr;
  c.attention_bias = f.find("blk.0.attn_q.bias") != nullptr;
  c.attention_out_bias = f.find("blk.0.attn_output.bias") != nullptr;
  c.qk_norm = arch == "qwen3";
  c.fusion = options.fusion;
  c.fusion_gate_init_std = options.fusion_gate_init_std;
  read_rope(f, arch, c);
  const auto eos = meta_or<int64_t>(f, "tokenizer.ggml.eos_token_id", -1);
  if (eos >= 0 && eos < c.vocab_size) c.doc_separator_id = eos;  // the position after a document's end is plain
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(where(f) + ": " + e.what());
  }
  return c;
}

std::string gguf_tensor_name(const std::string& fbt_name) {
  static const std::vector<std::pair<std::string, std::string>> modules = {
      {"input_layernorm", "attn_norm"},    {"post_attention_layernorm", "ffn_norm"},
      {"self_attn.q_proj", "attn_q"},      {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},      {"self_attn.o_proj", "attn_output"},
      {"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"},
      {"mlp.gate_proj", "ffn_gate"},       {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"}};
  const auto hf = hf_tensor_name(fbt_name);
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  if (hf.rfind(prefix, 0) != 0) return "";
  const size_t layer_end = hf.find('.', prefix.size()), leaf = hf.rfind('.');
  const std::string module = hf.substr(layer_end + 1, leaf - layer_end - 1);
  for (const auto& [hf_module, gguf_module] : modules)
    if (module == hf_module)
      return "blk." + hf.substr(prefix.size(), layer_end - prefix.size()) + "." + gguf_module + hf.substr(leaf);
  return "";
}

int64_t gguf_permuted_heads(const std::string& gguf_name, const std::string& arch, const ModelConfig& c) {
  if (arch != "llama") return 0;
  if (gguf_name.find(".attn_q.") != std::string::npos) return c.n_heads;
  if (gguf_name.find(".attn_k.") != std::string::npos) return c.n_kv_heads;
  return 0;
}

torch::Tensor unpermute_llama_qk(const torch::Tensor& w, int64_t n_head) {
  // LlamaModel.permute: reshape(n_head, 2, Dh/2, ...).swapaxes(1, 2); the inverse swaps back.
  auto shape = w.sizes().vec();
  std::vector<int64_t> split = {n_head, w.size(0) / n_head / 2, 2};
  split.insert(split.end(), shape.begin() + 1, shape.end());
  return w.reshape(split).transpose(1, 2).reshape(shape).contiguous();
}

HfImport import_gguf_model(const std::string& path, const HfImportOptions& options) {
  const auto file = read_gguf(path);
  const auto config = gguf_model_config(file, options);
  const auto arch = file.metadata.at("general.architecture").get<std::string>();
  auto tokenizer = hf_tokenizer_from_gguf(file);  // before the weights: its errors are quick
  HfBpeTokenizer::from_hf(tokenizer.tokenizer, tokenizer.config, config.vocab_size, path);  // checks it
  std::map<std::string, int> types;
  HfImport out;
  out.model = build_imported_model(config, options,
                                   [&](ImportParams& params) { types = load_tensors(file, arch, config, params); });
  out.hf_tokenizer = std::move(tokenizer.tokenizer);
  out.hf_tokenizer_config = std::move(tokenizer.config);
  out.source = {{"format", "gguf"},
                {"file", fs::absolute(path).lexically_normal().string()},
                {"file_bytes", file.file_size},
                {"sha256_sampled", sha256_hex_file_sampled(path)},
                {"gguf_version", file.version},
                {"architecture", arch},
                {"name", meta_or<std::string>(file, "general.name", "")},
                {"tensor_types", types},
                {"tokenizer_model", meta_or<std::string>(file, "tokenizer.ggml.model", "")},
                {"tokenizer_pre", meta_or<std::string>(file, "tokenizer.ggml.pre", "")},
                {"fusion_init", fusion_init_record(options)}};
  return out;
}

}  // namespace fbt
