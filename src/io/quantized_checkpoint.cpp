// Quantised checkpoints: the "quantized" metadata, writing, and placing the tensors at load.
#include "fbt/io/quantized_checkpoint.h"

#include <algorithm>
#include <set>

#include "fbt/io/checkpoint.h"
#include "fbt/io/gguf_quants.h"
#include "fbt/util/build_info.h"
#include "fbt/util/error.h"
#include "fbt/util/huge_pages.h"

namespace fbt {
namespace {

QuantFormat format_of(const QuantizedGroup& g) { return quant_format_named(g.format, "quantized group"); }

int64_t aligned(int64_t offset) { return (offset + 63) / 64 * 64; }  // each group at a cache line

nlohmann::json groups_json(const std::vector<QuantizedGroup>& groups) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& g : groups)
    out.push_back({{"parts", g.parts}, {"format", g.format}, {"rows", g.rows}, {"cols", g.cols}});
  return out;
}

}  // namespace

int64_t QuantizedGroup::bytes() const {
  const auto format = format_of(*this);
  return rows * (cols / quant_block_values(format)) * ggml_block_layout(quant_format_ggml_type(format))->bytes;
}

std::vector<const QuantizedGroup*> QuantizedWeights::cover(const std::vector<std::string>& parts) const {
  std::vector<const QuantizedGroup*> out;
  for (size_t at = 0; at < parts.size();) {
    const auto starts_here = [&](const QuantizedGroup& g) {
      return g.parts.size() <= parts.size() - at && std::equal(g.parts.begin(), g.parts.end(), parts.begin() + at);
    };
    const auto it = std::find_if(groups.begin(), groups.end(), starts_here);
    if (it == groups.end()) return {};
    out.push_back(&*it);
    at += it->parts.size();
  }
  return out;
}

QuantizedWeights quantized_weights_from_json(const nlohmann::json& q, const std::string& origin) {
  const std::string where = origin + ": metadata field 'quantized'";
  try {
    QuantizedWeights out;
    out.weights = q.at("weights").get<std::string>();
    if (out.weights != "int8" && out.weights != "int4")
      throw Error(where + ".weights is \"" + out.weights + "\" (expected int8 or int4)");
    std::set<std::string> seen;
    for (const auto& j : q.at("groups")) {
      QuantizedGroup g{j.at("parts").get<std::vector<std::string>>(), j.at("format").get<std::string>(),
                       j.at("rows").get<int64_t>(), j.at("cols").get<int64_t>()};
      const std::string named = where + ".groups (" + (g.parts.empty() ? "?" : g.parts[0]) + ")";
      if (g.parts.empty()) throw Error(named + ": no parts");
      const int64_t values = quant_block_values(quant_format_named(g.format, named));
      if (g.rows < 1 || g.cols < values || g.cols % values != 0)
        throw Error(named + ": " + std::to_string(g.rows) + " x " + std::to_string(g.cols) +
                    " is not a matrix of whole " + std::to_string(values) + "-value blocks (" + g.format + ")");
      for (const auto& part : g.parts)
        if (!seen.insert(part).second) throw Error(named + ": parameter '" + part + "' is in two groups");
      out.groups.push_back(std::move(g));
    }
    return out;
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + " is malformed (" + std::string(e.what()) + ")");
  }
}

void save_quantized_model(const std::string& path, FBT& model, const nlohmann::json& tokenizer, int64_t step,
                          const std::string& weights, const std::vector<QuantizedGroup>& groups) {
  std::set<std::string> grouped;
  for (const auto& g : groups) {
    if (g.tiled)
      throw Error(path + ": quantized group '" + g.parts.at(0) + "' is in tiles of 8 rows, not ggml's layout");
    grouped.insert(g.parts.begin(), g.parts.end());
  }
  NamedTensors tensors;
  for (const auto& p : model->named_parameters())
    if (!grouped.count(p.key())) tensors.emplace_back(p.key(), p.value().detach().to(torch::kCPU, torch::kFloat));
  for (const auto& g : groups)
    tensors.emplace_back(g.tensor_name(), torch::from_blob(const_cast<uint8_t*>(g.blocks), {g.bytes()}, torch::kUInt8));
  nlohmann::json meta{{"format_version", kCheckpointFormatVersion},
                      {"model_config", model->config().to_json()},
                      {"tokenizer", tokenizer},
                      {"step", step},
                      {"git_sha", git_sha()},
                      {"torch_version", torch_version()},
                      {"quantized", {{"weights", weights}, {"groups", groups_json(groups)}}}};
  save_tensors(path, tensors, meta);
}

QuantizedPlacement::QuantizedPlacement(const ModelConfig& config, QuantizedWeights quantized, std::string path)
    : config_(config), quantized_(std::move(quantized)), path_(std::move(path)) {
  model_ = FBT(config_, Materialize::Skeleton);
  params_ = model_->named_parameters();
  int64_t total = 0;
  for (const auto& g : quantized_.groups) {
    for (const auto& part : g.parts)
      if (!params_.find(part))
        throw Error(path_ + ": quantized group part '" + part + "' is not a parameter of the model");
    offsets_.push_back(aligned(total));
    total = offsets_.back() + g.bytes();
  }
  quantized_.memory = huge_page_bytes(static_cast<size_t>(std::max<int64_t>(total, 1)));
  for (size_t i = 0; i < quantized_.groups.size(); ++i)
    quantized_.groups[i].blocks = quantized_.memory.get() + offsets_[i];
}

torch::Tensor QuantizedPlacement::place(const std::string& name, const std::vector<int64_t>& shape,
                                        torch::ScalarType dtype) {
  for (const auto& g : quantized_.groups)
    if (name == g.tensor_name())
      return shape == std::vector<int64_t>{g.bytes()} && dtype == torch::kUInt8
                 ? torch::from_blob(const_cast<uint8_t*>(g.blocks), {g.bytes()}, torch::kUInt8)
                 : torch::Tensor();
  auto* p = params_.find(name);
  if (!p || dtype != torch::kFloat) return {};
  torch::NoGradGuard no_grad;
  if (p->sizes() != torch::IntArrayRef(shape)) {
    if (p->numel() != 0) return {};                   // a norm of another size: finish names it
    p->set_data(torch::empty(shape, torch::kFloat));  // a skeleton parameter stored in fp32
  }
  return p->detach();
}

FBT QuantizedPlacement::finish(const TensorFile& file, std::shared_ptr<const QuantizedWeights>& quantized) {
  std::set<std::string> grouped, read;
  for (const auto& g : quantized_.groups) grouped.insert(g.parts.begin(), g.parts.end());
  for (const auto& [name, tensor] : file.tensors) {
    const bool in_place = std::any_of(quantized_.groups.begin(), quantized_.groups.end(), [&](const auto& g) {
      return name == g.tensor_name() && tensor.data_ptr() == g.blocks;
    });
    const auto* p = params_.find(name);
    if (!in_place && !(p && !grouped.count(name) && tensor.data_ptr() == p->data_ptr()))
      throw Error(path_ + ": unexpected tensor '" + name + "' of shape " + c10::str(tensor.sizes()) + " (" +
                  c10::toString(tensor.scalar_type()) + ") in a quantised checkpoint");
    read.insert(name);
  }
  for (const auto& g : quantized_.groups)
    if (!read.count(g.tensor_name())) throw Error(path_ + ": missing tensor '" + g.tensor_name() + "'");
  for (const auto& p : params_)
    if (!grouped.count(p.key()) && !read.count(p.key())) throw Error(path_ + ": missing tensor '" + p.key() + "'");
  for (auto& g : quantized_.groups) {  // the decoder's kernels read Q8_0, Q4_0 and Q5_0 in tiles: no second copy
    const auto format = format_of(g);
    if (!quant_format_tiles(format)) continue;
    tile8_blocks(quant_format_ggml_type(format), g.rows, g.cols, const_cast<uint8_t*>(g.blocks));
    g.tiled = true;
  }
  quantized = std::make_shared<const QuantizedWeights>(std::move(quantized_));
  return model_;
}

}  // namespace fbt
