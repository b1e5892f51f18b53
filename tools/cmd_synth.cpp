// `fbt synth`: writes a synthetic state-tracking task (include/fbt/data/synth.h) as JSON lines.
#include <iostream>
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "fbt/data/synth.h"
#include "fbt/io/run_dir.h"

namespace fbt::cli {
namespace {

void run_synth(const SynthOptions& o, const std::string& out) {
  std::string text;
  for (const auto& e : generate_synth(o)) text += to_json(e).dump() + "\n";
  write_file_atomic(out, text);
  std::cout << "wrote " << o.n * static_cast<int64_t>(o.distractors.size()) << " " << o.task << " examples to " << out
            << "\n";
}

}  // namespace

void add_synth_command(CLI::App& app) {
  auto o = std::make_shared<SynthOptions>();
  auto out = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "synth", "Generate a synthetic state-tracking task for `fbt eval-probe` (JSON lines; paper §4.4, App. F)");
  cmd->footer(
      "\nTasks (templates in include/fbt/data/synth.h; each text ends in a colon, the label is the answer):\n"
      "  completion   tasks started/finished, query \"is task X done:\" -> yes|no\n"
      "  memory       \"key K is V.\", D distractor lines, query \"value of K:\" -> red|green|blue|gold\n"
      "  registers    W writes \"set rI to V.\" to R registers, query \"register rI:\" -> last value 0-3\n");
  cmd->add_option("--task", o->task, "completion, memory or registers")
      ->required()
      ->check(CLI::IsMember(synth_tasks()));
  cmd->add_option("--out", *out, "Output JSONL file")->required();
  cmd->add_option("--n", o->n, "Examples per distractor count")->capture_default_str()->check(integer_range(1));
  cmd->add_option("--distractors", o->distractors, "Distractor line counts, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(integer_range(0));
  cmd->add_option("--registers", o->registers, "Registers R (registers task)")->capture_default_str()->check(integer_range(1));
  cmd->add_option("--writes", o->writes, "Writes W (registers task)")->capture_default_str()->check(integer_range(1));
  cmd->add_option("--seed", o->seed, "Random seed")->capture_default_str()->check(seed_value());
  cmd->callback([o, out] {
    check_output_file("--out", *out);
    run_synth(*o, *out);
  });
}

}  // namespace fbt::cli
