// Helpers shared by the inference subcommands: --checkpoint loading, --device, vocab checks.
#pragma once
#include <memory>
#include <string>

#include "fbt/data/tokenizer.h"
#include "fbt/io/checkpoint.h"

namespace fbt::cli {

/// A model loaded from a --checkpoint PATH.
struct LoadedCheckpoint {
  std::string model_file;  ///< the resolved model.safetensors
  CheckpointInfo info;
  FBT model{nullptr};      ///< in eval mode, on the requested device
};

/// The --device flag: "cpu", "cuda", or "auto" (CUDA when available, else the CPU). Throws
/// fbt::Error naming --device for another value or for "cuda" without a CUDA device.
torch::Device parse_device(const std::string& value);

/// Resolves PATH (model file, step dir or run dir; run_dir.h), loads the model in eval mode and
/// moves it to `device` (a --device value, parse_device). Throws fbt::Error naming PATH for a missing or bad
/// checkpoint, or for an unknown or unavailable device.
LoadedCheckpoint load_checkpoint(const std::string& path, const std::string& device);

/// The checkpoint's own tokenizer, RUNDIR/tokenizer (run_dir.h), checked against the model vocab.
/// Throws fbt::Error naming the directory if it is missing or does not match, and naming the
/// checkpoint if it was imported without its tokenizer (hf_import.h kHfPendingTokenizer).
std::unique_ptr<Tokenizer> load_run_tokenizer(const LoadedCheckpoint& checkpoint);

/// Throws fbt::Error naming both sides unless the tokenizer described by `tokenizer_meta` (a
/// meta.json "tokenizer" block read from `origin`) has the model's vocab size and, where both
/// record them, the same type and sentencepiece model sha256 as the checkpoint's tokenizer; and
/// naming the checkpoint if it was imported without its tokenizer (kHfPendingTokenizer).
void check_tokenizer_matches(const nlohmann::json& tokenizer_meta, const std::string& origin,
                             const LoadedCheckpoint& checkpoint);

}  // namespace fbt::cli
