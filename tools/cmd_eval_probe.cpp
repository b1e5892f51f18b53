// `fbt eval-probe FILE...`: per-layer probe accuracy on `fbt synth` tasks, standard vs one-step
// recurrent prefill.
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "fbt/eval/probe.h"
#include "fbt/io/run_dir.h"
#include "fbt/util/atomic_file.h"

namespace fbt::cli {
namespace {

struct ProbeArgs {
  std::vector<std::string> files;
  std::string checkpoint, out, device = "auto";
  ProbeOptions options;
};

void run_eval_probe(const ProbeArgs& a) {
  a.options.validate();  // before loading anything
  check_output_file("--out", a.out);
  auto checkpoint = load_checkpoint(a.checkpoint, a.device);
  require_fp32_weights(checkpoint, "fbt eval-probe");
  const auto tokenizer = load_run_tokenizer(checkpoint);
  std::vector<std::vector<SynthExample>> examples;  // per file; all read before any forward
  for (const auto& f : a.files) examples.push_back(read_synth_jsonl(f));
  std::cout << "checkpoint " << checkpoint.model_file << " (step " << checkpoint.info.step << "), " << a.options.folds
            << "-fold grouped CV, l2 " << a.options.l2 << ", seed " << a.options.seed << "\n"
            << "| task | layer | standard acc | recurrent acc | majority | n |\n|---|---|---|---|---|---|\n"
            << std::flush;
  nlohmann::json rows = nlohmann::json::array();
  for (size_t f = 0; f < a.files.size(); ++f) {
    const std::string task = examples[f][0].task;
    const int64_t n = examples[f].size();
    const auto results = evaluate_probe(checkpoint.model, *tokenizer, examples[f], a.files[f], a.options,
                                        cli::progress_printer(task, "examples"));
    const size_t layers = results.size() / 2;  // standard 0..L, then recurrent 0..L
    for (size_t l = 0; l < layers; ++l) {
      const auto &s = results[l].score, &r = results[layers + l].score;
      char line[256];
      std::snprintf(line, sizeof line, "| %s | %zu | %.3f ± %.3f | %.3f ± %.3f | %.3f | %lld |\n", task.c_str(), l,
                    s.accuracy, s.stderr_, r.accuracy, r.stderr_, s.majority, static_cast<long long>(n));
      std::cout << line << std::flush;
    }
    for (const auto& r : results)
      rows.push_back({{"task", task},
                      {"mode", r.mode},
                      {"metric", "acc"},
                      {"layer", r.layer},
                      {"value", r.score.accuracy},
                      {"stderr", r.score.stderr_},
                      {"n", n},
                      {"seed", a.options.seed}});
    rows.push_back({{"task", task},
                    {"mode", "baseline"},
                    {"metric", "majority_acc"},
                    {"value", results[0].score.majority},
                    {"n", n},
                    {"seed", a.options.seed}});
  }
  if (!a.out.empty()) {
    const nlohmann::json out{{"checkpoint", checkpoint.model_file},
                             {"step", checkpoint.info.step},
                             {"config", checkpoint.info.config.to_json()},
                             {"files", a.files},
                             {"folds", a.options.folds},
                             {"l2", a.options.l2},
                             {"seed", a.options.seed},
                             {"results", rows}};
    write_file_atomic(a.out, out.dump(2) + "\n");
  }
}

}  // namespace

void add_eval_probe_command(CLI::App& app) {
  auto a = std::make_shared<ProbeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval-probe",
      "Per-layer linear probes on `fbt synth` tasks: residual at the final colon, standard vs one-step recurrent "
      "prefill");
  cmd->footer(
      "\nEach FILE is one `fbt synth` task. For layers 0 (input) .. L the residual stream at the last token is\n"
      "recorded under standard prefill and with the last position fused with the previous top state; an\n"
      "L2-regularised multinomial logistic probe is fitted per layer with grouped k-fold cross-validation.\n");
  cmd->add_option("files", a->files, "JSONL files written by `fbt synth`")->required()->check(CLI::ExistingFile);
  cmd->add_option("--checkpoint", a->checkpoint, "Model file, step directory or run directory")->required();
  cmd->add_option("--folds", a->options.folds, "Folds of grouped cross-validation")
      ->capture_default_str()
      ->check(integer_range(2));
  cmd->add_option("--l2", a->options.l2, "λ of the probe's λ‖W‖² (standardised features)")
      ->capture_default_str()
      ->check(number_range(0, 1e6));
  cmd->add_option("--max-iter", a->options.max_iter, "L-BFGS iterations per probe")
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--seed", a->options.seed, "Seed of the fold assignment")->capture_default_str()->check(seed_value());
  cmd->add_option("--device", a->device, "cpu, cuda or auto (CUDA when available)")->capture_default_str();
  add_threads_option(cmd);
  cmd->add_option("--out", a->out, "Also write the results to this JSON file");
  cmd->callback([a] { run_eval_probe(*a); });
}

}  // namespace fbt::cli
