// Hugging Face Llama/Qwen2/Qwen3 checkpoints -> fbt model (block llama) and run directory.
#include "fbt/io/hf_import.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "fbt/data/hf_tokenizer.h"
#include "fbt/io/checkpoint.h"
#include "fbt/io/run_dir.h"
#include "fbt/io/safetensors.h"
#include "fbt/util/atomic_file.h"
#include "fbt/util/build_info.h"
#include "fbt/util/error.h"
#include "fbt/util/hash.h"
#include "fbt/util/json_fields.h"

namespace fbt {
namespace fs = std::filesystem;

namespace {

nlohmann::json read_json_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw Error("'" + path.string() + "': cannot open for reading");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error("'" + path.string() + "': not valid JSON (" + json_error_brief(e) + ")");
  }
}

/// Field `key` of `j` as T, or `fallback` when absent or null; wrong types name `origin` and key.
template <class T>
T optional_field(const nlohmann::json& j, const std::string& key, const std::string& origin, T fallback) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  return required_field<T>(j, key, origin);
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

/// RoPE θ and scaling: transformers 5 writes rope_parameters {rope_type, rope_theta, ...};
/// transformers 4 (and most Hub configs) rope_theta beside rope_scaling {type|rope_type, ...}.
void read_rope(const nlohmann::json& hf, const std::string& origin, ModelConfig& c) {
  const bool v5 = hf.contains("rope_parameters") && !hf.at("rope_parameters").is_null();
  const std::string key = v5 ? "rope_parameters" : "rope_scaling";
  const nlohmann::json params = hf.contains(key) && !hf.at(key).is_null() ? hf.at(key) : nlohmann::json::object();
  const std::string where = origin + ": " + key;
  c.rope_theta = optional_field<double>(v5 ? params : hf, "rope_theta", v5 ? where : origin, 10000.0);
  std::string type = optional_field<std::string>(params, "rope_type", where, "");
  if (type.empty()) type = optional_field<std::string>(params, "type", where, "default");
  if (type == "default") return;
  if (type != "llama3") throw Error(where + ": field 'rope_type' is \"" + type + "\"; supported: default, llama3");
  c.rope_scaling = RopeScaling::Llama3;
  c.rope_scaling_factor = required_field<double>(params, "factor", where);
  c.rope_low_freq_factor = required_field<double>(params, "low_freq_factor", where);
  c.rope_high_freq_factor = required_field<double>(params, "high_freq_factor", where);
  c.rope_original_context = required_field<int64_t>(params, "original_max_position_embeddings", where);
}

/// The tensor names the shards hold and the file of each (model.safetensors or the index).
std::map<std::string, fs::path> weight_files(const fs::path& dir) {
  std::map<std::string, fs::path> files;  // tensor name -> file; filled per file below
  const auto single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  if (fs::is_regular_file(index)) {
    const auto j = read_json_file(index);
    const auto map = required_field<nlohmann::json>(j, "weight_map", "'" + index.string() + "'");
    if (!map.is_object()) throw Error("'" + index.string() + "': field 'weight_map' is not an object");
    for (const auto& [name, file] : map.items()) {
      if (!file.is_string())
        throw Error("'" + index.string() + "': weight_map entry '" + name + "' is not a file name");
      files[name] = dir / file.get<std::string>();
    }
    return files;
  }
  if (fs::is_regular_file(single)) return {{"", single}};  // "": every tensor of the one file
  throw Error("'" + dir.string() +
              "' has neither model.safetensors nor model.safetensors.index.json "
              "(PyTorch .bin checkpoints are not read; re-save with save_pretrained(safe_serialization=True))");
}

/// The content of the token with id `id` in tokenizer.json `tokenizer` (added tokens first), or "".
std::string token_content(const nlohmann::json& tokenizer, int64_t id) {
  for (const auto& t : tokenizer.value("added_tokens", nlohmann::json::array()))
    if (t.value("id", int64_t{-1}) == id) return t.value("content", "");
  for (const auto& [token, token_id] : tokenizer.at("model").at("vocab").items())
    if (token_id == id) return token;
  return "";
}

/// DIR/tokenizer.json and the special-token fields of DIR/tokenizer_config.json; a special token
/// the latter does not name comes from config.json's *_token_id (the first, if a list).
void read_hf_tokenizer(const fs::path& dir, const nlohmann::json& hf, HfImport& out) {
  const auto path = dir / "tokenizer.json";
  if (!fs::is_regular_file(path))
    throw Error(
        "'" + dir.string() +
        "' has no tokenizer.json (directories with only a sentencepiece "
        "tokenizer.model are not supported; transformers' AutoTokenizer.save_pretrained writes tokenizer.json)");
  out.hf_tokenizer = read_json_file(path);
  const auto config_path = dir / "tokenizer_config.json";
  const auto config = fs::is_regular_file(config_path) ? read_json_file(config_path) : nlohmann::json::object();
  for (const char* key : {"bos_token", "eos_token", "pad_token", "add_bos_token", "chat_template"})
    if (config.contains(key)) out.hf_tokenizer_config[key] = config.at(key);
  try {
    for (const std::string key : {"bos", "eos", "pad"}) {
      auto id = hf.value(key + "_token_id", nlohmann::json());
      if (id.is_array() && !id.empty()) id = id.at(0);
      if (!out.hf_tokenizer_config.contains(key + "_token") && id.is_number_integer())
        if (const auto content = token_content(out.hf_tokenizer, id.get<int64_t>()); !content.empty())
          out.hf_tokenizer_config[key + "_token"] = content;
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error("'" + path.string() + "': missing or mistyped field (" + json_error_brief(e) + ")");
  }
}

}  // namespace

std::vector<std::string> hf_supported_model_types() { return {"llama", "qwen2", "qwen3"}; }

ModelConfig hf_model_config(const nlohmann::json& hf, const std::string& origin, const HfImportOptions& options) {
  const auto model_type = required_field<std::string>(hf, "model_type", origin);
  const auto supported = hf_supported_model_types();
  if (std::find(supported.begin(), supported.end(), model_type) == supported.end())
    throw Error(origin + ": model_type \"" + model_type + "\" is not supported (supported: " + join(supported) + ")");
  const auto act = optional_field<std::string>(hf, "hidden_act", origin, "silu");
  if (act != "silu") throw Error(origin + ": field 'hidden_act' is \"" + act + "\"; only silu (SwiGLU) is supported");
  if (optional_field<bool>(hf, "mlp_bias", origin, false))
    throw Error(origin + ": field 'mlp_bias' is true; MLP biases are not supported");
  if (optional_field<bool>(hf, "use_sliding_window", origin, false))
    throw Error(origin + ": field 'use_sliding_window' is true; sliding-window layers are not supported");
  for (const auto& t : optional_field<nlohmann::json>(hf, "layer_types", origin, nlohmann::json::array()))
    if (t != "full_attention")
      throw Error(origin + ": field 'layer_types' holds " + t.dump() + "; only full_attention layers are supported");

  ModelConfig c;
  c.block = BlockKind::Llama;
  c.vocab_size = required_field<int64_t>(hf, "vocab_size", origin);
  c.d_model = required_field<int64_t>(hf, "hidden_size", origin);
  c.n_layers = required_field<int64_t>(hf, "num_hidden_layers", origin);
  c.n_heads = required_field<int64_t>(hf, "num_attention_heads", origin);
  c.n_kv_heads = optional_field<int64_t>(hf, "num_key_value_heads", origin, c.n_heads);
  // Qwen3Config's head_dim default is 128; Llama's and Qwen2's is hidden_size / heads.
  c.head_dim_override = optional_field<int64_t>(hf, "head_dim", origin, model_type == "qwen3" ? 128 : 0);
  if (c.head_dim_override * c.n_heads == c.d_model) c.head_dim_override = 0;  // the usual D/H
  c.d_ff = required_field<int64_t>(hf, "intermediate_size", origin);
  c.context = options.context > 0 ? options.context : required_field<int64_t>(hf, "max_position_embeddings", origin);
  c.window = 0;
  c.norm_eps = optional_field<double>(hf, "rms_norm_eps", origin, 1e-6);
  c.tie_embeddings = optional_field<bool>(hf, "tie_word_embeddings", origin, false);
  read_rope(hf, origin, c);
  const bool bias = optional_field<bool>(hf, "attention_bias", origin, false);
  c.attention_bias = model_type == "qwen2" || bias;      // Qwen2Attention: q/k/v always biased
  c.attention_out_bias = model_type != "qwen2" && bias;  // Qwen2's o_proj never is
  c.qk_norm = model_type == "qwen3";
  c.fusion = options.fusion;
  c.fusion_gate_init_std = options.fusion_gate_init_std;
  const auto eos = hf.contains("eos_token_id") ? hf.at("eos_token_id") : nlohmann::json();
  if (eos.is_number_integer() && eos.get<int64_t>() >= 0 && eos.get<int64_t>() < c.vocab_size)
    c.doc_separator_id = eos.get<int64_t>();  // the position after a document's end is plain
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(origin + ": " + e.what());
  }
  return c;
}

std::string hf_tensor_name(const std::string& name) {
  static const std::vector<std::pair<std::string, std::string>> modules = {
      {"attn_norm_in", "input_layernorm"}, {"mlp_norm_in", "post_attention_layernorm"},
      {"attn.wq", "self_attn.q_proj"},     {"attn.wk", "self_attn.k_proj"},
      {"attn.wv", "self_attn.v_proj"},     {"attn.wo", "self_attn.o_proj"},
      {"attn.q_norm", "self_attn.q_norm"}, {"attn.k_norm", "self_attn.k_norm"},
      {"mlp.w_gate", "mlp.gate_proj"},     {"mlp.w_up", "mlp.up_proj"},
      {"mlp.w_down", "mlp.down_proj"}};
  if (name == "embedding.weight") return "model.embed_tokens.weight";
  if (name == "final_norm.weight") return "model.norm.weight";
  if (name == "lm_head.weight") return name;
  if (name.rfind("blocks.", 0) != 0) return "";  // fusion.*, input_norm.weight: fbt's own
  const size_t layer_end = name.find('.', 7), leaf = name.rfind('.');
  const std::string module = name.substr(layer_end + 1, leaf - layer_end - 1);
  for (const auto& [fbt_module, hf_module] : modules)
    if (module == fbt_module)
      return "model.layers." + name.substr(7, layer_end - 7) + "." + hf_module + name.substr(leaf);
  return "";
}

HfImport import_hf_model(const std::string& dir_in, const HfImportOptions& options) {
  const fs::path dir(dir_in);
  if (!fs::is_directory(dir))
    throw Error("'" + dir_in + "' is not a directory (expected a Hugging Face model directory)");
  const auto config_path = dir / "config.json";
  if (!fs::is_regular_file(config_path)) throw Error("'" + dir_in + "' has no config.json");
  const auto hf = read_json_file(config_path);
  const auto config = hf_model_config(hf, "'" + config_path.string() + "'", options);

  HfImport out;
  read_hf_tokenizer(dir, hf, out);
  HfBpeTokenizer::from_hf(out.hf_tokenizer, out.hf_tokenizer_config, config.vocab_size, dir.string());  // checks it
  const auto files = weight_files(dir);
  std::set<std::string> dtypes;  // stored dtypes, for the record
  nlohmann::json file_names = nlohmann::json::array();
  out.model = build_imported_model(config, options, [&](ImportParams& params) {
    std::map<std::string, std::string> wanted;  // HF name -> fbt name
    for (const auto& p : params)
      if (auto hf_name = hf_tensor_name(p.key()); !hf_name.empty()) wanted[hf_name] = p.key();
    std::set<fs::path> to_read;
    for (const auto& [name, file] : files) to_read.insert(file);
    std::set<std::string> loaded;
    for (const auto& file : to_read) {
      file_names.push_back(file.filename().string());
      for (const auto& [name, tensor] : load_foreign_tensors(file.string()).tensors) {
        const auto it = wanted.find(name);
        if (it == wanted.end()) {
          // Buffers older transformers saved, and the tied head some writers store anyway.
          if (name.find("rotary_emb.inv_freq") != std::string::npos ||
              (config.tie_embeddings && name == "lm_head.weight"))
            continue;
          throw Error("'" + file.string() + "': unexpected tensor '" + name + "' (not part of a " +
                      hf.at("model_type").get<std::string>() + " model with this config.json)");
        }
        auto& p = params[it->second];
        if (p.sizes() != tensor.sizes())
          throw Error("'" + file.string() + "': tensor '" + name + "' has shape " + c10::str(tensor.sizes()) +
                      " but config.json implies " + c10::str(p.sizes()));
        if (!tensor.is_floating_point())
          throw Error("'" + file.string() + "': tensor '" + name + "' has non-float dtype " +
                      c10::str(tensor.scalar_type()));
        p.copy_(tensor.to(torch::kFloat));  // BF16 / F16 / F32 -> fp32
        dtypes.insert(c10::toString(tensor.scalar_type()));
        loaded.insert(name);
      }
    }
    for (const auto& [hf_name, fbt_name] : wanted)
      if (!loaded.count(hf_name))
        throw Error("'" + dir_in + "': missing tensor '" + hf_name + "' (for fbt parameter '" + fbt_name + "')");
  });

  out.source = {{"format", "hf"},
                {"directory", fs::absolute(dir).lexically_normal().string()},
                {"model_type", hf.at("model_type")},
                {"architectures", hf.value("architectures", nlohmann::json::array())},
                {"config_sha256", sha256_hex_file(config_path.string())},
                {"weight_files", file_names},
                {"weight_dtypes", dtypes},
                {"transformers_version", hf.value("transformers_version", "")},
                {"fusion_init", fusion_init_record(options)}};
  return out;
}

FBT build_imported_model(const ModelConfig& config, const HfImportOptions& options,
                         const std::function<void(ImportParams& params)>& fill) {
  torch::manual_seed(options.seed);  // W_G's draw (the constructor's init)
  FBT model(config);
  auto params = model->named_parameters();
  {
    torch::NoGradGuard no_grad;
    fill(params);
  }
  // The fusion rule (SPEC §4 init, see hf_import.h): W_U = I (0 for residual) and W_G ~ N(0, σ_G)
  // are the constructor's; the input norm's gain is set from the embedding table just loaded.
  model->match_input_norm_to_embedding();
  model->eval();
  return model;
}

nlohmann::json fusion_init_record(const HfImportOptions& options) {
  return {{"w_u", options.fusion == Fusion::Residual ? "zero" : "identity"},
          {"w_g_std", options.fusion_gate_init_std},
          {"seed", options.seed},
          {"input_norm", "per-dimension RMS of the embedding table"}};
}

void write_imported_run(const HfImport& imported, const std::string& run_dir) {
  write_directory_atomic(run_dir, [&](const std::string& dir) {
    const fs::path out(dir);
    FBT model = imported.model;
    const auto tokenizer = write_hf_tokenizer_dir((out / "tokenizer").string(), imported.hf_tokenizer,
                                                  imported.hf_tokenizer_config, model->config().vocab_size);
    const auto step_dir = out / step_dir_name(0);
    fs::create_directories(step_dir);
    save_model((step_dir / "model.safetensors").string(), model, tokenizer, 0);
    const nlohmann::json record = {{"tool", "fbt import"},
                                   {"config", {{"model", model->config().to_json()}}},
                                   {"imported_from", imported.source},
                                   {"git_sha", git_sha()},
                                   {"torch_version", torch_version()}};
    write_file_atomic((out / "run.json").string(), record.dump(2) + "\n");
    write_latest(dir, step_dir_name(0));
  });
}

}  // namespace fbt
