// Helpers shared by the subcommands: --checkpoint loading, --device, vocab checks, strict
// range validators for numeric flags, and output-path checks made before any work.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "fbt/infer/decode_backend.h"
#include "fbt/data/chat_template.h"
#include "fbt/data/tokenizer.h"
#include "fbt/io/checkpoint.h"

namespace fbt::cli {

/// A model loaded from a --checkpoint PATH.
struct LoadedCheckpoint {
  std::string model_file;  ///< the resolved model.safetensors
  CheckpointInfo info;
  FBT model{nullptr};  ///< in eval mode, on the requested device
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
/// checkpoint if an older `fbt import` wrote it without its tokenizer (type "hf-pending").
std::unique_ptr<Tokenizer> load_run_tokenizer(const LoadedCheckpoint& checkpoint);

/// The chat template of a checkpoint whose run tokenizer is `tokenizer` (load_run_tokenizer):
/// ChatTemplate::for_tokenizer with `name` (a --chat-template value: auto, chatml, llama3, fbt),
/// errors naming RUNDIR/tokenizer/chat_template.jinja. Throws fbt::Error as for_tokenizer does.
ChatTemplate load_chat_template(const LoadedCheckpoint& checkpoint, const Tokenizer& tokenizer,
                                const std::string& name);

/// Adds `--weights` (fp32, int8 or int4; default fp32) bound to `value`: the weights of the CPU decode step.
CLI::Option* add_weights_option(CLI::App* cmd, std::string& value);

/// The decoding backend of a --weights value for `checkpoint`'s model: empty for fp32 (generate()
/// makes its own), a CpuDecoder's with Q8_0 / Q4_0 weights for int8 / int4
/// (quantised here, once; a quantised run's own blocks, read in place, whatever --weights says
/// short of a contradiction: run_weights). Throws fbt::Error naming --weights when int8 or int4 is
/// asked of a model the CPU step cannot decode (CpuDecoder's constructor).
/// `sole_user`: nothing but this decoder will run the model (generate, chat), so the quantised
/// matrices replace its fp32 ones (CpuDecoderOptions::release_model_weights).
std::shared_ptr<DecodeBackend> decode_backend_for(LoadedCheckpoint& checkpoint, const std::string& weights,
                                                  bool sole_user);

/// The decode weights of `checkpoint` asked by --weights `weights`: `weights` for an fp32 run; a
/// quantised run's own ("int8" or "int4") when `weights` is that or the default fp32. Throws
/// fbt::Error naming --weights for int4 on an int8 run and the reverse.
std::string run_weights(const LoadedCheckpoint& checkpoint, const std::string& weights);

/// Throws fbt::Error naming the run and `what` (e.g. "fbt export") for a quantised run: it has no
/// fp32 matrices, which `what` needs.
void require_fp32_weights(const LoadedCheckpoint& checkpoint, const std::string& what);

/// Adds `--threads N` (CPU threads of libtorch and the decode kernels; set_cpu_threads in
/// fbt/util/cpu_threads.h), applied when parsed, before the command runs. Without it (or with 0)
/// main's default holds: OMP_NUM_THREADS where set, else the physical cores this process may use.
CLI::Option* add_threads_option(CLI::App* cmd);

/// Adds `--chat-template` (auto, chatml, llama3, fbt; default auto) bound to `value`, `when` saying
/// when it applies ("" for always) in --help; load_chat_template reads it.
CLI::Option* add_chat_template_option(CLI::App* cmd, std::string& value, const std::string& when);

/// Throws fbt::Error naming both sides unless the tokenizer described by `tokenizer_meta` (a
/// meta.json "tokenizer" block read from `origin`) has the model's vocab size and, where both
/// record them, the same type and tokenizer model sha256 (sentencepiece or tokenizer.json) as the
/// checkpoint's tokenizer; and naming a checkpoint imported without its tokenizer ("hf-pending").
void check_tokenizer_matches(const nlohmann::json& tokenizer_meta, const std::string& origin,
                             const LoadedCheckpoint& checkpoint);

// ---- numeric flags: CLI11 validators that read the text strictly (CLI11's own conversion
// saturates "99999999999999999999" and wraps "-1" for unsigned options). Each shows its range in
// --help, and a value outside it fails as "--FLAG: ..." (main prints "error: " and exits 1).
// Delimited options (--passes 1,2,3) check every element.

/// An integer in [lo, hi], written in decimal ("INT >= lo" or "INT in [lo, hi]" in --help).
CLI::Validator integer_range(int64_t lo, int64_t hi = std::numeric_limits<int64_t>::max());
/// -1 (meaning all / no limit) or an integer >= 1: --limit, --max-tokens.
CLI::Validator count_or_all();
/// A seed: an unsigned 64-bit integer in [0, 2^64 - 1], written in decimal ("-1" is an error).
CLI::Validator seed_value();
/// A finite number in [lo, hi]; `lo_open` / `hi_open` exclude the bound ("(0, 1]").
CLI::Validator number_range(double lo, double hi, bool lo_open = false, bool hi_open = false);
/// A sampling temperature: 0 (greedy) or a number in [kMinTemperature, kMaxTemperature]
/// (include/fbt/infer/generate.h, the range check_temperature enforces).
CLI::Validator temperature_value();

// ---- progress on stderr

/// A progress callback printing "WHAT: done/total UNIT" on stderr. On a terminal one line is
/// rewritten in place (carriage return) and ended when done == total; otherwise (a file or a
/// pipe) each printed update is its own line: the first, every tenth of the total, and
/// the last.
std::function<void(int64_t, int64_t)> progress_printer(const std::string& what, const std::string& unit);

// ---- output paths, checked before the work that produces them

/// Throws fbt::Error naming `flag`, `path` and the OS error (strerror) unless `path` can be
/// written by write_file_atomic: it is not a directory, and its directory exists and is writable.
/// An empty path (the flag not given) passes.
void check_output_file(const std::string& flag, const std::string& path);
/// Throws fbt::Error naming `flag`, `path` and the OS error unless `path` is a writable directory
/// or can be created as one (it does not exist and its nearest existing ancestor is a writable
/// directory). An empty path passes.
void check_output_dir(const std::string& flag, const std::string& path);

}  // namespace fbt::cli
