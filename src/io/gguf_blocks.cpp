// A quantised run's matrix products with a GGUF file's own blocks (include/fbt/io/gguf_blocks.h).
#include "fbt/io/gguf_blocks.h"

#include <cstring>

#include "fbt/io/gguf_import.h"
#include "fbt/io/gguf_quants.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

int64_t row_bytes(QuantFormat format, int64_t cols) {
  return cols / quant_block_values(format) * ggml_block_layout(quant_format_ggml_type(format))->bytes;
}

/// One parameter's rows of a group: their format and bytes.
struct PartBlocks {
  std::string name;
  QuantFormat format;
  int64_t rows = 0;
  const uint8_t* bytes = nullptr;
  std::vector<uint8_t> owned;  ///< the file's blocks, where kept
};

/// Checks that `file`'s tensor of parameter `name` (if it has one: not the fusion) dequantises
/// exactly to `value`, the parameter's fp32 weights, whatever its type; then, where the type is one
/// quant_linear reads, sets `part` to the file's blocks and returns true.
bool read_file_blocks(const GgufFile& file, const std::string& arch, const ModelConfig& config, const std::string& name,
                      const torch::Tensor& value, PartBlocks& part) {
  const auto tensor = gguf_tensor_name(name);
  const auto* info = tensor.empty() ? nullptr : file.find(tensor);
  if (!info) return false;
  const std::string where =
      "--from-gguf '" + file.path + "': tensor '" + tensor + "' (" + ggml_type_name(info->type) + ")";
  if (info->shape() != value.sizes().vec())
    throw Error(where + " has shape " + c10::str(at::IntArrayRef(info->shape())) + " but parameter '" + name +
                "' has " + c10::str(value.sizes()) + ": not the file this run was imported from");
  auto bytes = read_gguf_tensor_bytes(file, *info);
  torch::Tensor values;
  try {
    values = dequantize_ggml(info->type, bytes.data(), info->numel()).reshape(info->shape());
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  const int64_t heads = gguf_permuted_heads(tensor, arch, config);
  if (heads) values = unpermute_llama_qk(values, heads);
  if (!torch::equal(values, value))
    throw Error(where + " does not dequantise to parameter '" + name + "' (max difference " +
                std::to_string((values - value).abs().max().item<double>()) +
                "): the run was trained after its import, or imported from another file");
  const auto format = quant_format_of_ggml_type(info->type);
  if (!format) return false;  // checked, but quantised from fp32 as --weights says
  if (heads) {                // whole rows of blocks move
    const auto rows = torch::from_blob(bytes.data(), {value.size(0), row_bytes(*format, value.size(1))}, torch::kUInt8);
    const auto unpermuted = unpermute_llama_qk(rows, heads);
    std::memcpy(bytes.data(), unpermuted.data_ptr<uint8_t>(), bytes.size());
  }
  part.format = *format;
  part.owned = std::move(bytes);
  part.bytes = part.owned.data();
  return true;
}

}  // namespace

GgufBlockGroups gguf_block_groups(const GgufFile& file, FBT& model, const std::vector<QuantizedGroup>& groups) {
  const auto& config = model->config();
  const auto arch = file.metadata.value("general.architecture", std::string());
  auto params = model->named_parameters();
  GgufBlockGroups out;
  for (const auto& g : groups) {
    const auto format = quant_format_named(g.format, "quantized group " + g.parts.at(0));
    std::vector<PartBlocks> parts;
    int64_t row = 0;
    for (const auto& name : g.parts) {
      const auto value = params[name].detach();
      PartBlocks part{name, format, value.size(0), g.blocks + row * row_bytes(format, g.cols), {}};
      if (read_file_blocks(file, arch, config, name, value, part))
        ++out.kept[quant_format_name(part.format)];
      else
        out.requantised.push_back(name);
      row += part.rows;
      parts.push_back(std::move(part));
    }
    for (size_t i = 0; i < parts.size();) {  // one group per run of parts in one format
      QuantizedGroup run;
      run.format = quant_format_name(parts[i].format);
      run.cols = g.cols;
      auto bytes = std::make_shared<std::vector<uint8_t>>();
      size_t j = i;
      for (; j < parts.size() && parts[j].format == parts[i].format; ++j) {
        const int64_t n = parts[j].rows * row_bytes(parts[j].format, g.cols);
        bytes->insert(bytes->end(), parts[j].bytes, parts[j].bytes + n);
        run.parts.push_back(parts[j].name);
        run.rows += parts[j].rows;
      }
      run.blocks = bytes->data();
      out.storage.push_back(std::move(bytes));
      out.groups.push_back(std::move(run));
      i = j;
    }
  }
  return out;
}

}  // namespace fbt
