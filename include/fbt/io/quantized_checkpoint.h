// Quantised checkpoints (`fbt quantize`): the matrix products of a model stored as ggml Q8_0 / Q4_0
// blocks (or, with --from-gguf, a GGUF file's own Q5_0 / Q4_K / Q6_K ones too) beside its fp32 norms
// (and untied embedding), loaded without ever materialising the fp32 matrices.
//
// File: an fbt model checkpoint (checkpoint.h) whose metadata has, besides the usual fields,
//   "quantized": {"weights": "int8" | "int4",
//                 "groups": [{"parts": [parameter names], "format": "Q8_0" | "Q4_0" | "Q5_0" | "Q4_K" | "Q6_K",
//                             "rows": N, "cols": K}]}
// Group g is the parameters `parts` stacked row-wise ([N, K], the matrices CpuDecoder multiplies
// by: q/k/v(/gate) together, gate/up together, o, down, W_U, W_G, the head, or consecutive runs of
// their parts where a GGUF file stores them in several formats), stored as the uint8 tensor
// "quantized.<parts[0]>" of N × K/values blocks (34 bytes per 32 values for Q8_0, 18 for Q4_0, 22
// for Q5_0, 144 per 256 for Q4_K, 210 for Q6_K; ggml's layout, quant_gemv.h). Every other parameter is an fp32 tensor
// under its own name; the parameters of the groups are not stored (a tied embedding is read from the head's blocks).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fbt/io/safetensors.h"
#include "fbt/model/model.h"

namespace fbt {

/// One quantised matrix product of a checkpoint.
struct QuantizedGroup {
  std::vector<std::string> parts;   ///< the parameters stacked row-wise, in order
  std::string format;               ///< "Q8_0", "Q4_0", "Q5_0", "Q4_K" or "Q6_K" (quant_gemv.h)
  int64_t rows = 0, cols = 0;       ///< N (the parts' rows together) and K (a multiple of the block values)
  const uint8_t* blocks = nullptr;  ///< N × K/values blocks (loaded: inside QuantizedWeights::memory)
  /// The blocks are in tiles of 8 rows (gguf_quants.h, tile8_blocks), as load_model keeps Q8_0 and
  /// Q4_0 ones for the decoder's kernels; files hold ggml's row-major layout.
  bool tiled = false;
  /// Bytes of the blocks: rows × cols/values × block bytes. Throws fbt::Error for an unknown format.
  int64_t bytes() const;
  /// The tensor name in the file: "quantized." + parts[0].
  std::string tensor_name() const { return "quantized." + parts.at(0); }
};

/// The quantised matrix products of a loaded checkpoint.
struct QuantizedWeights {
  std::string weights;  ///< "int8" or "int4" (fbt quantize --weights)
  std::vector<QuantizedGroup> groups;
  std::shared_ptr<uint8_t> memory;  ///< the huge-page mapping holding every group's blocks
  /// The groups whose parts, one group after the other, are `parts` (one group for a run of
  /// `fbt quantize`; several where a GGUF file stores q, k and v in different formats), or none.
  std::vector<const QuantizedGroup*> cover(const std::vector<std::string>& parts) const;
};

/// The "quantized" field of checkpoint metadata as QuantizedWeights (blocks unset). Throws fbt::Error
/// naming `origin` and the field for a weights value other than int8/int4, a group without parts,
/// an unknown format, a non-positive size, cols not a multiple of the format's block values, or a
/// parameter in two groups.
QuantizedWeights quantized_weights_from_json(const nlohmann::json& quantized, const std::string& origin);

/// Writes `model`'s checkpoint with `groups` (blocks set, each a product of the model's parameters)
/// quantised as `weights` ("int8" or "int4"): the groups' blocks as uint8 tensors, every other
/// parameter in fp32, the metadata of save_model plus "quantized". Atomic as save_model. Throws
/// fbt::Error on I/O failure or for a group whose blocks are tiled.
void save_quantized_model(const std::string& path, FBT& model, const nlohmann::json& tokenizer, int64_t step,
                          const std::string& weights, const std::vector<QuantizedGroup>& groups);

/// Where load_model (checkpoint.h) has load_tensors put a quantised checkpoint's tensors: the model
/// is made as a Skeleton (model.h: no fp32 matrix is allocated), each fp32 tensor is read into a
/// parameter of the stored shape, each group's blocks straight into one huge-page mapping
/// (huge_pages.h: the decode step streams them, and a file mapping would sit on 4 KiB pages). So
/// the resident peak is the quantised weights plus the fp32 rest, once.
class QuantizedPlacement {
 public:
  /// For a checkpoint of `config` with `quantized` (its metadata's groups); `path` names it in
  /// errors. Allocates the mapping for every group's blocks.
  QuantizedPlacement(const ModelConfig& config, QuantizedWeights quantized, std::string path);
  /// load_tensors' TensorPlacement for tensor `name` of `shape` and `dtype`: a group's blocks, a
  /// parameter (given its stored shape), or undefined (read aside: finish names it).
  torch::Tensor place(const std::string& name, const std::vector<int64_t>& shape, torch::ScalarType dtype);
  /// After load_tensors read `file`: checks that every tensor went into place and that every
  /// parameter outside the groups was read with the model's shape, then returns the model and sets
  /// `quantized` (blocks and memory), each group's blocks reordered in place into tiles of 8 rows
  /// (QuantizedGroup::tiled) where their format has tiles. Throws fbt::Error naming the path and the first tensor that
  /// is unexpected, missing or misshapen.
  FBT finish(const TensorFile& file, std::shared_ptr<const QuantizedWeights>& quantized);

 private:
  ModelConfig config_;
  QuantizedWeights quantized_;
  std::string path_;
  FBT model_{nullptr};
  torch::OrderedDict<std::string, torch::Tensor> params_;
  std::vector<int64_t> offsets_;  ///< each group's offset in the mapping
};

}  // namespace fbt
