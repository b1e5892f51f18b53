// A quantised run that keeps a GGUF file's own blocks (`fbt quantize --from-gguf`): the matrix
// products of a model imported from the file decode from the Q8_0, Q4_0, Q5_0, Q4_K and Q6_K blocks
// the file stores (quant_gemv.h reads them in place), not from blocks quantised again from their
// fp32 dequantisation.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fbt/io/gguf.h"
#include "fbt/io/quantized_checkpoint.h"
#include "fbt/model/model.h"

namespace fbt {

/// The matrix products of a quantised run, some of them a GGUF file's blocks.
struct GgufBlockGroups {
  std::vector<QuantizedGroup> groups;                          ///< blocks in `storage`, ggml's layout
  std::vector<std::shared_ptr<std::vector<uint8_t>>> storage;  ///< the groups' bytes
  std::map<std::string, int64_t> kept;                         ///< tensors kept as the file's blocks, by type
  std::vector<std::string> requantised;  ///< parameters whose blocks are not the file's (quantised from fp32)
};

/// `groups` (the matrix products of `model` as `fbt quantize` stores them: CpuDecoder's
/// quantized_groups, parameters stacked, blocks in ggml's layout) with every parameter whose GGUF
/// tensor (gguf_tensor_name) `file` stores as Q8_0, Q4_0, Q5_0, Q4_K or Q6_K taking the file's
/// blocks instead, llama's attn_q/attn_k rows un-permuted as import_gguf_model un-permutes them
/// (a row of blocks moves as a whole); a group splits into consecutive runs of parts in one format
/// (a Q4_K_M file stores attn_v in Q6_K beside a Q4_K attn_q). Every other parameter (the fusion,
/// types quant_linear does not read) keeps its blocks from `groups`.
///
/// Every tensor of the file that a grouped parameter maps to, kept or not, must dequantise to
/// exactly the model's parameter: the model was imported from this file and not trained since.
/// Throws fbt::Error naming the file, the tensor and the parameter for a tensor that differs or has
/// another shape, or for a read error.
GgufBlockGroups gguf_block_groups(const GgufFile& file, FBT& model, const std::vector<QuantizedGroup>& groups);

}  // namespace fbt
