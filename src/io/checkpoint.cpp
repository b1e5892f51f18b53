// Model checkpoints: safetensors weights + {format_version, config, tokenizer, step, git SHA}.
#include "fbt/io/checkpoint.h"

#include <algorithm>
#include <optional>
#include <set>

#include "fbt/io/quantized_checkpoint.h"
#include "fbt/io/safetensors.h"
#include "fbt/util/build_info.h"
#include "fbt/util/error.h"
#include "fbt/util/huge_pages.h"
#include "fbt/util/json_fields.h"

namespace fbt {

void assign_weights(const TensorFile& file, const CheckpointInfo& info, FBT& model, const std::string& path) {
  const auto stored = info.config.to_json(), current = model->config().to_json();
  for (const auto& item : current.items())
    if (stored.at(item.key()) != item.value())
      throw Error(path + ": model config mismatch: " + item.key() + " is " + stored.at(item.key()).dump() +
                  " in the checkpoint but " + item.value().dump() + " in the model");
  assign_tensors(file, model, path);
}

void assign_tensors(const TensorFile& file, FBT& model, const std::string& path) {
  if (file.metadata.is_object() && file.metadata.contains("quantized"))
    throw Error(path +
                ": a quantised checkpoint (fbt quantize) holds no fp32 matrices; training, a warm start "
                "(--init-from) and export need the fp32 run it was made from");
  auto params = model->named_parameters();
  std::set<std::string> seen;
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : file.tensors) {
    auto* p = params.find(name);
    if (!p) throw Error(path + ": unexpected tensor '" + name + "' (not a parameter of this model)");
    if (p->sizes() != tensor.sizes())
      throw Error(path + ": tensor '" + name + "' has shape " + c10::str(tensor.sizes()) + " but the model expects " +
                  c10::str(p->sizes()));
    if (tensor.data_ptr() != p->data_ptr()) p->copy_(tensor);  // else load_tensors read it in place
    seen.insert(name);
  }
  for (const auto& p : params)
    if (!seen.count(p.key())) throw Error(path + ": missing tensor '" + p.key() + "'");
}

CheckpointInfo checkpoint_info_from_metadata(const nlohmann::json& meta, const std::string& path) {
  if (!meta.is_object() || !meta.contains("format_version") || !meta.contains("model_config"))
    throw Error(path + ": not an fbt model checkpoint (metadata lacks format_version/model_config)");
  CheckpointInfo info;
  info.format_version = required_field<int>(meta, "format_version", path + ": metadata");
  if (info.format_version != kCheckpointFormatVersion)
    throw Error(path + ": checkpoint format version " + std::to_string(info.format_version) +
                " is not supported (this build reads version " + std::to_string(kCheckpointFormatVersion) + ")");
  const auto config = required_field<nlohmann::json>(meta, "model_config", path + ": metadata");
  // A checkpoint states every setting, with one exception: checkpoints written before a group of
  // keys was added (ModelConfig::added_key_groups: the Llama block switches, then the paper's input
  // norm and fusion init) lack all of that group. Those are filled with today's
  // defaults, which are the numerics those checkpoints were trained with. A checkpoint with some
  // keys of a group but not all is damaged like one lacking any other key.
  if (!config.is_object()) throw Error(path + ": metadata: field 'model_config' is not an object");
  std::vector<std::string> absent_groups;  // keys of the groups the checkpoint predates
  for (const auto& group : ModelConfig::added_key_groups())
    if (std::none_of(group.begin(), group.end(), [&](const auto& k) { return config.contains(k); }))
      absent_groups.insert(absent_groups.end(), group.begin(), group.end());
  const auto every_setting = ModelConfig().to_json();
  for (const auto& item : every_setting.items())
    if (!config.contains(item.key()) && !std::count(absent_groups.begin(), absent_groups.end(), item.key()))
      throw Error(path + ": model_config lacks '" + item.key() + "' (damaged, or written by another fbt version)");
  info.config = ModelConfig::from_json(config, path + ": model_config");
  info.tokenizer = required_field<nlohmann::json>(meta, "tokenizer", path + ": metadata");
  if (info.tokenizer.is_null()) info.tokenizer = nlohmann::json::object();  // saved without one
  if (!info.tokenizer.is_object()) throw Error(path + ": metadata: field 'tokenizer' is not an object");
  info.step = required_field<int64_t>(meta, "step", path + ": metadata");
  if (info.step < 0) throw Error(path + ": metadata: field 'step' is negative");
  info.git_sha = required_field<std::string>(meta, "git_sha", path + ": metadata");
  if (meta.contains("quantized"))
    info.quantized = std::make_shared<const QuantizedWeights>(quantized_weights_from_json(meta.at("quantized"), path));
  return info;
}

void save_model(const std::string& path, FBT& model, const nlohmann::json& tokenizer, int64_t step) {
  NamedTensors tensors;
  for (const auto& p : model->named_parameters())
    tensors.emplace_back(p.key(), p.value().detach().to(torch::kCPU, torch::kFloat));
  nlohmann::json meta{{"format_version", kCheckpointFormatVersion},
                      {"model_config", model->config().to_json()},
                      {"tokenizer", tokenizer},
                      {"step", step},
                      {"git_sha", git_sha()},
                      {"torch_version", torch_version()}};
  save_tensors(path, tensors, meta);
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  return checkpoint_info_from_metadata(load_tensors(path).metadata, path);
}

CheckpointInfo load_weights(const std::string& path, FBT& model) {
  auto file = load_tensors(path);
  auto info = checkpoint_info_from_metadata(file.metadata, path);
  assign_weights(file, info, model, path);
  return info;
}

FBT load_model(const std::string& path, CheckpointInfo* info_out) {
  // The model is made from the header's config before the data is read, and each tensor is read
  // straight into its parameter: the weights are held once, not once in the file's tensors and
  // once in the model. Tensors that match no parameter are read aside for assign_weights to name.
  // The parameters live in one huge-page mapping (huge_pages.h: decode streams them every step).
  std::optional<FBT> made;
  std::optional<CheckpointInfo> info;
  std::optional<QuantizedPlacement> quantized;  // a quantised checkpoint's placement
  torch::OrderedDict<std::string, torch::Tensor> params;
  auto place = [&](const nlohmann::json& metadata, const std::string& name, const std::vector<int64_t>& shape,
                   torch::ScalarType dtype) {
    if (!info) {
      info = checkpoint_info_from_metadata(metadata, path);
      if (info->quantized) quantized.emplace(info->config, *info->quantized, path);
    }
    if (quantized) return quantized->place(name, shape, dtype);
    if (!made) {
      made.emplace(info->config);
      params = (*made)->named_parameters();
      move_to_huge_pages(params.values(), /*copy=*/false);  // assign_weights checks each is read
    }
    const auto* p = params.find(name);
    return p && p->sizes() == torch::IntArrayRef(shape) && p->scalar_type() == dtype ? p->detach() : torch::Tensor();
  };
  auto file = load_tensors(path, place);
  if (quantized) {
    FBT model = quantized->finish(file, info->quantized);
    if (info_out) *info_out = *info;
    return model;
  }
  if (!made) {  // a file without tensors (assign_weights names the first one missing)
    info = checkpoint_info_from_metadata(file.metadata, path);
    made.emplace(info->config);
  }
  FBT model = *made;
  assign_weights(file, *info, model, path);
  if (info_out) *info_out = *info;
  return model;
}

}  // namespace fbt
