// `fbt eval TASK...`: few-shot multiple-choice / cloze scores (standard, fused(k)) and generation
// tasks (standard, soft, fused(k)) with plain or chat prompts and paired McNemar tests between
// modes, as Markdown tables, a results JSON and a per-sample JSONL.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "fbt/eval/gen.h"
#include "fbt/eval/mc.h"
#include "fbt/eval/mcnemar.h"
#include "fbt/io/run_dir.h"
#include "fbt/util/atomic_file.h"
#include "fbt/util/error.h"

namespace fbt::cli {
namespace {

/// --shots when not given: lm-eval's usual 5 for multiple choice; generation tasks use their own.
constexpr int64_t kDefaultMcShots = 5;

struct EvalArgs {
  std::vector<std::string> tasks;
  std::string checkpoint, data_dir, mode = "standard", out, samples_path, device = "auto";
  std::string prompt_format = "plain", chat_template = "auto", weights = "fp32";
  int64_t fused_passes = 1, batch = 16;
  McEvalOptions options;
  GenEvalOptions gen;
};

/// The multiple-choice scoring modes of --mode: standard and fused(k) (soft is refused).
std::vector<Decoding> mc_decodings(const EvalArgs& a, const std::string& task) {
  if (a.mode == "soft")
    throw Error("--mode soft: task " + task + " is scored teacher forced, in standard or fused mode only");
  const auto fused = Decoding::fused(a.fused_passes, "--fused-passes");
  if (a.mode == "standard") return {Decoding{}};
  if (a.mode == "fused") return {fused};
  return {Decoding{}, fused};
}

/// The decoding modes of generation tasks.
std::vector<Decoding> gen_decodings(const EvalArgs& a) {
  std::vector<DecodeMode> modes{DecodeMode::Standard, DecodeMode::Soft, DecodeMode::Fused};
  if (a.mode != "all") modes = {enum_from_string<DecodeMode>(a.mode, "--mode")};
  std::vector<Decoding> out;
  for (DecodeMode m : modes) out.push_back(Decoding::make(m, a.fused_passes, "--fused-passes"));
  return out;
}

std::string format_value(double v, const char* format = "%.4f") {
  char text[32];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

void run_mc_task(const EvalArgs& a, LoadedCheckpoint& checkpoint, const Tokenizer& tokenizer, const TaskSpec& task,
                 const std::vector<Doc>& docs, nlohmann::json& rows) {
  require_fp32_weights(checkpoint, "multiple-choice task " + task.name + " (scored by the fp32 forward)");
  McEvalOptions options = a.options;
  if (options.shots < 0) options.shots = kDefaultMcShots;
  for (const Decoding& decoding : mc_decodings(a, task.name)) {
    ModelScorer scorer(checkpoint.model, decoding, a.batch);
    options.on_progress = cli::progress_printer(task.name + " " + scorer.mode_name(), "items");
    for (const auto& r : evaluate_task(task, docs, tokenizer, scorer, options)) {
      std::cout << "| " << task.name << " | " << scorer.mode_name() << " | " << r.metric << " | "
                << format_value(r.value) << " | " << format_value(r.stderr_) << " | " << r.n << " |\n"
                << std::flush;
      rows.push_back({{"task", task.name},
                      {"mode", scorer.mode_name()},
                      {"metric", r.metric},
                      {"value", r.value},
                      {"stderr", r.stderr_},
                      {"n", r.n},
                      {"shots", options.shots},
                      {"seed", options.seed}});
    }
  }
}

/// Per decoding mode (its label), whether each problem was answered correctly (greedy tasks).
using ModeOutcomes = std::vector<std::pair<std::string, std::vector<bool>>>;

/// Runs a generation task in every mode of --mode: prints its metric rows, appends them to `rows`
/// and its samples to `samples` (if any). Returns the greedy tasks' per-problem outcomes per mode.
ModeOutcomes run_gen_task(const EvalArgs& a, LoadedCheckpoint& checkpoint, const Tokenizer& tokenizer,
                          const GenTaskSpec& task, const GenTaskData& data, nlohmann::json& rows,
                          std::ostream* samples) {
  const auto backend = decode_backend_for(checkpoint, a.weights, /*sole_user=*/false);  // quantised once, not per batch
  const GenerateFn generate_fn = [&](const std::vector<std::vector<int64_t>>& prompts, const GenerationOptions& g) {
    GenerationOptions with_decoder = g;
    with_decoder.backend = backend;
    return generate(checkpoint.model, prompts, with_decoder);
  };
  const int64_t shots = a.gen.shots < 0 ? task.default_shots : a.gen.shots;
  ModeOutcomes outcomes;
  for (const Decoding& decoding : gen_decodings(a)) {
    GenEvalOptions options = a.gen;
    options.decoding = decoding;
    options.batch = a.batch;
    options.context = checkpoint.model->config().context;
    const std::string label = decoding.label();
    options.on_progress = cli::progress_printer(task.name + " " + label, "completions");
    const auto result = evaluate_generation(task, data, tokenizer, generate_fn, options);
    if (result.truncated_prompts > 0)
      std::cerr << "warning: " << task.name << " " << label << ": " << result.truncated_prompts << " of "
                << result.problems << " prompts were longer than context - --max-new-tokens = " << result.prompt_budget
                << " tokens and lost their beginning (left truncation; fewer --shots or a smaller --max-new-tokens "
                   "keeps them whole)\n";
    for (const auto& m : result.metrics) {
      const auto& r = m.result;
      const std::string metric = (m.best ? "best_" : "") + r.metric;
      std::cout << "| " << task.name << " | " << label << " | " << metric << " | " << m.temperature << " | "
                << format_value(r.value) << " | " << format_value(r.stderr_) << " | " << r.n << " |\n"
                << std::flush;
      nlohmann::json row{{"task", task.name},
                         {"mode", label},
                         {"metric", metric},
                         {"value", r.value},
                         {"stderr", r.stderr_},
                         {"n", r.n},
                         {"shots", shots},
                         {"seed", options.seed},
                         {"temperature", m.temperature},
                         {"max_new_tokens", options.max_new_tokens}};
      if (task.sampled) row["samples_per_problem"] = options.samples;
      if (options.chat) row["prompt_format"] = "chat";
      rows.push_back(row);
    }
    if (!task.sampled) {
      outcomes.push_back({label, {}});
      for (const auto& s : result.samples) outcomes.back().second.push_back(s.correct);
    }
    if (samples == nullptr) continue;
    for (const auto& s : result.samples)
      *samples << nlohmann::json{{"task", task.name},
                                 {"mode", label},
                                 {"problem", s.problem},
                                 {"id", s.id},
                                 {"temperature", s.temperature},
                                 {"sample", s.sample},
                                 {"prompt_tokens", s.prompt_tokens},
                                 {"prompt_truncated", s.prompt_truncated},
                                 {"completion", s.completion},
                                 {"tokens", s.tokens},
                                 {"extracted", s.extracted},
                                 {"correct", s.correct},
                                 {"status", s.status}}
                      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
               << "\n";
    samples->flush();
  }
  return outcomes;
}

/// The paired exact McNemar test (mcnemar.h) of every pair of modes of a greedy task, as JSON rows.
nlohmann::json mcnemar_rows(const std::string& task, const ModeOutcomes& outcomes) {
  const auto accuracy = [](const std::vector<bool>& correct) {
    return static_cast<double>(std::count(correct.begin(), correct.end(), true)) / static_cast<double>(correct.size());
  };
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < outcomes.size(); ++i)
    for (size_t j = i + 1; j < outcomes.size(); ++j) {
      const auto& [mode_a, a] = outcomes[i];
      const auto& [mode_b, b] = outcomes[j];
      const McNemarResult r = mcnemar_test(a, b);
      rows.push_back({{"task", task},
                      {"mode_a", mode_a},
                      {"mode_b", mode_b},
                      {"n", r.n},
                      {"pass@1_a", accuracy(a)},
                      {"pass@1_b", accuracy(b)},
                      {"b", r.b},
                      {"c", r.c},
                      {"p", r.p}});
    }
  return rows;
}

/// Prints the McNemar rows as a Markdown table.
void print_mcnemar(const nlohmann::json& rows) {
  std::cout << "\nPaired exact McNemar test between modes on the same problems (b: A right, B wrong; c: B right, "
               "A wrong; p two-sided):\n| task | mode A | mode B | n | pass@1 A | pass@1 B | b | c | p |\n"
               "|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows)
    std::cout << "| " << r.at("task").get<std::string>() << " | " << r.at("mode_a").get<std::string>() << " | "
              << r.at("mode_b").get<std::string>() << " | " << r.at("n") << " | " << format_value(r.at("pass@1_a"))
              << " | " << format_value(r.at("pass@1_b")) << " | " << r.at("b") << " | " << r.at("c") << " | "
              << format_value(r.at("p"), "%.4g") << " |\n";
  std::cout << std::flush;
}

/// --samples, else the --out path with its extension replaced by ".samples.jsonl", else none.
std::string samples_file(const EvalArgs& a) {
  if (!a.samples_path.empty() || a.out.empty()) return a.samples_path;
  return std::filesystem::path(a.out).replace_extension(".samples.jsonl").string();
}

/// --prompt-format chat: only generation tasks with chat prompts (before any work).
void check_chat_tasks(const std::vector<std::string>& mc, const std::vector<std::string>& gen) {
  if (!mc.empty())
    throw Error("--prompt-format chat: task " + mc.front() +
                " is scored by log-likelihood of a plain prompt; chat prompts are for gsm8k, math500 and arithmetic");
  for (const auto& name : gen) check_chat_task(*find_gen_task(name));
}

/// Runs the generation tasks: the metric table, then the McNemar table of the greedy tasks run in
/// several modes (returned as JSON rows), and the samples JSONL.
nlohmann::json run_gen_tasks(const EvalArgs& a, LoadedCheckpoint& checkpoint, const Tokenizer& tokenizer,
                             const std::vector<std::string>& gen, const std::vector<GenTaskData>& gen_data,
                             bool after_mc, nlohmann::json& rows) {
  const std::string path = samples_file(a);
  std::ofstream samples;
  if (!path.empty()) {
    samples.open(path, std::ios::binary | std::ios::trunc);
    if (!samples) throw Error("--samples: cannot write '" + path + "'");
  }
  std::cout << (after_mc ? "\n" : "") << "| task | mode | metric | temperature | value | stderr | n |\n"
            << "|---|---|---|---|---|---|---|\n"
            << std::flush;
  nlohmann::json paired = nlohmann::json::array();
  for (size_t t = 0; t < gen.size(); ++t) {
    const auto outcomes = run_gen_task(a, checkpoint, tokenizer, *find_gen_task(gen[t]), gen_data[t], rows,
                                       path.empty() ? nullptr : &samples);
    for (const auto& row : mcnemar_rows(gen[t], outcomes)) paired.push_back(row);
  }
  if (!paired.empty()) print_mcnemar(paired);
  if (!path.empty()) std::cerr << "samples written to " << path << "\n";
  return paired;
}

void run_eval(EvalArgs a) {
  Decoding::fused(a.fused_passes, "--fused-passes");  // checked before any work, whatever --mode
  check_output_file("--out", a.out);                  // before any work, not after the whole evaluation
  check_output_file(a.samples_path.empty() ? "--out (its .samples.jsonl)" : "--samples", samples_file(a));
  std::vector<std::string> mc, gen;  // task names by kind, in command-line order
  for (const auto& name : a.tasks) (find_gen_task(name) ? gen : mc).push_back(name);
  const bool chat = a.prompt_format == "chat";
  if (chat) check_chat_tasks(mc, gen);
  // Before any work: code tasks need --allow-code-execution and a working sandbox.
  for (const auto& name : gen) check_gen_options(*find_gen_task(name), a.gen);
  std::vector<std::vector<Doc>> docs;  // all data read and counted before the checkpoint is loaded
  std::vector<GenTaskData> gen_data;
  for (const auto& name : mc) {
    docs.push_back(load_docs(find_task(name), a.data_dir));
    mc_item_count(find_task(name), static_cast<int64_t>(docs.back().size()), a.options);
  }
  for (const auto& name : gen) gen_data.push_back(load_gen_task(*find_gen_task(name), a.data_dir));
  auto checkpoint = load_checkpoint(a.checkpoint, a.device);
  const auto tokenizer = load_run_tokenizer(checkpoint);
  if (chat) a.gen.chat = load_chat_template(checkpoint, *tokenizer, a.chat_template);
  std::cout << "checkpoint " << checkpoint.model_file << " (step " << checkpoint.info.step << "), data " << a.data_dir
            << ", seed " << a.options.seed << (chat ? ", chat prompts (" + a.gen.chat->name() + " template)" : "")
            << "\n";
  nlohmann::json rows = nlohmann::json::array(), paired = nlohmann::json::array();
  if (!mc.empty()) {
    std::cout << "| task | mode | metric | value | stderr | n |\n|---|---|---|---|---|---|\n" << std::flush;
    for (size_t t = 0; t < mc.size(); ++t) run_mc_task(a, checkpoint, *tokenizer, find_task(mc[t]), docs[t], rows);
  }
  if (!gen.empty()) paired = run_gen_tasks(a, checkpoint, *tokenizer, gen, gen_data, !mc.empty(), rows);
  if (!a.out.empty()) {
    nlohmann::json out{{"checkpoint", checkpoint.model_file},
                       {"step", checkpoint.info.step},
                       {"config", checkpoint.info.config.to_json()},
                       {"data_dir", a.data_dir},
                       {"shots", a.options.shots < 0 ? kDefaultMcShots : a.options.shots},
                       {"seed", a.options.seed},
                       {"limit", a.options.limit},
                       {"samples", samples_file(a)},
                       {"results", rows}};
    if (chat) {
      out["prompt_format"] = "chat";
      out["chat_template"] = a.gen.chat->name();
    }
    if (!paired.empty()) out["mcnemar"] = paired;
    write_file_atomic(a.out, out.dump(2) + "\n");
  }
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  a->options.shots = -1;
  CLI::App* cmd =
      app.add_subcommand("eval",
                         "Few-shot multiple-choice / cloze evaluation (lm-evaluation-harness prompts and metrics) and "
                         "generation tasks (math Pass@1, code pass@k)");
  std::vector<std::string> names;
  const auto line = [&](const std::string& name, const std::string& summary, const std::string& files) {
    names.push_back(name);
    return "  " + name + std::string(name.size() < 15 ? 15 - name.size() : 1, ' ') + summary + "\n" +
           std::string(17, ' ') + files + "\n";
  };
  std::string footer =
      "\nMultiple-choice tasks (files under --data-dir; the last 100 records of each are the "
      "few-shot pool; modes standard, fused):\n";
  for (const auto& t : builtin_tasks())
    footer += line(t.name, t.summary, t.path + (t.labels_path.empty() ? "" : " + " + t.labels_path));
  footer += "\nGeneration tasks (modes standard, soft, fused; see include/fbt/eval/gen_tasks.h):\n";
  for (const auto& t : builtin_gen_tasks())
    footer += line(t.name, t.summary, t.path + (t.fewshot_path.empty() ? "" : " + " + t.fewshot_path));
  cmd->footer(footer);
  cmd->add_option("tasks", a->tasks, "Tasks to evaluate (see below)")->required()->check(CLI::IsMember(names));
  cmd->add_option("--checkpoint", a->checkpoint, "Model file, step directory or run directory")->required();
  cmd->add_option("--data-dir", a->data_dir, "Directory holding the task files (the layout of shared/data)")
      ->envname("FBT_DATA_DIR")
      ->required();
  cmd->add_option("--mode,--modes", a->mode,
                  "standard, soft (generation only), fused (k fused passes) or all (every mode the task has)")
      ->check(CLI::IsMember({"standard", "soft", "fused", "all"}))
      ->capture_default_str();
  cmd->add_option("--fused-passes", a->fused_passes, "k of fused(k): fused passes before scoring / decoding")
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--shots", a->options.shots,
                  "Few-shot examples per item (default: 5 for multiple choice, the task's own for generation)")
      ->check(integer_range(0));
  cmd->add_option("--limit", a->options.limit, "Evaluate the first N items at most (-1: all)")
      ->capture_default_str()
      ->check(count_or_all());
  cmd->add_option("--seed", a->options.seed, "Seed of the few-shot draws (and of sampling)")
      ->capture_default_str()
      ->check(seed_value());
  cmd->add_option("--batch", a->batch, "Sequences per forward / generate call")
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--device", a->device, "cpu, cuda or auto (CUDA when available)")->capture_default_str();
  add_threads_option(cmd);
  add_weights_option(cmd, a->weights)
      ->description(
          "Weights of the generation tasks' CPU decode step and their prefill: fp32, int8 (Q8_0) or int4 (Q4_0), "
          "quantised at load; multiple-choice scoring stays fp32");
  cmd->add_option("--out", a->out, "Also write the results to this JSON file");
  cmd->add_option("--samples", a->samples_path,
                  "Generation: per-sample JSONL (default: the --out path with extension .samples.jsonl)");
  cmd->add_option("--max-new-tokens", a->gen.max_new_tokens, "Generation: tokens per completion at most")
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--samples-per-problem", a->gen.samples, "Code tasks: n samples per problem and temperature")
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--temperatures", a->gen.temperatures, "Code tasks: sampling temperatures (best reported)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(temperature_value());
  cmd->add_option("--pass-k", a->gen.ks, "Code tasks: k of the reported pass@k")
      ->delimiter(',')
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--sandbox-timeout", a->gen.sandbox.timeout_seconds, "Code tasks: wall-clock seconds per program")
      ->capture_default_str()
      ->check(number_range(0, 86400, /*lo_open=*/true));
  cmd->add_option("--sandbox-jobs", a->gen.sandbox_jobs, "Code tasks: programs run at once")
      ->capture_default_str()
      ->check(integer_range(1, 1024));
  cmd->add_option("--prompt-format", a->prompt_format,
                  "Generation: plain (the task's few-shot text prompt) or chat (each problem one user turn "
                  "through the model's chat template, stopping at its end-of-turn token; gsm8k, math500, arithmetic; "
                  "--shots then defaults to 0, and shots become earlier turns)")
      ->check(CLI::IsMember({"plain", "chat"}))
      ->capture_default_str();
  auto* chat_template = add_chat_template_option(cmd, a->chat_template, "With --prompt-format chat: ");
  cmd->add_flag("--allow-code-execution", a->gen.allow_code_execution,
                "Code tasks (humaneval, mbpp): execute the model's programs, in the bubblewrap sandbox "
                "(required for them)");
  cmd->callback([a, chat_template] {
    if (chat_template->count() > 0 && a->prompt_format != "chat")
      throw Error("--chat-template " + a->chat_template + " needs --prompt-format chat");
    a->gen.shots = a->options.shots;
    a->gen.limit = a->options.limit;
    a->gen.seed = a->options.seed;
    if (a->prompt_format == "chat" && a->gen.shots < 0) a->gen.shots = 0;  // zero-shot chat unless --shots
    run_eval(*a);
  });
}

}  // namespace fbt::cli
