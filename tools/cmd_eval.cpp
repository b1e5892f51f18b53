// `fbt eval TASK...`: few-shot multiple-choice / cloze scores in the standard and fused(k) modes.
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "fbt/error.h"
#include "fbt/eval_mc.h"
#include "fbt/run_dir.h"

namespace fbt::cli {
namespace {

struct EvalArgs {
  std::vector<std::string> tasks;
  std::string checkpoint, data_dir, mode = "standard", out, device = "cpu";
  int64_t fused_passes = 1, batch = 16;
  McEvalOptions options;
};

/// The fused passes of each evaluated mode: 0 is standard, k is fused(k).
std::vector<int64_t> mode_passes(const EvalArgs& a) {
  if (a.fused_passes < 1) throw Error("--fused-passes must be >= 1 (got " + std::to_string(a.fused_passes) + ")");
  if (a.mode == "standard") return {0};
  if (a.mode == "fused") return {a.fused_passes};
  return {0, a.fused_passes};
}

void run_eval(const EvalArgs& a) {
  const auto passes = mode_passes(a);
  auto checkpoint = load_checkpoint(a.checkpoint, a.device);
  const auto tokenizer = load_run_tokenizer(checkpoint);
  std::vector<std::vector<Doc>> docs;  // per task; all read before any scoring
  for (const auto& name : a.tasks) docs.push_back(load_docs(find_task(name), a.data_dir));
  std::cout << "checkpoint " << checkpoint.model_file << " (step " << checkpoint.info.step << "), data "
            << a.data_dir << ", " << a.options.shots << "-shot, seed " << a.options.seed << "\n"
            << "| task | mode | metric | value | stderr | n |\n|---|---|---|---|---|---|\n"
            << std::flush;
  nlohmann::json rows = nlohmann::json::array();
  for (size_t t = 0; t < a.tasks.size(); ++t) {
    const TaskSpec& task = find_task(a.tasks[t]);
    for (int64_t k : passes) {
      ModelScorer scorer(checkpoint.model, k, a.batch);
      McEvalOptions options = a.options;
      options.on_progress = [&](int64_t done, int64_t total) {
        std::cerr << "\r" << task.name << " " << scorer.mode_name() << ": " << done << "/" << total << " items"
                  << (done == total ? "\n" : "") << std::flush;
      };
      for (const auto& r : evaluate_task(task, docs[t], *tokenizer, scorer, options)) {
        char line[256];
        std::snprintf(line, sizeof line, "| %s | %s | %s | %.4f | %.4f | %lld |\n", task.name.c_str(),
                      scorer.mode_name().c_str(), r.metric.c_str(), r.value, r.stderr_, static_cast<long long>(r.n));
        std::cout << line << std::flush;
        rows.push_back({{"task", task.name}, {"mode", scorer.mode_name()}, {"metric", r.metric},
                        {"value", r.value}, {"stderr", r.stderr_}, {"n", r.n},
                        {"shots", a.options.shots}, {"seed", a.options.seed}});
      }
    }
  }
  if (!a.out.empty()) {
    const nlohmann::json out{{"checkpoint", checkpoint.model_file}, {"step", checkpoint.info.step},
                             {"config", checkpoint.info.config.to_json()}, {"data_dir", a.data_dir},
                             {"shots", a.options.shots}, {"seed", a.options.seed}, {"limit", a.options.limit},
                             {"results", rows}};
    write_file_atomic(a.out, out.dump(2) + "\n");
  }
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "Few-shot multiple-choice / cloze evaluation (lm-evaluation-harness prompts and metrics)");
  std::vector<std::string> names;
  std::string footer = "\nTasks (files under --data-dir; the last 100 records of each are the few-shot pool):\n";
  for (const auto& t : builtin_tasks()) {
    names.push_back(t.name);
    footer += "  " + t.name + std::string(t.name.size() < 15 ? 15 - t.name.size() : 1, ' ') + t.summary + "\n" +
              std::string(17, ' ') + t.path + (t.labels_path.empty() ? "" : " + " + t.labels_path) + "\n";
  }
  cmd->footer(footer);
  cmd->add_option("tasks", a->tasks, "Tasks to evaluate (see below)")->required()->check(CLI::IsMember(names));
  cmd->add_option("--checkpoint", a->checkpoint, "Model file, step directory or run directory")->required();
  cmd->add_option("--data-dir", a->data_dir, "Directory holding the task files (the layout of shared/data)")
      ->envname("FBT_DATA_DIR")
      ->required();
  cmd->add_option("--mode", a->mode, "standard, fused (k fused passes) or all (standard, then fused)")
      ->check(CLI::IsMember({"standard", "fused", "all"}))
      ->capture_default_str();
  cmd->add_option("--fused-passes", a->fused_passes, "k of fused(k): fused passes before scoring")
      ->capture_default_str();
  cmd->add_option("--shots", a->options.shots, "Few-shot examples per item")->capture_default_str();
  cmd->add_option("--limit", a->options.limit, "Evaluate the first N items at most (-1: all)")->capture_default_str();
  cmd->add_option("--seed", a->options.seed, "Seed of the few-shot draws")->capture_default_str();
  cmd->add_option("--batch", a->batch, "Sequences per forward")->capture_default_str();
  cmd->add_option("--device", a->device, "cpu or cuda")->capture_default_str();
  cmd->add_option("--out", a->out, "Also write the results to this JSON file");
  cmd->callback([a] { run_eval(*a); });
}

}  // namespace fbt::cli
