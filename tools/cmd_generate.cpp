// `fbt generate`: streams sampled text from a checkpoint in the Standard, Soft or Fused(k) mode.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "cli_common.h"
#include "commands.h"
#include "fbt/infer/generate.h"
#include "fbt/util/error.h"
#include "fbt/util/huge_pages.h"
#include "text_stream.h"

namespace fbt::cli {
namespace {

struct GenerateArgs {
  std::string checkpoint, prompt, prompt_file, mode = "standard", device = "auto", dtype = "fp32", weights = "fp32";
  int64_t fused_passes = 1, max_new_tokens = 200;
  SamplingOptions sampling{/*temperature=*/0.8};
  bool all_modes = false, ignore_eos = false;
};

std::string read_prompt(const GenerateArgs& a) {
  if (a.prompt_file.empty()) return a.prompt;
  std::ifstream in(a.prompt_file, std::ios::binary);
  if (!in) throw Error("--prompt-file: cannot read '" + a.prompt_file + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Generates once with `decoding`, streaming text to stdout and one timing line to stderr.
void generate_streaming(FBT& model, const Tokenizer& tokenizer, const std::vector<int64_t>& prompt,
                        const Decoding& decoding, const GenerateArgs& a,
                        const std::shared_ptr<DecodeBackend>& backend) {
  GenerationOptions o;
  o.backend = backend;
  o.decoding = decoding;
  o.max_new_tokens = a.max_new_tokens;
  o.sampling = a.sampling;
  o.eos_id = tokenizer.eos_id();
  o.ignore_eos = a.ignore_eos;
  o.pad_id = tokenizer.pad_id();
  TextStream stream(tokenizer, std::cout);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  std::optional<Clock::time_point> first;  // when the first token arrived (after the prefill)
  o.on_token = [&](int64_t, int64_t token) {
    if (!first) first = Clock::now();
    stream.push(token);
  };
  const int64_t n = static_cast<int64_t>(generate(model, {prompt}, o)[0].size());
  stream.finish();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double first_ms = first ? std::chrono::duration<double, std::milli>(*first - start).count() : 0.0;
  char line[256];
  std::snprintf(line, sizeof line,
                "[%s] %lld tokens in %.3f s: %.1f tokens/s (prompt %lld tokens, first token after %.1f ms)\n",
                decoding.label().c_str(), static_cast<long long>(n), seconds, seconds > 0 ? n / seconds : 0.0,
                static_cast<long long>(prompt.size()), first_ms);
  std::cerr << line << std::flush;
}

void run_generate(const GenerateArgs& a) {
  const auto decoding =
      Decoding::make(enum_from_string<DecodeMode>(a.mode, "--mode"), a.fused_passes, "--fused-passes");
  Decoding::fused(a.fused_passes, "--fused-passes");  // checked whatever --mode (--all-modes uses it)
  if (a.max_new_tokens < 1) throw Error("--max-new-tokens must be >= 1 (got " + std::to_string(a.max_new_tokens) + ")");
  a.sampling.validate();  // before any work, even if nothing would be sampled
  const std::string text = read_prompt(a);
  if (text.empty()) throw Error("the prompt is empty");

  auto checkpoint = load_checkpoint(a.checkpoint, a.device);
  if (a.dtype == "bf16") {
    require_fp32_weights(checkpoint, "--dtype bf16");
    checkpoint.model->to(torch::kBFloat16);                        // weights, KV cache and states in bf16
    if (checkpoint.model->parameters().front().device().is_cpu())  // back on huge pages, as load_model's
      move_to_huge_pages(checkpoint.model->parameters());
  }
  const auto backend = decode_backend_for(checkpoint, a.weights, /*sole_user=*/true);
  const auto tokenizer = load_run_tokenizer(checkpoint);
  // The prompt starts as a document does: after EOS for fbt's tokenizers (training streams are
  // documents each followed by EOS), with the BOS or nothing for imported ones (document_prefix).
  std::vector<int64_t> prompt = tokenizer->document_prefix();
  for (int64_t id : tokenizer->encode(text)) prompt.push_back(id);
  const int64_t context = checkpoint.model->config().context;
  if (static_cast<int64_t>(prompt.size()) >= context)
    throw Error("the prompt is " + std::to_string(prompt.size()) +
                " tokens (with the document start) but the model context is " + std::to_string(context) +
                " tokens; at most " + std::to_string(context - 1) + " leave room to generate");
  const int64_t room = context - static_cast<int64_t>(prompt.size());
  if (a.max_new_tokens > room)  // generate() stops at the context: say so rather than stop short silently
    std::cerr << "note: --max-new-tokens " << a.max_new_tokens << " is capped at " << room << " by the model context ("
              << context << " tokens, " << prompt.size() << " of them the prompt)\n";

  if (!a.all_modes) {
    generate_streaming(checkpoint.model, *tokenizer, prompt, decoding, a, backend);
    return;
  }
  for (DecodeMode m : {DecodeMode::Standard, DecodeMode::Soft, DecodeMode::Fused}) {
    const auto d = Decoding::make(m, a.fused_passes);
    std::cout << "=== " << d.label() << " ===\n" << std::flush;
    generate_streaming(checkpoint.model, *tokenizer, prompt, d, a, backend);
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Stream a continuation of a prompt (the prompt is preceded by EOS, a document start)");
  cmd->add_option("--checkpoint", a->checkpoint, "Model file, step directory or run directory")->required();
  auto* prompt = cmd->add_option("--prompt", a->prompt, "Prompt text");
  auto* prompt_file = cmd->add_option("--prompt-file", a->prompt_file, "File holding the prompt text");
  prompt->excludes(prompt_file);
  auto* mode =
      cmd->add_option("--mode", a->mode, "Decoding mode: standard, soft or fused (SPEC §7)")->capture_default_str();
  cmd->add_option("--fused-passes", a->fused_passes, "k of fused(k): extra fused passes over the prompt")
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--max-new-tokens", a->max_new_tokens, "Tokens to generate at most (also capped by the context)")
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--temperature", a->sampling.temperature, "0 = greedy")
      ->capture_default_str()
      ->check(temperature_value());
  cmd->add_option("--top-k", a->sampling.top_k, "Keep the k most likely tokens (0 or -1 = all, as serve's top_k)")
      ->capture_default_str()
      ->check(integer_range(kMinTopK));
  cmd->add_option("--top-p", a->sampling.top_p, "Nucleus mass to keep (1 = all)")
      ->capture_default_str()
      ->check(number_range(0, 1, /*lo_open=*/true));
  cmd->add_option("--seed", a->sampling.seed, "Sampling seed")->capture_default_str()->check(seed_value());
  cmd->add_option("--device", a->device, "cpu, cuda or auto (CUDA when available)")->capture_default_str();
  add_threads_option(cmd);
  add_weights_option(cmd, a->weights);
  cmd->add_option("--dtype", a->dtype,
                  "Weights and KV cache: fp32, or bf16 (half the memory traffic; generic decode step)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_flag("--all-modes", a->all_modes, "Run standard, soft and fused(k) in turn with the same seed")
      ->excludes(mode);
  cmd->add_flag("--ignore-eos", a->ignore_eos,
                "Never sample end-of-text: exactly --max-new-tokens tokens (up to the context), as llama.cpp's");
  cmd->callback([a, prompt, prompt_file] {
    if (prompt->count() + prompt_file->count() == 0) throw Error("give --prompt TEXT or --prompt-file FILE");
    run_generate(*a);
  });
}

}  // namespace fbt::cli
