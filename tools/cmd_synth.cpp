// `fbt synth`: writes a synthetic state-tracking task (include/fbt/data/synth.h) or arithmetic word
// problems (include/fbt/data/synth_arithmetic.h) as JSON lines.
#include <iostream>
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "fbt/data/synth.h"
#include "fbt/data/synth_arithmetic.h"
#include "fbt/io/run_dir.h"
#include "fbt/util/atomic_file.h"
#include "fbt/util/error.h"

namespace fbt::cli {
namespace {

void run_synth(const SynthOptions& o, const std::string& out) {
  std::string text;
  for (const auto& e : generate_synth(o)) text += to_json(e).dump() + "\n";
  write_file_atomic(out, text);
  std::cout << "wrote " << o.n * static_cast<int64_t>(o.distractors.size()) << " " << o.task << " examples to " << out
            << "\n";
}

void run_arithmetic(const ArithmeticOptions& o, const std::string& out) {
  std::string text;
  int64_t skipped = 0;
  for (const auto& p : generate_arithmetic(o)) {
    text += to_json(p).dump() + "\n";
    skipped += p.skipped;
  }
  write_file_atomic(out, text);
  std::cout << "wrote " << o.n << " arithmetic problems (" << o.min_ops << "-" << o.max_ops << " operations, "
            << skipped << " solutions skipping steps) to " << out << "\n";
}

}  // namespace

void add_synth_command(CLI::App& app) {
  auto o = std::make_shared<SynthOptions>();
  auto out = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "synth",
      "Generate a synthetic task as JSON lines: state tracking for `fbt eval-probe` (paper §4.4, App. F), "
      "or arithmetic word problems for SFT and `fbt eval arithmetic`");
  cmd->footer(
      "\nTasks (state tracking: templates in include/fbt/data/synth.h; each text ends in a colon, the label is the "
      "answer):\n"
      "  completion   tasks started/finished, query \"is task X done:\" -> yes|no\n"
      "  memory       \"key K is V.\", D distractor lines, query \"value of K:\" -> red|green|blue|gold\n"
      "  registers    W writes \"set rI to V.\" to R registers, query \"register rI:\" -> last value 0-3\n"
      "  arithmetic   multi-step word problems with worked solutions ending in \"#### N\" (GSM8K's records:\n"
      "               question, answer), for SFT and `fbt eval arithmetic` (include/fbt/data/synth_arithmetic.h)\n");
  auto tasks = synth_tasks();
  tasks.push_back("arithmetic");
  cmd->add_option("--task", o->task, "completion, memory, registers or arithmetic")
      ->required()
      ->check(CLI::IsMember(tasks));
  cmd->add_option("--out", *out, "Output JSONL file")->required();
  cmd->add_option("--n", o->n, "Examples per distractor count (arithmetic: problems)")
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--distractors", o->distractors, "Distractor line counts, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(integer_range(0));
  cmd->add_option("--registers", o->registers, "Registers R (registers task)")
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--writes", o->writes, "Writes W (registers task)")->capture_default_str()->check(integer_range(1));
  auto a = std::make_shared<ArithmeticOptions>();
  cmd->add_option("--min-ops", a->min_ops, "Fewest operations per problem (arithmetic task)")->capture_default_str();
  cmd->add_option("--max-ops", a->max_ops, "Most operations per problem (arithmetic task)")->capture_default_str();
  cmd->add_option("--skip-fraction", a->skip_fraction,
                  "Share of solutions that leave out intermediate lines (arithmetic task)")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random seed")->capture_default_str()->check(seed_value());
  cmd->callback([cmd, o, a, out] {
    const bool arithmetic = o->task == "arithmetic";
    for (const char* flag : {"--distractors", "--registers", "--writes"})
      if (arithmetic && cmd->count(flag)) throw Error(std::string(flag) + " does not apply to --task arithmetic");
    for (const char* flag : {"--min-ops", "--max-ops", "--skip-fraction"})
      if (!arithmetic && cmd->count(flag)) throw Error(std::string(flag) + " applies to --task arithmetic only");
    check_output_file("--out", *out);
    if (!arithmetic) return run_synth(*o, *out);
    a->n = o->n;
    a->seed = o->seed;
    run_arithmetic(*a, *out);
  });
}

}  // namespace fbt::cli
