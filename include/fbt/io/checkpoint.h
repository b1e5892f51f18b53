// Model checkpoints: weights + versioned JSON metadata in one safetensors file (atomic write).
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "fbt/io/safetensors.h"
#include "fbt/model/model.h"

namespace fbt {

struct QuantizedWeights;  // quantized_checkpoint.h

/// Version of the checkpoint metadata layout; bump on incompatible change.
constexpr int kCheckpointFormatVersion = 1;

/// What a checkpoint says about itself (the "fbt" metadata of the safetensors file).
struct CheckpointInfo {
  int format_version = kCheckpointFormatVersion;
  ModelConfig config;
  nlohmann::json tokenizer;  ///< the dataset's tokenizer block (type, vocab_size, ids, model sha256)
  int64_t step = 0;
  std::string git_sha;
  /// A quantised checkpoint's matrix products (`fbt quantize`; quantized_checkpoint.h), null for an
  /// fp32 one. From the metadata alone the groups' blocks are unset; load_model sets them.
  std::shared_ptr<const QuantizedWeights> quantized;
};

/// Writes the model's parameters (fp32, names as in named_parameters()) and `info` (config
/// taken from the model, git SHA from the build) to `path` via a temporary file and rename;
/// an existing file at `path` survives any failure. Throws fbt::Error on I/O failure.
void save_model(const std::string& path, FBT& model, const nlohmann::json& tokenizer, int64_t step);

/// Parses a model checkpoint's metadata (safetensors.h TensorFile::metadata of `path`): every
/// field present with its JSON type (format_version, model_config with every ModelConfig key,
/// tokenizer, step >= 0, git_sha). Throws fbt::Error naming `path` and the field.
CheckpointInfo checkpoint_info_from_metadata(const nlohmann::json& metadata, const std::string& path);

/// Copies the tensors of `file` (read from `path`) into `model` after checking that `info`'s
/// config equals the model's and that names and shapes match; throws fbt::Error naming `path`
/// and the first mismatch. load_weights is this after load_tensors.
void assign_weights(const TensorFile& file, const CheckpointInfo& info, FBT& model, const std::string& path);

/// Both throw fbt::Error for a quantised checkpoint (it holds no fp32 matrices: training, a warm
/// start and export need the fp32 run it was made from).
/// assign_weights without the config check, for a model whose config may differ from the
/// checkpoint's in settings that do not change a tensor (a warm start with a longer context or
/// another RoPE θ): every parameter must be in `file` with its shape and `file` must hold
/// nothing else; throws fbt::Error naming `path` and the first tensor that is missing,
/// unexpected or of another shape.
void assign_tensors(const TensorFile& file, FBT& model, const std::string& path);

/// Reads only the metadata of a checkpoint (validating the whole file). Throws fbt::Error
/// naming `path` for a missing, truncated or corrupted file or an unknown format version.
CheckpointInfo read_checkpoint_info(const std::string& path);

/// Loads weights into an existing model. Throws fbt::Error naming `path` and the first
/// mismatch if the stored config differs from the model's (e.g. "d_model: file 128, model 64"),
/// or if a parameter is missing, unexpected or of the wrong shape.
CheckpointInfo load_weights(const std::string& path, FBT& model);

/// Builds a model from the checkpoint's own config and loads its weights (on the CPU). A quantised
/// checkpoint gives a Skeleton model (model.h) and info->quantized with its blocks loaded: only the
/// CPU decoder (CpuDecoderOptions::prequantized) can run it.
FBT load_model(const std::string& path, CheckpointInfo* info = nullptr);

}  // namespace fbt
