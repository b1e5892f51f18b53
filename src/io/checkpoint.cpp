// Model checkpoints: safetensors weights + {format_version, config, tokenizer, step, git SHA}.
#include "fbt/io/checkpoint.h"

#include <set>

#include "fbt/io/safetensors.h"
#include "fbt/util/build_info.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

CheckpointInfo parse_info(const nlohmann::json& meta, const std::string& path) {
  if (!meta.is_object() || !meta.contains("format_version") || !meta.contains("model_config"))
    throw Error(path + ": not an fbt model checkpoint (metadata lacks format_version/model_config)");
  CheckpointInfo info;
  info.format_version = meta.at("format_version").get<int>();
  if (info.format_version != kCheckpointFormatVersion)
    throw Error(path + ": checkpoint format version " + std::to_string(info.format_version) +
                " is not supported (this build reads version " +
                std::to_string(kCheckpointFormatVersion) + ")");
  info.config = ModelConfig::from_json(meta.at("model_config"), path + ": model_config");
  info.tokenizer = meta.value("tokenizer", nlohmann::json::object());
  info.step = meta.value("step", int64_t{0});
  info.git_sha = meta.value("git_sha", std::string("unknown"));
  return info;
}

/// Copies the file's tensors into `model` after checking config, names and shapes.
void assign_weights(const TensorFile& file, const CheckpointInfo& info, FBT& model,
                    const std::string& path) {
  const auto stored = info.config.to_json(), current = model->config().to_json();
  for (const auto& item : current.items())
    if (stored.at(item.key()) != item.value())
      throw Error(path + ": model config mismatch: " + item.key() + " is " +
                  stored.at(item.key()).dump() + " in the checkpoint but " + item.value().dump() +
                  " in the model");
  auto params = model->named_parameters();
  std::set<std::string> seen;
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : file.tensors) {
    auto* p = params.find(name);
    if (!p) throw Error(path + ": unexpected tensor '" + name + "' (not a parameter of this model)");
    if (p->sizes() != tensor.sizes())
      throw Error(path + ": tensor '" + name + "' has shape " + c10::str(tensor.sizes()) +
                  " but the model expects " + c10::str(p->sizes()));
    p->copy_(tensor);
    seen.insert(name);
  }
  for (const auto& p : params)
    if (!seen.count(p.key())) throw Error(path + ": missing tensor '" + p.key() + "'");
}

}  // namespace

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
  return parse_info(load_tensors(path).metadata, path);
}

CheckpointInfo load_weights(const std::string& path, FBT& model) {
  auto file = load_tensors(path);
  auto info = parse_info(file.metadata, path);
  assign_weights(file, info, model, path);
  return info;
}

FBT load_model(const std::string& path, CheckpointInfo* info_out) {
  auto file = load_tensors(path);
  auto info = parse_info(file.metadata, path);
  FBT model(info.config);
  assign_weights(file, info, model, path);
  if (info_out) *info_out = info;
  return model;
}

}  // namespace fbt
