// Generation evaluation: prompts, stop sequences, answer checks, sandboxed programs, pass@k.
#include "fbt/eval/gen.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "fbt/eval/answer_extraction.h"
#include "fbt/eval/pass_at_k.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

/// Sample `sample` at `temperature` for every prompt (prompts[i] is problems[i]'s), generated
/// o.batch prompts at a time in o.decoding, cut at task.stop (plain prompts) and measured; reports
/// progress as done + completions so far out of total.
std::vector<GenSample> complete(const GenTaskSpec& task, const std::vector<std::vector<int64_t>>& prompts,
                                const std::vector<bool>& truncated, const std::vector<GenProblem>& problems,
                                const Tokenizer& tokenizer, const GenerateFn& generate_fn, const GenEvalOptions& o,
                                double temperature, int64_t sample, int64_t done, int64_t total) {
  std::vector<GenSample> out;
  const auto n = static_cast<int64_t>(prompts.size());
  const std::vector<std::string> stops = o.chat ? std::vector<std::string>{} : task.stop;
  for (int64_t first = 0; first < n; first += o.batch) {
    const int64_t end = std::min(n, first + o.batch);
    GenerationOptions g;
    g.decoding = o.decoding;
    g.max_new_tokens = o.max_new_tokens;
    g.sampling.temperature = temperature;
    g.sampling.seed = o.seed + 1000003 * static_cast<uint64_t>(sample) + static_cast<uint64_t>(first);
    g.eos_id = o.chat ? o.chat->end_of_turn_id() : tokenizer.eos_id();
    g.pad_id = tokenizer.pad_id();
    const auto generated = generate_fn({prompts.begin() + first, prompts.begin() + end}, g);
    if (static_cast<int64_t>(generated.size()) != end - first)
      throw Error("internal: the generator returned a wrong number of completions");
    for (int64_t i = first; i < end; ++i) {
      GenSample s;
      s.problem = i;
      s.id = problems[i].id;
      s.temperature = temperature;
      s.sample = sample;
      s.prompt_tokens = static_cast<int64_t>(prompts[i].size());
      s.prompt_truncated = truncated[i];
      const auto& tokens = generated[i - first];
      s.completion = cut_at_stop(tokenizer.decode(tokens), stops);
      s.tokens = tokens_until_stop(tokenizer, tokens, stops);
      out.push_back(std::move(s));
    }
    if (o.on_progress) o.on_progress(done + end, total);
  }
  return out;
}

/// The prompt tokens of problems[item]: the document prefix and the plain prompt, or with o.chat
/// the rendered chat (whose template places any document prefix itself).
std::vector<int64_t> prompt_tokens(const GenTaskSpec& task, const GenTaskData& data, const Tokenizer& tokenizer,
                                   const GenEvalOptions& o, int64_t item, int64_t shots) {
  if (o.chat) return o.chat->render(build_gen_chat(task, data, item, shots, o.seed), true).ids;
  std::vector<int64_t> p = tokenizer.document_prefix();
  for (int64_t id : tokenizer.encode(build_gen_prompt(task, data, item, shots, o.seed))) p.push_back(id);
  return p;
}

/// The median of `values` (the mean of the middle two for an even count); values is not empty.
double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

}  // namespace

std::string cut_at_stop(const std::string& text, const std::vector<std::string>& stops) {
  size_t end = text.size();
  for (const auto& stop : stops) end = std::min(end, text.find(stop));
  return text.substr(0, end);
}

int64_t tokens_until_stop(const Tokenizer& tokenizer, const std::vector<int64_t>& tokens,
                          const std::vector<std::string>& stops) {
  const std::string all = tokenizer.decode(tokens);
  if (cut_at_stop(all, stops).size() == all.size()) return static_cast<int64_t>(tokens.size());
  for (size_t t = 1; t < tokens.size(); ++t) {
    const std::string prefix = tokenizer.decode({tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(t)});
    if (cut_at_stop(prefix, stops).size() < prefix.size()) return static_cast<int64_t>(t);
  }
  return static_cast<int64_t>(tokens.size());
}

void score_answer(const GenTaskSpec& task, const GenProblem& problem, GenSample& sample) {
  std::optional<std::string> answer;
  switch (task.check) {
    case AnswerCheck::Gsm8kNumber: answer = extract_gsm8k_answer(sample.completion); break;
    case AnswerCheck::MathBoxed: answer = extract_boxed_answer(sample.completion); break;
    case AnswerCheck::Program: throw Error("task " + task.name + " is checked by running programs, not by answers");
  }
  sample.extracted = answer.value_or("");
  sample.correct = answer && (task.check == AnswerCheck::Gsm8kNumber ? gsm8k_answers_equal(*answer, problem.reference)
                                                                     : math_answers_equal(*answer, problem.reference));
  sample.status = !answer ? "no_answer" : sample.correct ? "correct" : "wrong";
}

std::string build_program(const GenProblem& problem, const std::string& completion) {
  return problem.program_prefix + completion + problem.tests;
}

void run_programs(const std::vector<GenProblem>& problems, std::vector<GenSample>& samples, const SandboxLimits& limits,
                  int64_t jobs) {
  if (jobs < 1) throw Error("--sandbox-jobs must be >= 1 (got " + std::to_string(jobs) + ")");
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  const auto work = [&] {
    for (size_t i; (i = next++) < samples.size();) {
      try {
        GenSample& s = samples[i];
        const auto result = run_python(build_program(problems[s.problem], s.completion), limits);
        s.correct = result.status == SandboxStatus::kPassed;
        s.status = to_string(result.status);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next = samples.size();
      }
    }
  };
  std::vector<std::thread> threads;
  for (int64_t t = 0; t < std::min<int64_t>(jobs, static_cast<int64_t>(samples.size())); ++t)
    threads.emplace_back(work);
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

std::vector<MetricResult> greedy_metrics(const std::vector<GenSample>& samples) {
  std::vector<double> correct, tokens;
  for (const auto& s : samples) {
    correct.push_back(s.correct ? 1.0 : 0.0);
    tokens.push_back(static_cast<double>(s.tokens));
  }
  MetricResult med = mean_result("median_tokens", tokens);
  med.value = median(tokens);
  med.stderr_ = std::nan("");
  return {mean_result("pass@1", correct), med, mean_result("mean_tokens", tokens)};
}

std::vector<MetricResult> pass_at_k_metrics(const std::vector<GenSample>& samples, const std::vector<int64_t>& ks) {
  std::map<int64_t, std::pair<int64_t, int64_t>> counts;  // problem -> (n, c)
  for (const auto& s : samples) {
    auto& [n, c] = counts[s.problem];
    ++n;
    c += s.correct ? 1 : 0;
  }
  std::vector<MetricResult> out;
  for (int64_t k : ks) {
    std::vector<double> values;
    for (const auto& [problem, nc] : counts) {
      values.push_back(pass_at_k(nc.first, nc.second, k));
    }
    out.push_back(mean_result("pass@" + std::to_string(k), values));
  }
  return out;
}

void check_gen_options(const GenTaskSpec& task, const GenEvalOptions& o) {
  if (o.batch < 1) throw Error("--batch must be >= 1 (got " + std::to_string(o.batch) + ")");
  if (o.chat) check_chat_task(task);
  if (task.check == AnswerCheck::Program) {
    if (!o.allow_code_execution)
      throw Error("task " + task.name +
                  " executes model-generated Python code: pass --allow-code-execution (library: "
                  "GenEvalOptions::allow_code_execution) to run it in the bubblewrap sandbox (own namespaces, "
                  "read-only system, private tmpfs work dir, no network; include/fbt/eval/sandbox.h)");
    if (!(std::isfinite(o.sandbox.timeout_seconds) && o.sandbox.timeout_seconds > 0))
      throw Error("--sandbox-timeout must be a positive number of seconds (got " +
                  std::to_string(o.sandbox.timeout_seconds) + ")");
    if (o.sandbox_jobs < 1) throw Error("--sandbox-jobs must be >= 1 (got " + std::to_string(o.sandbox_jobs) + ")");
    check_sandbox(o.sandbox);
  }
  if (!task.sampled) return;
  if (o.samples < 1) throw Error("--samples-per-problem must be >= 1 (got " + std::to_string(o.samples) + ")");
  if (o.temperatures.empty()) throw Error("--temperatures: give at least one temperature");
  for (double t : o.temperatures) check_temperature(t, "--temperatures");
  for (int64_t k : o.ks)
    if (k < 1 || k > o.samples)
      throw Error("--pass-k " + std::to_string(k) + ": pass@k needs 1 <= k <= --samples-per-problem (" +
                  std::to_string(o.samples) + ")");
}

GenEvalResult evaluate_generation(const GenTaskSpec& task, const GenTaskData& data, const Tokenizer& tokenizer,
                                  const GenerateFn& generate_fn, const GenEvalOptions& o) {
  check_gen_options(task, o);
  if (o.max_new_tokens < 1 || o.max_new_tokens >= o.context)
    throw Error("--max-new-tokens must be in [1, context) = [1, " + std::to_string(o.context) + ") (got " +
                std::to_string(o.max_new_tokens) + ")");
  const int64_t shots = o.shots < 0 ? task.default_shots : o.shots;
  const auto available = static_cast<int64_t>(data.problems.size());
  const int64_t n = o.limit < 0 ? available : std::min(o.limit, available);
  if (n < 1) throw Error("task " + task.name + ": no problem to evaluate (--limit " + std::to_string(o.limit) + ")");

  const auto budget = static_cast<size_t>(o.context - o.max_new_tokens);
  std::vector<std::vector<int64_t>> prompts;
  std::vector<bool> truncated;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> p = prompt_tokens(task, data, tokenizer, o, i, shots);
    truncated.push_back(p.size() > budget);
    if (truncated.back()) p.erase(p.begin(), p.end() - static_cast<std::ptrdiff_t>(budget));
    prompts.push_back(std::move(p));
  }
  const std::vector<GenProblem> problems(data.problems.begin(), data.problems.begin() + n);

  GenEvalResult result;
  result.problems = n;
  result.truncated_prompts = std::count(truncated.begin(), truncated.end(), true);
  result.prompt_budget = static_cast<int64_t>(budget);
  if (!task.sampled) {
    result.samples = complete(task, prompts, truncated, problems, tokenizer, generate_fn, o, 0.0, 0, 0, n);
    for (auto& s : result.samples) score_answer(task, problems[s.problem], s);
    for (auto& m : greedy_metrics(result.samples)) result.metrics.push_back({m, 0.0, false});
    return result;
  }

  const int64_t total = n * o.samples * static_cast<int64_t>(o.temperatures.size());
  std::vector<GenMetric> per_temperature;
  for (double temperature : o.temperatures) {
    std::vector<GenSample> samples;
    for (int64_t j = 0; j < o.samples; ++j) {
      auto batch = complete(task, prompts, truncated, problems, tokenizer, generate_fn, o, temperature, j,
                            static_cast<int64_t>(result.samples.size() + samples.size()), total);
      samples.insert(samples.end(), batch.begin(), batch.end());
    }
    run_programs(problems, samples, o.sandbox, o.sandbox_jobs);
    for (auto& m : pass_at_k_metrics(samples, o.ks)) per_temperature.push_back({m, temperature, false});
    result.samples.insert(result.samples.end(), samples.begin(), samples.end());
  }
  result.metrics = per_temperature;
  for (size_t k = 0; k < o.ks.size(); ++k) {
    const GenMetric* best = nullptr;
    for (size_t i = k; i < per_temperature.size(); i += o.ks.size())
      if (best == nullptr || per_temperature[i].result.value > best->result.value) best = &per_temperature[i];
    result.metrics.push_back({best->result, best->temperature, true});
  }
  return result;
}

}  // namespace fbt
