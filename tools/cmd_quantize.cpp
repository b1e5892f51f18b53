// `fbt quantize --checkpoint RUN --weights int8|int4 [--from-gguf FILE] --out NEWRUN`: a run whose
// matrix products are stored as Q8_0 / Q4_0 blocks (quantized_checkpoint.h), or as the blocks of the
// GGUF file the run was imported from, which generate, chat, serve and eval's generation tasks load
// without materialising the fp32 matrices.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "fbt/infer/cpu_decoder.h"
#include "fbt/io/gguf_blocks.h"
#include "fbt/io/quantized_checkpoint.h"
#include "fbt/io/run_dir.h"
#include "fbt/util/atomic_file.h"
#include "fbt/util/build_info.h"
#include "fbt/util/error.h"

namespace fbt::cli {
namespace {
namespace fs = std::filesystem;

struct QuantizeArgs {
  std::string checkpoint, weights, out, from_gguf;
};

void run_quantize(const QuantizeArgs& a) {
  if (a.weights != "int8" && a.weights != "int4")
    throw Error("--weights: expected int8 or int4, got '" + a.weights + "'");
  check_new_directory(a.out);  // before the work, not after it
  auto checkpoint = load_checkpoint(a.checkpoint, "cpu");
  require_fp32_weights(checkpoint, "fbt quantize");
  if (!CpuDecoder::supports(checkpoint.model))
    throw Error("--checkpoint '" + checkpoint.model_file +
                "': the CPU decode step cannot run this model (attention "
                "biases or scaled RoPE), so a quantised run of it could not be decoded");
  const auto source_tokenizer = fs::path(run_dir_of(checkpoint.model_file)) / "tokenizer";
  if (!fs::is_directory(source_tokenizer))
    throw Error("--checkpoint '" + checkpoint.model_file + "' has no tokenizer directory '" +
                source_tokenizer.string() + "'");
  CpuDecoderOptions options;
  options.weights = parse_decode_weights(a.weights, "--weights");
  options.quant_layout = QuantLayout::Rows;             // the file holds ggml's layout
  const CpuDecoder decoder(checkpoint.model, options);  // the matrices exactly as --weights quantises them
  auto groups = decoder.quantized_groups();
  GgufBlockGroups from_file;
  if (!a.from_gguf.empty()) {
    from_file = gguf_block_groups(read_gguf(a.from_gguf), checkpoint.model, groups);
    groups = from_file.groups;
  }
  const int64_t step = checkpoint.info.step;
  write_directory_atomic(a.out, [&](const std::string& dir) {
    const fs::path out(dir);
    fs::copy(source_tokenizer, out / "tokenizer", fs::copy_options::recursive);
    fs::create_directories(out / step_dir_name(step));
    save_quantized_model((out / step_dir_name(step) / "model.safetensors").string(), checkpoint.model,
                         checkpoint.info.tokenizer, step, a.weights, groups);
    const nlohmann::json record = {{"tool", "fbt quantize"},
                                   {"weights", a.weights},
                                   {"quantized_from", checkpoint.model_file},
                                   {"from_gguf", a.from_gguf.empty() ? nlohmann::json() : nlohmann::json(a.from_gguf)},
                                   {"gguf_blocks_kept", from_file.kept},
                                   {"config", {{"model", checkpoint.model->config().to_json()}}},
                                   {"git_sha", git_sha()},
                                   {"torch_version", torch_version()}};
    write_file_atomic((out / "run.json").string(), record.dump(2) + "\n");
    write_latest(dir, step_dir_name(step));
  });
  int64_t bytes = 0;
  for (const auto& g : groups) bytes += g.bytes();
  std::cout << "quantized " << checkpoint.model_file << " (step " << step << ") to " << a.weights << ": "
            << groups.size() << " matrix products, " << bytes / 1000 << " kB of blocks -> " << a.out << "/"
            << step_dir_name(step) << "\n";
  if (!a.from_gguf.empty()) {
    std::cout << "kept the blocks of " << a.from_gguf << ":";
    for (const auto& [type, count] : from_file.kept) std::cout << " " << count << " " << type;
    std::cout << " tensors; quantised to " << a.weights << " from fp32: " << from_file.requantised.size()
              << " parameters";
    for (size_t i = 0; i < std::min<size_t>(from_file.requantised.size(), 4); ++i)
      std::cout << (i == 0 ? " (" : ", ") << from_file.requantised[i];
    std::cout << (from_file.requantised.size() > 4 ? ", ...)" : from_file.requantised.empty() ? "" : ")") << "\n";
  }
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "quantize",
      "Write a run whose matrix products are Q8_0 (int8) or Q4_0 (int4, head Q8_0) blocks: generate, chat, "
      "serve and eval's generation tasks load it without the fp32 matrices");
  cmd->add_option("--checkpoint", a->checkpoint, "Run directory, step directory or model.safetensors (fp32)")
      ->required();
  cmd->add_option("--weights", a->weights, "int8 (Q8_0 blocks) or int4 (Q4_0 blocks, the head Q8_0)")
      ->check(CLI::IsMember({"int8", "int4"}))
      ->required();
  cmd->add_option(
         "--from-gguf", a->from_gguf,
         "The GGUF file the run was imported from (`fbt import --from gguf`): keep its Q8_0, Q4_0, Q5_0, "
         "Q4_K and Q6_K blocks as they are (decoded in place); the rest (the fusion, other types) as --weights")
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", a->out, "Run directory to create (must not exist, or be empty)")->required();
  cmd->callback([a] { run_quantize(*a); });
}

}  // namespace fbt::cli
