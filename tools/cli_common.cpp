// Helpers shared by the subcommands: --checkpoint loading, --device, vocab checks, numeric
// validators, output-path checks.
#include "cli_common.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include <torch/cuda.h>

#include "fbt/infer/generate.h"
#include "fbt/io/run_dir.h"
#include "fbt/util/cpu_threads.h"
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
  auto target = parse_device(device);
  LoadedCheckpoint c;
  c.model_file = resolve_checkpoint(path);
  c.model = load_model(c.model_file, &c.info);
  if (c.info.quantized) {  // its matrices exist only as the CPU decoder's blocks
    if (device == "cuda")
      throw Error("--device cuda: '" + c.model_file +
                  "' is a quantised run (fbt quantize), which decodes on the CPU only");
    target = torch::kCPU;
  }
  c.model->to(target);
  c.model->eval();
  return c;
}

namespace {

/// Throws for a checkpoint that `fbt import` wrote before it imported tokenizers: its tokenizer
/// block says "hf-pending" (and its tokenizer/meta.json is no dataset meta).
void check_tokenizer_imported(const LoadedCheckpoint& checkpoint) {
  const auto& own = checkpoint.info.tokenizer;
  if (own.is_object() && own.value("type", "") == "hf-pending")
    throw Error("checkpoint '" + checkpoint.model_file +
                "' was imported by an fbt that did not import tokenizers yet "
                "(tokenizer type \"hf-pending\"); import the model again with `fbt import`");
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

ChatTemplate load_chat_template(const LoadedCheckpoint& checkpoint, const Tokenizer& tokenizer,
                                const std::string& name) {
  const auto file = std::filesystem::path(run_dir_of(checkpoint.model_file)) / "tokenizer" / "chat_template.jinja";
  return ChatTemplate::for_tokenizer(tokenizer, name, file.string());
}

CLI::Option* add_chat_template_option(CLI::App* cmd, std::string& value, const std::string& when) {
  return cmd
      ->add_option("--chat-template", value,
                   when +
                       "auto (the checkpoint tokenizer's own template; fbt's native one for fbt-trained models), "
                       "chatml, llama3 or fbt (include/fbt/data/chat_template.h)")
      ->check(CLI::IsMember({"auto", "chatml", "llama3", "fbt"}))
      ->capture_default_str();
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

// ---- numeric flags
namespace {

/// `text` as a whole, in decimal (an optional leading '+'), if it is a T; nullopt otherwise
/// (not a number, trailing characters, out of T's range, or a '-' for an unsigned T).
template <class T>
std::optional<T> parse_whole(const std::string& text) {
  std::string_view s(text);
  if (s.size() > 1 && s[0] == '+' && s[1] != '-') s.remove_prefix(1);
  T value{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

std::string format_number(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

}  // namespace

CLI::Validator integer_range(int64_t lo, int64_t hi) {
  const std::string range = hi == std::numeric_limits<int64_t>::max()
                                ? ">= " + std::to_string(lo)
                                : "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        const auto v = parse_whole<int64_t>(text);
        if (!v || *v < lo || *v > hi) return "expected an integer " + range + ", got '" + text + "'";
        return {};
      },
      "INT " + range);
}

CLI::Validator count_or_all() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const auto v = parse_whole<int64_t>(text);
        if (!v || (*v != -1 && *v < 1)) return "expected -1 (all) or an integer >= 1, got '" + text + "'";
        return {};
      },
      "-1 (all) or INT >= 1");
}

CLI::Validator seed_value() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (!parse_whole<uint64_t>(text)) return "expected an integer in [0, 18446744073709551615], got '" + text + "'";
        return {};
      },
      "UINT in [0, 2^64-1]");
}

CLI::Validator number_range(double lo, double hi, bool lo_open, bool hi_open) {
  const std::string range =
      std::string(lo_open ? "(" : "[") + format_number(lo) + ", " + format_number(hi) + (hi_open ? ")" : "]");
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const auto v = parse_whole<double>(text);
        const bool ok = v && std::isfinite(*v) && (lo_open ? *v > lo : *v >= lo) && (hi_open ? *v < hi : *v <= hi);
        if (!ok) return "expected a number in " + range + ", got '" + text + "'";
        return {};
      },
      "NUMBER in " + range);
}

CLI::Validator temperature_value() {
  const std::string range =
      "0 (greedy) or a number in [" + format_number(kMinTemperature) + ", " + format_number(kMaxTemperature) + "]";
  return CLI::Validator(
      [range](std::string& text) -> std::string {
        const auto v = parse_whole<double>(text);
        if (!v || !temperature_in_range(*v)) return "expected " + range + ", got '" + text + "'";
        return {};
      },
      range);
}

// ---- output paths
namespace {

[[noreturn]] void fail_path(const std::string& flag, const std::string& path, int err) {
  throw Error(flag + " " + path + ": " + std::strerror(err));
}

/// Throws unless `dir` is an existing directory this process may create files in.
void check_writable_dir(const std::string& flag, const std::string& path, const std::filesystem::path& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) fail_path(flag, path, errno);
  if (!S_ISDIR(st.st_mode)) fail_path(flag, path, ENOTDIR);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) fail_path(flag, path, errno);
}

}  // namespace

void check_output_file(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  const std::filesystem::path p(path);
  struct stat st {};
  if (::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fail_path(flag, path, EISDIR);
  check_writable_dir(flag, path, p.has_parent_path() ? p.parent_path() : std::filesystem::path("."));
}

std::function<void(int64_t, int64_t)> progress_printer(const std::string& what, const std::string& unit) {
  const bool tty = isatty(STDERR_FILENO) != 0;
  return [what, unit, tty, last_tenth = int64_t{-1}](int64_t done, int64_t total) mutable {
    if (tty) {
      std::cerr << "\r" << what << ": " << done << "/" << total << " " << unit << (done == total ? "\n" : "")
                << std::flush;
      return;
    }
    const int64_t tenth = total > 0 ? done * 10 / total : 10;
    if (tenth == last_tenth && done != total) return;
    last_tenth = tenth;
    std::cerr << what << ": " << done << "/" << total << " " << unit << "\n" << std::flush;
  };
}

void check_output_dir(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  std::filesystem::path p = std::filesystem::absolute(path);
  struct stat st {};
  while (::stat(p.c_str(), &st) != 0) {  // climb to the nearest existing ancestor
    if (errno != ENOENT) fail_path(flag, path, errno);
    if (!p.has_parent_path() || p.parent_path() == p) fail_path(flag, path, ENOENT);
    p = p.parent_path();
  }
  check_writable_dir(flag, path, p);
}

CLI::Option* add_threads_option(CLI::App* cmd) {
  return cmd
      ->add_option_function<int64_t>(
          "--threads", [](int64_t threads) { set_cpu_threads(threads); },
          "CPU threads (0, the default: OMP_NUM_THREADS where set, else the physical cores this process may use)")
      ->check(integer_range(0, 1024));
}

CLI::Option* add_weights_option(CLI::App* cmd, std::string& value) {
  return cmd
      ->add_option(
          "--weights", value,
          "Weights of the CPU decode step: fp32 (the model's own), int8 (Q8_0 blocks quantised at load: "
          "a quarter of the bytes per token) or int4 (Q4_0 blocks, the head Q8_0: an eighth); every prefill runs on "
          "them too")
      ->check(CLI::IsMember({"fp32", "int8", "int4"}))
      ->capture_default_str();
}

std::shared_ptr<DecodeBackend> decode_backend_for(LoadedCheckpoint& checkpoint, const std::string& weights,
                                                  bool sole_user) {
  CpuDecoderOptions options;
  options.weights = parse_decode_weights(run_weights(checkpoint, weights), "--weights");
  if (options.weights == DecodeWeights::Fp32) return nullptr;
  options.release_model_weights = sole_user;
  options.prequantized = checkpoint.info.quantized;
  return cpu_backend(std::make_shared<CpuDecoder>(checkpoint.model, options));
}

std::string run_weights(const LoadedCheckpoint& checkpoint, const std::string& weights) {
  if (!checkpoint.info.quantized) return weights;
  const auto& stored = checkpoint.info.quantized->weights;
  if (weights != "fp32" && weights != stored)
    throw Error("--weights " + weights + ": '" + checkpoint.model_file + "' is a run quantised to " + stored +
                " (fbt quantize); omit --weights or give " + stored);
  return stored;
}

void require_fp32_weights(const LoadedCheckpoint& checkpoint, const std::string& what) {
  if (checkpoint.info.quantized)
    throw Error("'" + checkpoint.model_file + "' is a run quantised to " + checkpoint.info.quantized->weights +
                " (fbt quantize), which holds no fp32 matrices: " + what + " needs them; use the run it was made from");
}

}  // namespace fbt::cli
