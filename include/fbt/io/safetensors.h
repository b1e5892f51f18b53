// Tensor file I/O for checkpoints: named tensors + JSON metadata in the safetensors format.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace fbt {

/// Named tensors in insertion order.
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

/// Writes `tensors` and `metadata` to `path` in the safetensors format
/// (8-byte little-endian header length, JSON header with dtype/shape/data_offsets per tensor and
/// a "__metadata__" object of string values, then the raw little-endian bytes), so Python's
/// `safetensors` can read our checkpoints. `metadata` (any JSON) is stored as the string value
/// "__metadata__": {"fbt": metadata.dump(), "sha256": <sha256 hex of the whole data section>,
/// "header_sha256": <sha256 hex of the header's compact JSON dump without this field>}.
/// Tensors on any device/any contiguity are copied to CPU contiguous first. Supported dtypes:
/// float32, float16, bfloat16, float64, int64, int32, int16, int8, uint8, bool.
/// Names must be unique and not "__metadata__"; tensors are laid out in insertion order.
/// Atomic: writes `path + ".tmp"` (fsync), then rename()s over `path`; on any failure the tmp is
/// removed and an existing file at `path` is untouched. Throws fbt::Error on I/O failure, an
/// unsupported dtype or a bad name.
void save_tensors(const std::string& path, const NamedTensors& tensors, const nlohmann::json& metadata);

/// The contents of a file written by save_tensors.
struct TensorFile {
  NamedTensors tensors;     ///< in file order (sorted by data offset), on the CPU
  nlohmann::json metadata;  ///< the `metadata` given to save_tensors
};

/// Reads a file written by save_tensors. Validates: file exists and is readable; header length
/// within the file; header is valid JSON; every tensor's dtype known, shape × itemsize equals
/// its byte range, ranges within the data section and non-overlapping; file size equals header +
/// data end (a truncated or extended file is an error that says expected vs actual size); the
/// sha256 of the data section matches the stored one, and header_sha256 the header when present
/// (files of other writers and of fbt before it have none) (corruption errors). Every error is an
/// fbt::Error naming `path` and the problem.
/// `place`, where given, is asked for each tensor in file order, once the header is validated:
/// (metadata, name, shape, dtype) ↦ the contiguous CPU tensor of that shape and dtype to read its
/// bytes into (a model's parameter: loading then holds the weights once), or an undefined tensor
/// for a new one. Where the checksum then fails, those tensors hold the corrupt bytes.
using TensorPlacement = std::function<torch::Tensor(const nlohmann::json& metadata, const std::string& name,
                                                    const std::vector<int64_t>& shape, torch::ScalarType dtype)>;
TensorFile load_tensors(const std::string& path, const TensorPlacement& place = {});

/// Reads a safetensors file of any writer (e.g. transformers' save_pretrained) with the same
/// structural checks as load_tensors, but no fbt metadata or checksum required (such files have
/// none). `metadata` is the header's raw "__metadata__" object, or null when absent. Tensors keep
/// their stored dtype. Every error is an fbt::Error naming `path`.
TensorFile load_foreign_tensors(const std::string& path);

}  // namespace fbt
