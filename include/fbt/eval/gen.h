// Generation evaluation (SPEC §8): GSM8K / MATH-500 Pass@1 with trace lengths, HumanEval / MBPP
// pass@k from sandboxed samples, in one decoding mode per call.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fbt/data/chat_template.h"
#include "fbt/data/tokenizer.h"
#include "fbt/eval/gen_tasks.h"
#include "fbt/eval/mc.h"
#include "fbt/eval/sandbox.h"
#include "fbt/infer/generate.h"

namespace fbt {

/// Generates continuations of token prompts: fbt::generate on a model, or a stub in tests.
using GenerateFn = std::function<std::vector<std::vector<int64_t>>(const std::vector<std::vector<int64_t>>& prompts,
                                                                   const GenerationOptions& options)>;

struct GenEvalOptions {
  int64_t shots = -1;            ///< few-shot examples (< 0: the task's default_shots)
  int64_t limit = -1;            ///< evaluate the first this many problems at most (< 0: all)
  uint64_t seed = 1234;          ///< few-shot draws, and the sampling seed base
  int64_t max_new_tokens = 256;  ///< per completion
  int64_t context = 0;           ///< the model context; prompts keep their last context − max_new_tokens tokens
  int64_t batch = 8;             ///< prompts per generate call
  Decoding decoding;             ///< Standard, Soft or Fused(k)
  int64_t samples = 10;          ///< sampled tasks: n samples per problem and temperature
  std::vector<double> temperatures{0.3, 0.5, 0.7};  ///< sampled tasks
  std::vector<int64_t> ks{1, 3};                    ///< sampled tasks: pass@k reported for each k ≤ samples
  SandboxLimits sandbox;                            ///< per program run
  /// Code tasks execute model-written programs (in the bubblewrap sandbox, sandbox.h): they run
  /// only when this is true (`fbt eval --allow-code-execution`), else evaluate_generation throws.
  bool allow_code_execution = false;
  int64_t sandbox_jobs = 4;  ///< programs run at once
  /// Chat prompts (`--prompt-format chat`; math tasks only): when set, a problem's prompt is
  /// build_gen_chat rendered by this template with the generation prompt (instead of the document
  /// prefix + build_gen_prompt), generation stops at its end_of_turn_id (instead of the
  /// tokenizer's EOS), and the task's stop sequences are not applied (the end of the turn ends
  /// the reply). Unset: plain prompts.
  std::optional<ChatTemplate> chat;
  /// Called after each generate call with (completions done, completions in total); may be empty.
  std::function<void(int64_t, int64_t)> on_progress;
};

/// One generated completion and its verdict (a line of the --samples JSONL).
struct GenSample {
  int64_t problem = 0;        ///< index into GenTaskData::problems
  std::string id;             ///< GenProblem::id
  double temperature = 0.0;   ///< 0: greedy
  int64_t sample = 0;         ///< index among the samples of this problem and temperature
  int64_t prompt_tokens = 0;  ///< tokens given to the model (after left truncation)
  bool prompt_truncated = false;
  std::string completion;  ///< decoded and cut before the first stop sequence
  int64_t tokens = 0;      ///< generated length: tokens_until_stop
  std::string extracted;   ///< math: the extracted answer ("" if none); code: ""
  bool correct = false;
  std::string status;  ///< math: "correct", "wrong" or "no_answer"; code: to_string(SandboxStatus)
};

/// A reported number: a MetricResult at a sampling temperature.
struct GenMetric {
  MetricResult result;
  double temperature = 0.0;  ///< 0: greedy
  bool best = false;         ///< the best temperature of this metric (sampled tasks)
};

struct GenEvalResult {
  std::vector<GenMetric> metrics;
  std::vector<GenSample> samples;
  int64_t problems = 0;           ///< problems evaluated
  int64_t truncated_prompts = 0;  ///< of them, prompts left-truncated to prompt_budget tokens
  int64_t prompt_budget = 0;      ///< context − max_new_tokens
};

/// `text` up to (excluding) the first occurrence of any of `stops`.
std::string cut_at_stop(const std::string& text, const std::vector<std::string>& stops);

/// How many of `tokens` a generator that stops at the stop sequences would have produced: the
/// smallest t whose decoded prefix tokens[0, t) contains a stop sequence, else tokens.size().
int64_t tokens_until_stop(const Tokenizer& tokenizer, const std::vector<int64_t>& tokens,
                          const std::vector<std::string>& stops);

/// Judges a math completion (Gsm8kNumber or MathBoxed): sets extracted, correct and status.
/// Throws fbt::Error for a Program task.
void score_answer(const GenTaskSpec& task, const GenProblem& problem, GenSample& sample);

/// The checked program of a code completion: program_prefix + completion + tests.
std::string build_program(const GenProblem& problem, const std::string& completion);

/// Runs build_program of every sample in the sandbox, `jobs` at a time (threads), and sets
/// correct (exit status 0) and status. Throws fbt::Error if jobs < 1. This executes model-written
/// code: evaluate_generation calls it only with GenEvalOptions::allow_code_execution.
void run_programs(const std::vector<GenProblem>& problems, std::vector<GenSample>& samples, const SandboxLimits& limits,
                  int64_t jobs);

/// Greedy tasks: "pass@1" (mean correct, stderr sqrt(p(1−p)/(n−1))), "median_tokens" (stderr NaN)
/// and "mean_tokens" (stderr sd/sqrt(n)) over one sample per problem.
std::vector<MetricResult> greedy_metrics(const std::vector<GenSample>& samples);

/// "pass@k" for each k: the mean over problems of pass_at_k(n, c, k), n the samples of the
/// problem and c its correct ones (stderr sd/sqrt(problems)). Throws fbt::Error if a k exceeds
/// a problem's n.
std::vector<MetricResult> pass_at_k_metrics(const std::vector<GenSample>& samples, const std::vector<int64_t>& ks);

/// Evaluates the first options.limit problems of `data` in options.mode. Prompts are
/// document_prefix() + encode(build_gen_prompt(...)) (with options.chat: the rendered
/// build_gen_chat), left-truncated to context − max_new_tokens tokens.
/// Greedy tasks: one greedy completion per problem; metrics greedy_metrics. Sampled tasks: for
/// each temperature, `samples` completions per problem, sample j of a batch of problems starting
/// at problem b drawn with seed + 1000003·j + b (the same in every mode); metrics
/// pass_at_k_metrics per temperature, then each pass@k again with best = true at the temperature
/// where it is highest (the first on ties). Completions are cut at task.stop (not with chat);
/// generation itself stops at EOS (chat: the end-of-turn token) or max_new_tokens. Throws fbt::Error for bad options
/// (naming the flag), e.g. max_new_tokens ≥ context or a k above samples. For a Program task it first, before any
/// generation, throws fbt::Error unless options.allow_code_execution is set and check_sandbox
/// passes (bubblewrap works here).
GenEvalResult evaluate_generation(const GenTaskSpec& task, const GenTaskData& data, const Tokenizer& tokenizer,
                                  const GenerateFn& generate_fn, const GenEvalOptions& options);

/// The checks of evaluate_generation that need no model (it runs them first): batch ≥ 1; for a
/// code task the opt-in (allow_code_execution), a positive finite --sandbox-timeout, --sandbox-jobs
/// ≥ 1 and a working sandbox (check_sandbox); chat prompts only for math tasks; for a sampled task also samples ≥ 1, at
/// least one temperature, each passing check_temperature (generate.h), and every k of pass@k in [1, samples]. Throws
/// fbt::Error naming the flag; `fbt eval` calls it before loading the checkpoint or opening any output, so bad options
/// cost no generation and leave no file.
void check_gen_options(const GenTaskSpec& task, const GenEvalOptions& options);

}  // namespace fbt
