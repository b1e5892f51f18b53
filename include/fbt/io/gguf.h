// GGUF files (ggml's docs/gguf.md, versions 2 and 3): header, metadata, tensor infos, and
// tensors dequantized to fp32.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace fbt {

/// One entry of a GGUF file's tensor-info table.
struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  ///< dimensions as stored, fastest first: ne[0] is the row length
  uint32_t type = 0;        ///< ggml_type id (gguf_quants.h)
  uint64_t offset = 0;      ///< byte offset from the start of the data section
  int64_t numel() const;
  /// The row-major (torch) shape: ne reversed, so token_embd's [576, 49152] is [49152, 576].
  std::vector<int64_t> shape() const;
};

/// A GGUF file's header, metadata and tensor infos (read_gguf); the tensor data stays on disk.
struct GgufFile {
  std::string path;
  uint32_t version = 0;
  /// Every key/value: integers (any width) as JSON integers, FLOAT32/FLOAT64 as numbers, BOOL,
  /// STRING, and ARRAY as JSON arrays (of any of these, nested arrays included).
  nlohmann::json metadata = nlohmann::json::object();
  std::vector<GgufTensorInfo> tensors;  ///< in file order
  uint64_t alignment = 32;              ///< general.alignment, or 32
  uint64_t data_offset = 0;             ///< start of the data section (aligned)
  uint64_t file_size = 0;
  /// The tensor named `name`, or nullptr.
  const GgufTensorInfo* find(const std::string& name) const;
};

/// Reads and checks the header, metadata and tensor infos of the GGUF file at `path`: magic
/// "GGUF", version 2 or 3 (little-endian), every length and count within the file (no allocation
/// larger than the file), every string valid UTF-8 (keys, values, the elements of string arrays,
/// tensor names: "'FILE': metadata 'general.name' is not valid UTF-8 (byte 0xFF at byte 101 of
/// the file; ...)", "metadata 'tokenizer.ggml.tokens'[17] is not valid UTF-8 ..."), a known value
/// type for every key, general.alignment a power of two,
/// unique tensor names, at most 4 dimensions each, and for the types fbt can dequantize
/// (gguf_quants.h) rows a whole number of blocks and data within the file. Every error is an
/// fbt::Error naming `path` and the field or tensor ("truncated reading the key of metadata
/// entry 3", "tensor 'blk.0.attn_q.weight': data ends at byte ... past the end of the file").
///
/// Token pieces are strings like any other (gguf_string_t is UTF-8 in docs/gguf.md, and llama.cpp's
/// converters write them so): byte-level BPE (tokenizer.ggml.model "gpt2") stores each byte as a
/// printable character (GPT-2's bytes_to_unicode: 'Ġ' for ' ', 'Ċ' for '\n'), and SentencePiece
/// ("llama") its byte pieces as the text "<0x0A>". So a piece that is not UTF-8 comes from a broken
/// converter, and it is refused rather than replaced: U+FFFD would merge distinct pieces and change
/// the tokenization, and tokenizer.json (JSON text is Unicode) cannot hold raw bytes.
GgufFile read_gguf(const std::string& path);

/// The tensor `info` of `file` as an fp32 CPU tensor of shape info.shape(), dequantized
/// (gguf_quants.h). Throws fbt::Error naming the file, the tensor and the type's name for a type
/// fbt cannot dequantize (e.g. "Q4_K"), or naming the file when it cannot be read.
torch::Tensor read_gguf_tensor(const GgufFile& file, const GgufTensorInfo& info);

/// The stored bytes of tensor `info` (numel / block values × block bytes, ggml's layout), as
/// read_gguf_tensor reads them; the same errors.
std::vector<uint8_t> read_gguf_tensor_bytes(const GgufFile& file, const GgufTensorInfo& info);

}  // namespace fbt
