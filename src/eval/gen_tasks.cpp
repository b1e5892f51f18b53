// The built-in generation tasks: one descriptor per task, their loading and few-shot prompts.
#include "fbt/eval/gen_tasks.h"

#include <algorithm>
#include <filesystem>

#include "fbt/eval/answer_extraction.h"
#include "fbt/eval/mc.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

/// `text` with every "\r\n" written "\n" (MBPP's code uses Windows line ends).
std::string unix_newlines(std::string text) {
  for (size_t at; (at = text.find("\r\n")) != std::string::npos;) text.erase(at, 1);
  return text;
}

std::string text_field(const nlohmann::json& record, const char* field) { return record.at(field).get<std::string>(); }

/// lm-eval gsm8k: "Question: {question}\nAnswer:", target " {answer}".
GenProblem gsm8k_problem(const nlohmann::json& r) {
  GenProblem p;
  p.user = text_field(r, "question");
  p.solution = text_field(r, "answer");
  p.prompt = "Question: " + p.user + "\nAnswer:";
  p.solved = p.prompt + " " + p.solution;
  p.reference = gsm8k_reference_answer(text_field(r, "answer"));
  return p;
}

/// `fbt synth --task arithmetic` (synth_arithmetic.h): GSM8K's prompt and answer check, with the
/// record's id.
GenProblem arithmetic_problem(const nlohmann::json& r) {
  GenProblem p = gsm8k_problem(r);
  p.id = text_field(r, "id");
  return p;
}

/// Minerva / lm-eval minerva_math: "Problem:\n{problem}\n\nSolution:", target " {solution}".
GenProblem math_problem(const nlohmann::json& r) {
  GenProblem p;
  p.id = text_field(r, "unique_id");
  p.user = text_field(r, "problem");
  p.solution = text_field(r, "solution");
  p.prompt = "Problem:\n" + p.user + "\n\nSolution:";
  p.solved = p.prompt + " " + p.solution;
  p.reference = text_field(r, "answer");
  return p;
}

/// HumanEval: the prompt is continued by the body; checked by test + "check(entry_point)".
GenProblem humaneval_problem(const nlohmann::json& r) {
  GenProblem p;
  p.id = text_field(r, "task_id");
  p.prompt = text_field(r, "prompt");
  p.solved = p.prompt + text_field(r, "canonical_solution");
  p.program_prefix = p.prompt;
  p.tests = "\n" + text_field(r, "test") + "\ncheck(" + text_field(r, "entry_point") + ")\n";
  return p;
}

/// lm-eval mbpp: the task text with its three tests shown, "[BEGIN]\n", target "{code}\n[DONE]";
/// checked by test_setup_code and the test asserts after the completion.
GenProblem mbpp_problem(const nlohmann::json& r) {
  const auto& tests = r.at("test_list");
  if (tests.size() != 3) throw Error("test_list has " + std::to_string(tests.size()) + " tests, expected 3");
  GenProblem p;
  p.id = std::to_string(r.at("task_id").get<int64_t>());
  p.prompt = "You are an expert Python programmer, and here is your task: " + unix_newlines(text_field(r, "text")) +
             " Your code should pass these tests:\n\n";
  p.tests = "\n" + unix_newlines(text_field(r, "test_setup_code")) + "\n";
  for (const auto& t : tests) {
    p.prompt += unix_newlines(t.get<std::string>()) + "\n";
    p.tests += unix_newlines(t.get<std::string>()) + "\n";
  }
  p.prompt += "[BEGIN]\n";
  p.solved = p.prompt + unix_newlines(text_field(r, "code")) + "\n[DONE]";
  return p;
}

/// The problems of records[range] (range resolved against records.size()); `path` names errors.
std::vector<GenProblem> problems_of(const GenTaskSpec& task, const std::vector<nlohmann::json>& records,
                                    RecordRange range, const std::string& path) {
  const auto n = static_cast<int64_t>(records.size());
  const auto resolve = [n](int64_t i) { return std::clamp(i < 0 ? n + i : i, int64_t{0}, n); };
  const int64_t begin = resolve(range.begin), end = resolve(range.end);
  if (begin >= end) throw Error(path + ": no records in the task's range (" + std::to_string(n) + " records)");
  std::vector<GenProblem> problems;
  for (int64_t i = begin; i < end; ++i) {
    const std::string where = path + ": record " + std::to_string(i + 1);
    try {
      problems.push_back(task.to_problem(records[i]));
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + ": " + e.what());
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
    if (problems.back().id.empty()) problems.back().id = std::to_string(i + 1);
  }
  return problems;
}

}  // namespace

const std::vector<GenTaskSpec>& builtin_gen_tasks() {
  using F = RecordFormat;
  using C = AnswerCheck;
  static const std::vector<GenTaskSpec> tasks{
      {"gsm8k",
       "GSM8K test, 8-shot chain of thought from train: pass@1 (greedy), median/mean tokens",
       "gsm8k/test.jsonl",
       F::JsonLines,
       {},
       "gsm8k/train.jsonl",
       {},
       false,
       8,
       {"Question:", "\n\n"},
       C::Gsm8kNumber,
       false,
       gsm8k_problem},
      {"math500",
       "MATH-500, 4-shot (pool: last 100 records): pass@1 (greedy) of \\boxed{}, median/mean tokens",
       "math500/test.jsonl",
       F::JsonLines,
       {0, -100},
       "",
       {-100, RecordRange::kEnd},
       false,
       4,
       {"Problem:"},
       C::MathBoxed,
       false,
       math_problem},
      {"arithmetic",
       "fbt synth --task arithmetic problems (arithmetic/test.jsonl; few-shot pool arithmetic/train.jsonl), "
       "0-shot: pass@1 (greedy) of '#### N', median/mean tokens",
       "arithmetic/test.jsonl",
       F::JsonLines,
       {},
       "arithmetic/train.jsonl",
       {},
       false,
       0,
       {"Question:", "\n\n"},
       C::Gsm8kNumber,
       false,
       arithmetic_problem},
      {"humaneval",
       "HumanEval, 0-shot: pass@k from n samples per temperature (sandboxed)",
       "humaneval/HumanEval.jsonl.gz",
       F::GzipJsonLines,
       {},
       "",
       {0, 0},
       true,
       0,
       {"\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#"},
       C::Program,
       true,
       humaneval_problem},
      {"mbpp",
       "MBPP task_ids 11-510, 3-shot (task_ids 2-4): pass@k from n samples per temperature (sandboxed)",
       "mbpp/mbpp.jsonl",
       F::JsonLines,
       {10, 510},
       "",
       {1, 4},
       true,
       3,
       {"[DONE]"},
       C::Program,
       true,
       mbpp_problem},
  };
  return tasks;
}

const GenTaskSpec* find_gen_task(const std::string& name) {
  for (const auto& t : builtin_gen_tasks())
    if (t.name == name) return &t;
  return nullptr;
}

GenTaskData load_gen_task(const GenTaskSpec& task, const std::string& data_dir) {
  const auto file = [&](const std::string& relative) { return (std::filesystem::path(data_dir) / relative).string(); };
  const std::string path = file(task.path);
  const auto records = read_records(path, task.format);
  GenTaskData data;
  data.problems = problems_of(task, records, task.evaluated, path);
  if (task.pool.begin == task.pool.end) return data;  // 0-shot task: no pool
  if (task.fewshot_path.empty()) {
    data.pool = problems_of(task, records, task.pool, path);
  } else {
    const std::string pool_path = file(task.fewshot_path);
    data.pool = problems_of(task, read_records(pool_path, task.format), task.pool, pool_path);
  }
  return data;
}

namespace {

/// The pool indices of problems[item]'s few-shot examples (build_gen_prompt's rule).
std::vector<int64_t> fewshot_examples(const GenTaskSpec& task, const GenTaskData& data, int64_t item, int64_t shots,
                                      uint64_t seed) {
  if (shots < 0) throw Error("--shots must be >= 0 (got " + std::to_string(shots) + ")");
  const auto pool = static_cast<int64_t>(data.pool.size());
  if (!task.fixed_shots) return fewshot_indices(pool, shots, seed, item);
  if (shots > pool)
    throw Error("--shots " + std::to_string(shots) + " exceeds the " + std::to_string(pool) +
                " fixed few-shot examples of " + task.name);
  std::vector<int64_t> examples;
  for (int64_t i = 0; i < shots; ++i) examples.push_back(i);
  return examples;
}

}  // namespace

std::string build_gen_prompt(const GenTaskSpec& task, const GenTaskData& data, int64_t item, int64_t shots,
                             uint64_t seed) {
  std::string prompt;
  for (int64_t e : fewshot_examples(task, data, item, shots, seed)) prompt += data.pool[e].solved + "\n\n";
  return prompt + data.problems[item].prompt;
}

void check_chat_task(const GenTaskSpec& task) {
  if (task.check == AnswerCheck::Program)
    throw Error("--prompt-format chat: task " + task.name +
                " continues a program and has no chat prompt (chat prompts: gsm8k, math500, arithmetic)");
}

std::vector<ChatMessage> build_gen_chat(const GenTaskSpec& task, const GenTaskData& data, int64_t item, int64_t shots,
                                        uint64_t seed) {
  check_chat_task(task);
  std::vector<ChatMessage> messages;
  for (int64_t e : fewshot_examples(task, data, item, shots, seed)) {
    messages.push_back({"user", data.pool[e].user});
    messages.push_back({"assistant", data.pool[e].solution});
  }
  messages.push_back({"user", data.problems[item].user});
  return messages;
}

}  // namespace fbt
