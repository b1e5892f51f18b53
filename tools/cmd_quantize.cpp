// `fbt quantize --checkpoint RUN --weights int8|int4 --out NEWRUN`: a run whose matrix products are
// stored as Q8_0 / Q4_0 blocks (quantized_checkpoint.h), which generate, chat, serve and eval's
// generation tasks load without materialising the fp32 matrices.
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "fbt/infer/cpu_decoder.h"
#include "fbt/io/quantized_checkpoint.h"
#include "fbt/io/run_dir.h"
#include "fbt/util/atomic_file.h"
#include "fbt/util/build_info.h"
#include "fbt/util/error.h"

namespace fbt::cli {
namespace {
namespace fs = std::filesystem;

struct QuantizeArgs {
  std::string checkpoint, weights, out;
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
  const auto groups = decoder.quantized_groups();
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
  cmd->add_option("--out", a->out, "Run directory to create (must not exist, or be empty)")->required();
  cmd->callback([a] { run_quantize(*a); });
}

}  // namespace fbt::cli
