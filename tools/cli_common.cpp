// Helpers shared by the inference subcommands: --checkpoint loading, --device, vocab checks.
#include "cli_common.h"

#include <filesystem>

#include <torch/cuda.h>

#include "fbt/io/hf_import.h"
#include "fbt/io/run_dir.h"
#include "fbt/util/error.h"

namespace fbt::cli {

torch::Device parse_device(const std::string& value) {
  if (value == "auto") return torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  if (value != "cpu" && value != "cuda")
    throw Error("--device: unknown value '" + value + "' (expected one of: cpu, cuda, auto)");
  if (value == "cuda" && !torch::cuda::is_available()) throw Error("--device cuda: no CUDA device is available");
  return torch::Device(value);
}

LoadedCheckpoint load_checkpoint(const std::string& path, const std::string& device) {
  const auto target = parse_device(device);
  LoadedCheckpoint c;
  c.model_file = resolve_checkpoint(path);
  c.model = load_model(c.model_file, &c.info);
  c.model->to(target);
  c.model->eval();
  return c;
}

namespace {

/// Throws for a checkpoint imported without its tokenizer (fbt import records "hf-pending").
void check_tokenizer_imported(const LoadedCheckpoint& checkpoint) {
  const auto& own = checkpoint.info.tokenizer;
  if (own.is_object() && own.value("type", "") == kHfPendingTokenizer)
    throw Error("checkpoint '" + checkpoint.model_file + "' was imported without its tokenizer (tokenizer type \"" +
                kHfPendingTokenizer + "\"): importing Hugging Face tokenizers is not implemented yet");
}

}  // namespace

std::unique_ptr<Tokenizer> load_run_tokenizer(const LoadedCheckpoint& checkpoint) {
  check_tokenizer_imported(checkpoint);
  const std::string dir = (std::filesystem::path(run_dir_of(checkpoint.model_file)) / "tokenizer").string();
  if (!std::filesystem::is_directory(dir))
    throw Error("checkpoint '" + checkpoint.model_file + "' has no tokenizer directory '" + dir + "'");
  auto tokenizer = Tokenizer::load(dir);
  check_tokenizer_matches(tokenizer->meta(), dir, checkpoint);
  return tokenizer;
}

void check_tokenizer_matches(const nlohmann::json& meta, const std::string& origin,
                             const LoadedCheckpoint& checkpoint) {
  check_tokenizer_imported(checkpoint);
  const int64_t model_vocab = checkpoint.model->config().vocab_size;
  const auto vocab = meta.value("vocab_size", int64_t{-1});
  if (vocab != model_vocab)
    throw Error("tokenizer of '" + origin + "' has vocab_size " + std::to_string(vocab) + " but checkpoint '" +
                checkpoint.model_file + "' has vocab_size " + std::to_string(model_vocab));
  for (const char* field : {"type", "model_sha256"}) {
    const auto& own = checkpoint.info.tokenizer;
    if (own.is_object() && own.contains(field) && meta.contains(field) && own[field] != meta[field])
      throw Error("tokenizer of '" + origin + "' has " + field + " " + meta[field].dump() + " but checkpoint '" +
                  checkpoint.model_file + "' was trained with " + own[field].dump());
  }
}

}  // namespace fbt::cli
