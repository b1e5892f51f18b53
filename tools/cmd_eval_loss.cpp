// `fbt eval-loss`: validation loss after 0..K fused prefill passes (and sequentially) as a table.
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "fbt/data/sft_data.h"
#include "fbt/data/shards.h"
#include "fbt/eval/loss.h"
#include "fbt/io/run_dir.h"
#include "fbt/util/atomic_file.h"
#include "fbt/util/error.h"

namespace fbt::cli {
namespace {

struct EvalLossArgs {
  std::string checkpoint, data, split = "val", json, device = "auto", decode_weights;
  LossEvalOptions options;
  bool contraction = false, verify = false, sequential = false;
  int64_t max_passes = 30;
};

/// A conversation dataset (sft_data.h): the SFT loss, nats per assistant token, of each conversation
/// cut to `window` tokens, after 0..K fused passes.
void run_conversation_loss(const EvalLossArgs& a, LoadedCheckpoint& checkpoint, const Tokenizer& tokenizer,
                           int64_t window) {
  if (a.contraction || a.sequential || !a.decode_weights.empty())
    throw Error("--contraction, --sequential and --decode-weights score token windows; " + a.data +
                " is a conversation dataset");
  const auto nats = evaluate_conversation_loss(checkpoint.model, SftData::open(a.data, a.split), a.options.batch,
                                               window, tokenizer.pad_id(), a.options.passes, a.options.max_tokens);
  std::cout << "checkpoint " << checkpoint.model_file << " (step " << checkpoint.info.step << "), conversations of "
            << a.data << " (" << a.split << "), cut to " << window << " tokens; nats per assistant token\n"
            << "| mode | nats/token |\n|---|---|\n";
  nlohmann::json rows = nlohmann::json::array();
  for (size_t p = 0; p < nats.size(); ++p) {
    char line[96];
    std::snprintf(line, sizeof line, "| passes=%zu | %.4f |\n", p, nats[p]);
    std::cout << line;
    rows.push_back({{"name", "passes=" + std::to_string(p)}, {"nats_per_token", nats[p]}});
  }
  if (!a.json.empty())
    write_file_atomic(a.json, nlohmann::json{{"checkpoint", checkpoint.model_file},
                                             {"step", checkpoint.info.step},
                                             {"data", a.data},
                                             {"split", a.split},
                                             {"context", window},
                                             {"max_tokens", a.options.max_tokens},
                                             {"conversations", true},
                                             {"results", rows}}
                                      .dump(2) +
                                  "\n");
}

void run_eval_loss(const EvalLossArgs& a) {
  check_output_file("--json", a.json);
  auto checkpoint = load_checkpoint(a.checkpoint, a.device);
  require_fp32_weights(checkpoint, "fbt eval-loss");
  const auto tokenizer = Tokenizer::load(a.data);
  check_tokenizer_matches(tokenizer->meta(), a.data, checkpoint);
  const TokenShard shard = open_split(a.data, a.split, a.verify);
  const int64_t window = a.options.context > 0 ? a.options.context : checkpoint.model->config().context;
  if (is_conversation_dataset(read_dataset_meta(a.data)))
    return run_conversation_loss(a, checkpoint, *tokenizer, window);

  LossEvalOptions options = a.options;
  if (a.sequential) options.rows.push_back(sequential_row(checkpoint.model));
  if (!a.decode_weights.empty()) {
    if (!CpuDecoder::supports(checkpoint.model))
      throw Error(
          "--decode-weights: the CPU decode step needs an fp32 model on the CPU (--device cpu) without "
          "attention biases or scaled RoPE");
    for (auto& row :
         decode_rows(checkpoint.model,
                     std::make_shared<CpuDecoder>(
                         checkpoint.model,
                         CpuDecoderOptions{false, parse_decode_weights(a.decode_weights, "--decode-weights")})))
      options.rows.push_back(std::move(row));
  }
  const auto results = evaluate_loss(checkpoint.model, shard, *tokenizer, options);
  std::cout << "checkpoint " << checkpoint.model_file << " (step " << checkpoint.info.step << "), data " << shard.path()
            << ", windows of " << window << " tokens"
            << (a.decode_weights.empty() ? "" : ", rows 'decode ...' on " + a.decode_weights + " weights") << "\n"
            << "| mode | nats/token | bits/byte | tokens |\n|---|---|---|---|\n";
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : results) {
    char line[160];
    std::snprintf(line, sizeof line, "| %s | %.4f | %.4f | %lld |\n", r.name.c_str(), r.nats_per_token, r.bits_per_byte,
                  static_cast<long long>(r.tokens));
    std::cout << line;
    rows.push_back({{"name", r.name},
                    {"nats_per_token", r.nats_per_token},
                    {"bits_per_byte", r.bits_per_byte},
                    {"tokens", r.tokens}});
  }
  nlohmann::json curve_rows = nlohmann::json::array();
  if (a.contraction) {
    std::cout << "\ncontraction: k fused passes, loss and mean relative change of the feedback state\n"
              << "| passes | nats/token | bits/byte | rel. change |\n|---|---|---|---|\n";
    for (const auto& p : contraction_curve(checkpoint.model, shard, *tokenizer, a.max_passes, a.options)) {
      char line[160];
      std::snprintf(line, sizeof line, "| %lld | %.4f | %.4f | %.3e |\n", static_cast<long long>(p.passes),
                    p.nats_per_token, p.bits_per_byte, p.relative_change);
      std::cout << line;
      curve_rows.push_back({{"passes", p.passes},
                            {"nats_per_token", p.nats_per_token},
                            {"bits_per_byte", p.bits_per_byte},
                            {"relative_change", p.passes == 0 ? nlohmann::json() : nlohmann::json(p.relative_change)}});
    }
  }
  if (!a.json.empty()) {
    nlohmann::json out{{"checkpoint", checkpoint.model_file},
                       {"step", checkpoint.info.step},
                       {"data", a.data},
                       {"split", a.split},
                       {"context", window},
                       {"max_tokens", a.options.max_tokens},
                       {"results", rows}};
    if (a.contraction) out["contraction"] = curve_rows;
    if (!a.decode_weights.empty()) out["decode_weights"] = a.decode_weights;
    write_file_atomic(a.json, out.dump(2) + "\n");
  }
}

}  // namespace

void add_eval_loss_command(CLI::App& app) {
  auto a = std::make_shared<EvalLossArgs>();
  CLI::App* cmd =
      app.add_subcommand("eval-loss", "Loss (nats/token, bits/byte) after 0..K fused prefill passes on a data split");
  cmd->add_option("--checkpoint", a->checkpoint, "Model file, step directory or run directory")->required();
  cmd->add_option("--data", a->data, "Prepared data directory (fbt prepare)")->required();
  cmd->add_option("--split", a->split, "Split to score")->check(CLI::IsMember({"val", "train"}))->capture_default_str();
  cmd->add_option("--max-tokens", a->options.max_tokens,
                  "Target tokens to score at most, in windows spread evenly over the split (-1: all)")
      ->capture_default_str()
      ->check(count_or_all());
  cmd->add_option("--passes", a->options.passes, "Report 0..K fused prefill passes")
      ->capture_default_str()
      ->check(integer_range(0));
  cmd->add_flag("--sequential", a->sequential, "Also score the exact sequential soft recurrence (slow)");
  cmd->add_option(
         "--decode-weights", a->decode_weights,
         "Also score teacher-forced decoding through the CPU decode step with fp32, int8 (Q8_0) or int4 "
         "(Q4_0) weights, standard and soft (rows 'decode standard', 'decode soft'; slow): quantisation's cost in loss")
      ->check(CLI::IsMember({"fp32", "int8", "int4"}));
  cmd->add_flag("--verify", a->verify,
                "Check the shard's full sha256 against meta.json (always: token count and a sampled hash)");
  cmd->add_flag("--contraction", a->contraction,
                "Also iterate the fused-pass map: loss and relative state change for k = 0..--max-passes");
  cmd->add_option("--max-passes", a->max_passes, "Passes of the contraction diagnostic (1000 is fine: O(1) memory)")
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--batch", a->options.batch, "Windows per forward")->capture_default_str()->check(integer_range(1));
  cmd->add_option("--context", a->options.context,
                  "Window length in tokens (at most the model context; 0: the model context), e.g. a context-extended "
                  "model scored at its old length")
      ->capture_default_str()
      ->check(integer_range(0));
  cmd->add_option("--device", a->device, "cpu, cuda or auto (CUDA when available)")->capture_default_str();
  add_threads_option(cmd);
  cmd->add_option("--out,--json", a->json, "Also write the results to this JSON file");
  cmd->callback([a] { run_eval_loss(*a); });
}

}  // namespace fbt::cli
