// `fbt bench`: training, prefill and decode throughput, MFU and peak memory (llama-bench style).
#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <iostream>
#include <sstream>

#include "cli_common.h"
#include "commands.h"
#include "fbt/bench/bandwidth.h"
#include "fbt/bench/throughput.h"
#include "fbt/infer/batch_gemv.h"
#include "fbt/infer/cpu_decoder.h"
#include "fbt/io/checkpoint.h"
#include "fbt/io/run_dir.h"
#include "fbt/util/atomic_file.h"
#include "fbt/util/build_info.h"
#include "fbt/util/error.h"
#include "fbt/util/huge_pages.h"
#include "fbt/util/memory_stats.h"

namespace fbt::cli {
namespace {

struct BenchArgs {
  std::string preset = "small", device = "auto", format = "md", out, results_dir, decoder = "auto", dtype = "fp32",
              hardware, weights = "fp32", activations = "int8", checkpoint;
  std::vector<std::string> tests{"train", "prefill", "decode"};
  std::vector<int64_t> passes{1, 2, 3}, batch_sizes{1, 8}, contexts{64, 128};
  int64_t train_batch = 8, train_seq = 0, new_tokens = 64, reps = 5, warmup = 1, peak_size = 0;
  uint64_t seed = 1234;
};

/// Model shapes `fbt bench` knows: the presets, and llama-134m — the D=768, L=12, H=12,
/// d_ff=2048, V=32000 shape of the llama.cpp comparison (docs/benchmarks.md; the 6.45 M shape of
/// that comparison is the `small` preset).
ModelConfig bench_shape(const std::string& name) {
  if (name != "llama-134m") return ModelConfig::preset(name);
  auto c = ModelConfig::preset("small");
  c.vocab_size = 32000;
  c.d_model = 768;
  c.n_layers = 12;
  c.n_heads = 12;
  c.n_kv_heads = 12;
  c.d_ff = 2048;
  c.context = 512;
  return c;
}

/// A file-name-safe label of the hardware: the CPU model of /proc/cpuinfo (or "cuda") and the
/// number of threads, e.g. "amd-epyc-7b13-1t".
std::string hardware_label(const torch::Device& device) {
  std::string model = device.is_cuda() ? "cuda" : "cpu";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; !device.is_cuda() && std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 1);
      break;
    }
  }
  std::string label;
  for (char ch : model) {
    if (std::isalnum(static_cast<unsigned char>(ch)))
      label += static_cast<char>(std::tolower(ch));
    else if (!label.empty() && label.back() != '-')
      label += '-';
  }
  while (!label.empty() && label.back() == '-') label.pop_back();
  return label + "-" + std::to_string(torch::get_num_threads()) + "t";
}

std::string today() {
  char buf[16];
  const std::time_t now = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

nlohmann::json stats_json(const Stats& s) { return {{"median", s.median}, {"min", s.min}, {"max", s.max}}; }

std::string fmt(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

std::string megabytes(int64_t bytes) { return bytes < 0 ? "n/a" : fmt("%.0f", double(bytes) / 1e6); }

bool wants(const BenchArgs& a, const std::string& test) {
  return std::find(a.tests.begin(), a.tests.end(), test) != a.tests.end();
}

/// The `memory` rows: read and triad bandwidth on one thread, then on all of torch's threads (the
/// ceiling of a decode step). Run last: their arrays would set the process's peak RSS.
void add_memory_rows(const BenchArgs& a, nlohmann::json& record) {
  for (int threads : {1, torch::get_num_threads()}) {
    const auto bw = measure_bandwidth(threads, int(a.reps));
    record["results"].push_back(
        {{"test", "memory"}, {"threads", threads}, {"read_bytes_per_s", bw.read}, {"triad_bytes_per_s", bw.triad}});
    if (threads == torch::get_num_threads()) record["read_bandwidth"] = bw.read;
    if (torch::get_num_threads() == 1) break;
  }
}

/// Runs the selected measurements of the preset's random model, or of the run --checkpoint names
/// (`config` its config: prefill and decode only, loaded after the runtime's memory is measured);
/// returns the JSON record (rows under "results").
nlohmann::json run_bench(const BenchArgs& a, const torch::Device& device, const ModelConfig& config) {
  const int64_t startup_rss = resident_bytes();  // the runtime alone
  auto train = TrainConfig::preset(a.preset == "1b" ? "1b" : "debug");
  if (device.is_cuda()) torch::manual_seed(a.seed);
  const auto peak_dtype = device.is_cuda() ? torch::kBFloat16 : torch::kFloat;
  const int64_t peak_n = a.peak_size > 0 ? a.peak_size : (device.is_cuda() ? 8192 : 1024);
  const double peak = measure_matmul_peak(device, peak_dtype, peak_n, 3);
  // The private memory of the runtime with BLAS's buffers touched (~2 MB on one thread): the base of
  // what the model and its decoding hold.
  const int64_t startup_anonymous = anonymous_resident_bytes();
  nlohmann::json record = {
      {"tool", "fbt bench"},
      {"preset", a.checkpoint.empty() ? a.preset : "checkpoint"},
      {"device", device.str()},
      {"threads", torch::get_num_threads()},
      {"decode_kernel_threads", decode_kernel_threads()},
      {"reps", a.reps},
      {"hardware", a.hardware.empty() ? hardware_label(device) : a.hardware},
      {"date", today()},
      {"git_sha", git_sha()},
      {"libtorch", torch_version()},
      {"parameters", config.parameter_count()},
      {"startup_rss_bytes", startup_rss},
      {"startup_anonymous_rss_bytes", startup_anonymous},
      {"matmul_peak", {{"flops_per_s", peak}, {"dtype", device.is_cuda() ? "bf16" : "fp32"}, {"n", peak_n}}},
      {"results", nlohmann::json::array()}};
  std::optional<LoadedCheckpoint> checkpoint;
  if (!a.checkpoint.empty()) {
    checkpoint = load_checkpoint(a.checkpoint, "cpu");
    record["checkpoint"] = checkpoint->model_file;
    if (checkpoint->info.quantized) {  // the run's block formats, by the parameters each holds
      nlohmann::json blocks = nlohmann::json::object();
      for (const auto& g : checkpoint->info.quantized->groups)
        blocks[g.format] = blocks.value(g.format, int64_t(0)) + int64_t(g.parts.size());
      record["weight_blocks"] = blocks;
    }
  }
  // Each row as soon as it is measured, on stderr: a run stopped by a time limit (the GPU check's
  // steps) still shows what it measured and where it was.
  auto add_row = [&record](nlohmann::json row) {
    std::cerr << "bench: " << row.dump() << std::endl;
    record["results"].push_back(std::move(row));
  };
  auto fresh_model = [&] {
    torch::manual_seed(a.seed);
    FBT model(config);
    model->to(device);
    return model;
  };
  if (wants(a, "train")) {
    const int64_t seq = a.train_seq > 0 ? a.train_seq : config.context;
    double base_seconds = 0;
    for (int64_t k : a.passes) {
      auto model = fresh_model();
      const auto r = bench_train_step(model, train, a.train_batch, seq, k, a.warmup, a.reps, a.seed);
      const double flops = training_flops_per_token(config, seq, k) * double(a.train_batch * seq);
      if (k == 1) base_seconds = r.seconds.median;
      nlohmann::json row = {{"test", "train"},
                            {"passes", k},
                            {"batch", a.train_batch},
                            {"seq", seq},
                            {"tokens_per_s", stats_json(r.tokens_per_s)},
                            {"seconds", stats_json(r.seconds)},
                            {"model_flops", flops},
                            {"mfu", flops / r.seconds.median / peak},
                            {"peak_memory_bytes", r.peak_memory_bytes}};
      if (base_seconds > 0) row["step_vs_k_times_k1"] = r.seconds.median / (double(k) * base_seconds);
      add_row(row);
    }
  }
  if (!wants(a, "prefill") && !wants(a, "decode")) {
    if (wants(a, "memory")) add_memory_rows(a, record);
    return record;
  }
  auto model = checkpoint ? checkpoint->model : fresh_model();
  if (a.dtype == "bf16") model->to(torch::kBFloat16);
  if (device.is_cpu() && !checkpoint) move_to_huge_pages(model->parameters());  // where load_model puts a checkpoint's
  record["inference_dtype"] = a.dtype;
  const bool cpu_decoder = a.decoder == "cpu" || (a.decoder == "auto" && CpuDecoder::supports(model));
  if (a.decoder == "cpu" && !CpuDecoder::supports(model))
    throw Error("--decoder cpu: the model is not an fp32 model of the paper's block on the CPU (use --device cpu)");
  if (a.decoder == "graph" && !device.is_cuda()) throw Error("--decoder graph: CUDA graphs need --device cuda");
  const auto decoder = a.decoder == "graph" ? BenchDecoder::Graph
                       : cpu_decoder        ? BenchDecoder::Cpu
                                            : BenchDecoder::Generic;
  record["decoder"] = a.decoder == "graph" ? "graph" : cpu_decoder ? "cpu" : "generic";
  CpuDecoderOptions cpu_options;
  cpu_options.weights = parse_decode_weights(checkpoint ? run_weights(*checkpoint, a.weights) : a.weights, "--weights");
  if (checkpoint) cpu_options.prequantized = checkpoint->info.quantized;
  cpu_options.activations = a.activations == "fp32" ? Q8Activations::Fp32 : Q8Activations::Int8;
  if (cpu_options.weights != DecodeWeights::Fp32 && !cpu_decoder)
    throw Error(
        "--weights " + a.weights +
        ": only the dedicated CPU decode step (--decoder auto or cpu, fp32 model on the CPU) has quantised weights");
  record["weights"] = checkpoint ? run_weights(*checkpoint, a.weights) : a.weights;
  if (cpu_options.weights != DecodeWeights::Fp32) record["activations"] = a.activations;
  int64_t model_bytes = 0;  // every parameter (the norms and the embedding too), and a quantised run's blocks
  for (const auto& p : model->parameters()) model_bytes += p.numel() * int64_t(p.element_size());
  if (cpu_options.prequantized)
    for (const auto& g : cpu_options.prequantized->groups) model_bytes += g.bytes();
  for (int64_t batch : a.batch_sizes) {
    for (int64_t context : a.contexts) {
      if (wants(a, "prefill")) {
        // The prefill fbt generate runs, gone before decode.
        const auto prefill_backend =
            cpu_decoder ? cpu_backend(std::make_shared<CpuDecoder>(model, cpu_options)) : torch_backend(model);
        for (const Decoding& decoding : {Decoding{}, Decoding::fused(1)}) {
          const auto r = bench_prefill(model, decoding, batch, context, a.warmup, a.reps, a.seed, *prefill_backend);
          add_row({{"test", "prefill"},
                   {"mode", decoding.label()},
                   {"batch", batch},
                   {"decoder", cpu_decoder ? "cpu" : "generic"},
                   {"context", context},
                   {"tokens_per_s", stats_json(r.tokens_per_s)},
                   {"seconds", stats_json(r.seconds)},
                   {"peak_memory_bytes", r.peak_memory_bytes}});
        }
      }
      if (wants(a, "decode")) {
        const auto r =
            bench_decode_modes(model, decoder, batch, context, a.new_tokens, a.warmup, a.reps, a.seed, cpu_options);
        for (const auto& [mode, m] :
             {std::pair{DecodeMode::Standard, &r.standard}, std::pair{DecodeMode::Soft, &r.soft}}) {
          nlohmann::json row = {{"test", "decode"},
                                {"mode", enum_to_string(mode)},
                                {"batch", batch},
                                {"context", context},
                                {"new_tokens", a.new_tokens},
                                {"tokens_per_s", stats_json(m->tokens_per_s)},
                                {"seconds", stats_json(m->seconds)},
                                {"peak_memory_bytes", m->peak_memory_bytes},
                                {"anonymous_rss_bytes", m->anonymous_bytes},
                                {"model_bytes", model_bytes},
                                {"kv_cache_bytes", r.kv_cache_bytes}};
          if (mode == DecodeMode::Soft) row["overhead_vs_standard"] = stats_json(r.soft_overhead);
          const int64_t bytes = mode == DecodeMode::Soft ? r.soft_weight_bytes : r.standard_weight_bytes;
          if (bytes > 0) {  // every step reads all matrix weights once (soft: the fusion's too)
            row["weight_bytes_per_step"] = bytes;
            row["weight_bytes_per_s"] = double(bytes) * double(a.new_tokens) / m->seconds.median;
          }
          add_row(row);
        }
      }
    }
  }
  if (wants(a, "memory")) add_memory_rows(a, record);
  return record;
}

std::string markdown(const nlohmann::json& r) {
  std::ostringstream o;
  const double peak = r["matmul_peak"]["flops_per_s"].get<double>();
  o << "# fbt bench: " << r["preset"].get<std::string>() << " (" << r["parameters"].get<int64_t>() << " parameters) on "
    << r["hardware"].get<std::string>() << ", " << r["date"].get<std::string>() << "\n\n"
    << "git " << r["git_sha"].get<std::string>() << ", libtorch " << r["libtorch"].get<std::string>() << ", device "
    << r["device"].get<std::string>() << ", " << r["threads"].get<int64_t>() << " threads (decode kernels on "
    << r["decode_kernel_threads"].get<int64_t>() << "), " << r["reps"].get<int64_t>()
    << " timed repetitions (median [min, max]). Measured matmul peak: " << fmt("%.1f", peak / 1e9) << " GFLOP/s ("
    << r["matmul_peak"]["dtype"].get<std::string>() << ", n = " << r["matmul_peak"]["n"].get<int64_t>() << ").\n";
  auto tps = [](const nlohmann::json& row) {
    const auto& t = row["tokens_per_s"];
    return fmt("%.0f", t["median"].get<double>()) + " [" + fmt("%.0f", t["min"].get<double>()) + ", " +
           fmt("%.0f", t["max"].get<double>()) + "]";
  };
  auto percent_range = [](const nlohmann::json& st) {  // "+1.2% [-0.5, +3.0]"
    return fmt("%+.1f%%", 100 * st["median"].get<double>()) + " [" + fmt("%+.1f", 100 * st["min"].get<double>()) +
           ", " + fmt("%+.1f", 100 * st["max"].get<double>()) + "]";
  };
  auto section = [&](const std::string& test, const std::string& title, const std::string& header) {
    bool any = false;
    for (const auto& row : r["results"]) {
      if (row["test"] != test) continue;
      if (!any) o << "\n## " << title << "\n\n" << header;
      any = true;
      if (test == "memory") {
        o << "| " << row["threads"] << " | " << fmt("%.1f", row["read_bytes_per_s"].get<double>() / 1e9) << " | "
          << fmt("%.1f", row["triad_bytes_per_s"].get<double>() / 1e9) << " |\n";
        continue;
      }
      const std::string mem = megabytes(row["peak_memory_bytes"].get<int64_t>());
      if (test == "train") {
        o << "| " << row["passes"] << " | " << row["batch"] << "×" << row["seq"] << " | " << tps(row) << " | "
          << fmt("%.1f", 1e3 * row["seconds"]["median"].get<double>()) << " | "
          << fmt("%.1f%%", 100 * row["mfu"].get<double>()) << " | "
          << fmt("%.3f", row["step_vs_k_times_k1"].get<double>()) << " | " << mem << " |\n";
      } else if (test == "prefill") {
        o << "| " << row["mode"].get<std::string>() << " | " << row.value("decoder", std::string("generic")) << " | "
          << row["batch"] << " | " << row["context"] << " | " << tps(row) << " | " << mem << " |\n";
      } else {
        const double ms = 1e3 * row["seconds"]["median"].get<double>() / row["new_tokens"].get<double>();
        std::string gbs = "n/a";
        if (row.contains("weight_bytes_per_s")) {
          const double rate = row["weight_bytes_per_s"].get<double>();
          gbs = fmt("%.1f", rate / 1e9);
          if (r.contains("read_bandwidth")) gbs += fmt(" (%.0f%%)", 100 * rate / r["read_bandwidth"].get<double>());
        }
        std::string beyond = "n/a";  // the data decoding holds beyond the runtime's, against the model and its KV cache
        const int64_t held = row.value("anonymous_rss_bytes", int64_t(-1)),
                      startup = r.value("startup_anonymous_rss_bytes", int64_t(-1));
        if (row.contains("model_bytes") && held > 0 && startup > 0)
          beyond = fmt("%.2f", double(held - startup) /
                                   double(row["model_bytes"].get<int64_t>() + row["kv_cache_bytes"].get<int64_t>()));
        o << "| " << row["mode"].get<std::string>() << " | " << row["batch"] << " | " << row["context"] << " | "
          << tps(row) << " | " << fmt("%.3f", ms) << " | " << gbs << " | "
          << (row.contains("overhead_vs_standard") ? percent_range(row["overhead_vs_standard"]) : "") << " | " << mem
          << " | " << beyond << " |\n";
      }
    }
  };
  section("memory", "Memory bandwidth (STREAM-like: read = sum of an array, triad a = b + s·c; 256 MiB arrays)",
          "| threads | read GB/s | triad GB/s |\n|---|---|---|\n");
  section("train", "Training step (forward K passes + backward + NorMuon/Adam step)",
          "| K | batch×seq | tokens/s | step ms | MFU | step / (K · step K=1) | peak MB "
          "|\n|---|---|---|---|---|---|---|\n");
  section("prefill", "Prefill (decoder cpu: CpuDecoder::prefill, as fbt generate runs it; generic: libtorch)",
          "| mode | decoder | batch | context | tokens/s | peak MB |\n|---|---|---|---|---|---|\n");
  section(
      "decode",
      "Decode (greedy, after a plain prefill of `context` tokens; " +
          (r.contains("decoder") ? r["decoder"].get<std::string>() : std::string("no")) + " decoder, " +
          (r.contains("weights") ? r["weights"].get<std::string>() : std::string("fp32")) + " weights" +
          (r.contains("weight_blocks") ? " (the run's blocks, parameters per format: " + r["weight_blocks"].dump() + ")"
                                       : std::string()) +
          (r.contains("activations") ? ", " + r["activations"].get<std::string>() + " activations" : "") + ")",
      "| mode | batch | context | tokens/s | ms/step | weights GB/s (of read bandwidth) | overhead vs standard | "
      "peak MB |"
      " (anonymous RSS − the runtime's) / (model + KV) |\n|---|---|---|---|---|---|---|---|---|\n");
  o << "\nMFU = model FLOPs (6·N per token per pass + 12·L·D·T attention, PaLM App. B; N = matmul weights,"
       " fusion included in passes ≥ 2) / step time / measured matmul peak. Weights GB/s: the matrix weights a"
       " decode step reads (all of them, once per step; KV cache and norms not counted) / median step time,"
       " and its share of the all-thread read bandwidth when `memory` ran. Decode overhead: soft / standard"
       " step seconds − 1, the median over a repetition's step pairs (the modes alternate step by step,"
       " each on its own KV cache), median [min, max] over repetitions. Peak MB: "
    << (r["device"].get<std::string>().rfind("cuda", 0) == 0
            ? "CUDA allocator peak."
            : "process peak RSS (weights and libraries included); start-up: the RSS before any tensor (the runtime, " +
                  megabytes(r.value("startup_rss_bytes", int64_t(-1))) +
                  " MB). Anonymous RSS: the process's private memory (heap: tensors, caches, scratch; not the"
                  " libraries' code pages) at the end of the untimed decode run, less its value after start-up"
                  " and the matmul-peak measurement (" +
                  megabytes(r.value("startup_anonymous_rss_bytes", int64_t(-1))) +
                  " MB: the runtime and the buffers BLAS keeps once used, which the CPU decoder uses only for prefill "
                  "on AVX2-only CPUs); model: every parameter's bytes; KV: keys and values for context + new tokens.")
    << "\n";
  return o.str();
}

/// The shapes of every selected measurement against the model context, before any is run (the
/// library checks them again, but only when it reaches them, minutes later).
void check_shapes(const BenchArgs& a, const ModelConfig& config) {
  const int64_t context = config.context;
  if (wants(a, "train") && a.train_seq > context)
    throw Error("--train-seq " + std::to_string(a.train_seq) + " exceeds the model context " + std::to_string(context));
  for (int64_t c : a.contexts) {
    if (wants(a, "prefill") && c > context)
      throw Error("--contexts " + std::to_string(c) + " exceeds the model context " + std::to_string(context));
    if (wants(a, "decode") && c + a.new_tokens > context)
      throw Error("--contexts " + std::to_string(c) + " + --new-tokens " + std::to_string(a.new_tokens) +
                  " exceeds the model context " + std::to_string(context));
  }
}

/// `stem` if neither stem.md nor stem.json exists, else the first of stem_2, stem_3, ... for which
/// neither does: a second run on the same day keeps the first one's files.
std::string unused_stem(const std::string& stem) {
  auto taken = [](const std::string& s) {
    return std::filesystem::exists(s + ".md") || std::filesystem::exists(s + ".json");
  };
  if (!taken(stem)) return stem;
  for (int n = 2;; ++n)
    if (!taken(stem + "_" + std::to_string(n))) return stem + "_" + std::to_string(n);
}

void run(const BenchArgs& a) {
  if (a.format != "md" && a.format != "json") throw Error("--format: expected md or json, got '" + a.format + "'");
  for (const auto& t : a.tests)
    if (t != "train" && t != "prefill" && t != "decode" && t != "memory")
      throw Error("--tests: unknown test '" + t + "' (expected train, prefill, decode, memory)");
  auto config = bench_shape(a.preset);
  if (!a.checkpoint.empty()) {
    if (wants(a, "train")) throw Error("--tests train: a --checkpoint is benchmarked for prefill and decode only");
    if (a.device != "cpu") throw Error("--checkpoint: benchmarks the CPU decode step (give --device cpu)");
    config = read_checkpoint_info(resolve_checkpoint(a.checkpoint)).config;  // the metadata: no weights yet
  }
  check_shapes(a, config);
  check_output_file("--out", a.out);
  check_output_dir("--results-dir", a.results_dir);
  const torch::Device device = parse_device(a.device);
  const auto record = run_bench(a, device, config);
  const std::string text = a.format == "json" ? record.dump(2) + "\n" : markdown(record);
  std::cout << text;
  if (!a.out.empty()) write_file_atomic(a.out, text);
  if (!a.results_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.results_dir, ec);
    if (ec) throw Error("--results-dir " + a.results_dir + ": cannot create the directory (" + ec.message() + ")");
    const std::string path = unused_stem(a.results_dir + "/" + record["preset"].get<std::string>() + "_" +
                                         record["hardware"].get<std::string>() + "_" +
                                         record["date"].get<std::string>() + (a.decoder == "graph" ? "_graph" : ""));
    write_file_atomic(path + ".md", markdown(record));
    write_file_atomic(path + ".json", record.dump(2) + "\n");
    std::cerr << "wrote " << path << ".md and .json\n";
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd =
      app.add_subcommand("bench", "Training / prefill / decode throughput, MFU and peak memory of a model shape");
  cmd->add_option("--preset", a->preset, "Model shape: debug, small, 1b, or llama-134m (D768 L12 V32000)")
      ->check(CLI::IsMember({"debug", "small", "1b", "llama-134m"}))
      ->capture_default_str();
  cmd->add_option("--tests", a->tests, "Any of train, prefill, decode, memory (read and triad bandwidth)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--checkpoint", a->checkpoint,
                  "A run (fp32, or quantised by fbt quantize, e.g. a GGUF file's blocks) to benchmark instead of "
                  "--preset's random model: prefill and decode on the CPU (--device cpu)");
  cmd->add_option("--device", a->device, "cpu, cuda or auto (CUDA when available)")->capture_default_str();
  add_threads_option(cmd);
  cmd->add_option("--reps", a->reps, "Timed repetitions per measurement")
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--warmup", a->warmup, "Untimed repetitions before them")
      ->capture_default_str()
      ->check(integer_range(0));
  cmd->add_option("--passes", a->passes, "K of the training steps")
      ->delimiter(',')
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--train-batch", a->train_batch, "Sequences per training step")
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--train-seq", a->train_seq, "Tokens per training sequence (0: the model context)")
      ->capture_default_str()
      ->check(integer_range(0));
  cmd->add_option("--batch-sizes", a->batch_sizes, "Prefill/decode batch sizes")
      ->delimiter(',')
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--contexts", a->contexts, "Prompt lengths for prefill and before decoding")
      ->delimiter(',')
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--decoder", a->decoder,
                  "Decode step: auto (the dedicated CPU step for fp32 CPU models, as fbt generate), cpu, generic, "
                  "or graph (the generic step captured once into a CUDA graph and replayed; CUDA only)")
      ->check(CLI::IsMember({"auto", "cpu", "generic", "graph"}))
      ->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "Weights of the prefill/decode tests: fp32 or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--weights", a->weights,
                  "Weights of the CPU decode step: fp32, int8 (Q8_0 blocks) or int4 (Q4_0 blocks, the head Q8_0), "
                  "quantised at load")
      ->check(CLI::IsMember({"fp32", "int8", "int4"}))
      ->capture_default_str();
  cmd->add_option("--activations", a->activations,
                  "Inputs of the int8/int4 products: int8 (quantised per block) or fp32")
      ->check(CLI::IsMember({"int8", "fp32"}))
      ->capture_default_str();
  cmd->add_option("--new-tokens", a->new_tokens, "Decode steps timed per repetition")
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--peak-size", a->peak_size, "n of the n×n matmul measuring the peak (0: 1024 CPU, 8192 CUDA)")
      ->check(integer_range(0, 32768));
  cmd->add_option("--seed", a->seed, "Seed of weights and tokens")->capture_default_str()->check(seed_value());
  cmd->add_option("--format", a->format, "md or json on stdout")->capture_default_str();
  cmd->add_option("--out", a->out, "Also write the stdout text to this file");
  cmd->add_option(
      "--results-dir", a->results_dir,
      "Also write DIR/<preset>_<hardware>_<date>[_graph].{md,json}, adding _2, _3, ... if a run of the same day "
      "already wrote those (the repository keeps them in bench/results)");
  cmd->add_option(
         "--hardware", a->hardware,
         "Hardware label of the record and file names (default: the CPU model and threads, or cuda-<threads>t)")
      ->check([](const std::string& s) {
        const bool ok = !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
          return std::isalnum(c) || c == '-' || c == '.';
        }) && s.find("..") == std::string::npos;
        return ok ? std::string() : "expected letters, digits, '-' and '.' (it becomes part of a file name)";
      });
  cmd->callback([a] { run(*a); });
}

}  // namespace fbt::cli
