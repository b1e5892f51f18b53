// Generation tasks (SPEC §8): GSM8K, MATH-500, HumanEval, MBPP as one small descriptor each.
//
// Each task reads its original file under the data directory (`fbt eval --data-dir DIR`), laid
// out as shared/data (shared/data/MANIFEST.md):
//
//   gsm8k      DIR/gsm8k/test.jsonl              evaluated: all 1,187 records
//              DIR/gsm8k/train.jsonl             few-shot pool: all 7,473 records (8 drawn per problem)
//   math500    DIR/math500/test.jsonl            evaluated: the first 400 records; few-shot pool:
//                                                the last 100 (no MATH train split in shared/data)
//   humaneval  DIR/humaneval/HumanEval.jsonl.gz  evaluated: all 164 records, 0-shot
//   mbpp       DIR/mbpp/mbpp.jsonl               evaluated: task_ids 11-510 (the test split); few-shot:
//                                                task_ids 2, 3, 4 in order (the MBPP paper's prompt)
//
// A prompt is the few-shot examples, each GenProblem::solved followed by "\n\n", then the
// evaluated problem's GenProblem::prompt. Templates (see each descriptor in src/eval/gen_tasks.cpp):
//   gsm8k:     "Question: {question}\nAnswer:"  solved: + " {answer}" (with its <<calc>> notes and
//              "#### N"; lm-eval's gsm8k)
//   math500:   "Problem:\n{problem}\n\nSolution:"  solved: + " {solution}" (Minerva / lm-eval
//              minerva_math)
//   humaneval: the record's prompt (signature and docstring)
//   mbpp:      "You are an expert Python programmer, and here is your task: {text} Your code should
//              pass these tests:\n\n{test 1}\n{test 2}\n{test 3}\n[BEGIN]\n"  solved: + "{code}\n[DONE]"
//              (lm-eval's mbpp; '\r\n' in the file's code is written '\n')
//
// Chat prompts (`fbt eval --prompt-format chat`, math tasks only): the problem is one user turn,
// GenProblem::user, rendered by the model's chat template with a generation prompt:
//   gsm8k:     the question text;  math500: the problem text
// Few-shot examples, if asked for, come first as earlier user/assistant turns (user, solution).
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fbt/data/chat_template.h"
#include "fbt/eval/tasks.h"

namespace fbt {

/// How a completion is judged.
enum class AnswerCheck {
  Gsm8kNumber,  ///< extract_gsm8k_answer == the reference number (answer_extraction.h)
  MathBoxed,    ///< extract_boxed_answer, math_answers_equal to the reference
  Program,      ///< program_prefix + completion + tests exits 0 in the sandbox (sandbox.h)
};

/// One problem of a generation task.
struct GenProblem {
  std::string id;              ///< the record's id (task_id, unique_id) or its 1-based record number
  std::string prompt;          ///< the problem as the model continues it
  std::string solved;          ///< prompt + reference solution: the problem as a few-shot example
  std::string user;            ///< math tasks: the problem as a chat user message ("" for code tasks)
  std::string solution;        ///< math tasks: the reference solution, a few-shot chat example's reply
  std::string reference;       ///< Gsm8kNumber / MathBoxed: the reference final answer
  std::string program_prefix;  ///< Program: the text before the completion in the checked program
  std::string tests;           ///< Program: the text after the completion (asserts, check call)
};

/// Records [begin, end) of a file; a negative index counts from the end (Python slicing), and
/// indices are clamped to the file.
struct RecordRange {
  static constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();
  int64_t begin = 0;
  int64_t end = kEnd;
};

/// Everything that makes a generation task.
struct GenTaskSpec {
  std::string name;     ///< the `fbt eval` task name
  std::string summary;  ///< one line for --help
  std::string path;     ///< record file, relative to the data directory
  RecordFormat format = RecordFormat::JsonLines;
  RecordRange evaluated;      ///< the records evaluated, in file order
  std::string fewshot_path;   ///< few-shot pool file; empty: the pool comes from `path`
  RecordRange pool;           ///< the pool's records (of fewshot_path, else of path)
  bool fixed_shots = false;   ///< true: the first `shots` of the pool, in order; false: drawn per
                              ///< problem with fewshot_indices (eval_mc.h)
  int64_t default_shots = 0;  ///< when --shots is not given
  /// The completion ends before the first of these (generation also stops at EOS).
  std::vector<std::string> stop;
  AnswerCheck check = AnswerCheck::Gsm8kNumber;
  bool sampled = false;  ///< true: n samples per temperature, pass@k (code); false: greedy Pass@1
  /// Builds the problem of one record; may throw fbt::Error or nlohmann::json::exception
  /// (load_gen_task adds the file and record number).
  std::function<GenProblem(const nlohmann::json& record)> to_problem;
};

/// A loaded task: the evaluated problems and the few-shot pool, disjoint by construction.
struct GenTaskData {
  std::vector<GenProblem> problems;
  std::vector<GenProblem> pool;
};

/// The built-in generation tasks, in the order of `fbt eval --help`.
const std::vector<GenTaskSpec>& builtin_gen_tasks();

/// The built-in generation task called `name`, or nullptr.
const GenTaskSpec* find_gen_task(const std::string& name);

/// Reads the task's records (read_records) and builds its problems and pool. Throws fbt::Error
/// naming the file (and record number) when a file is missing or malformed or a range is empty.
GenTaskData load_gen_task(const GenTaskSpec& task, const std::string& data_dir);

/// The prompt text of problems[item]: `shots` pool examples (fixed_shots: the first ones; else
/// fewshot_indices(pool size, shots, seed, item)), each `solved` + "\n\n", then its `prompt`.
/// Throws fbt::Error if shots < 0 or exceeds the pool.
std::string build_gen_prompt(const GenTaskSpec& task, const GenTaskData& data, int64_t item, int64_t shots,
                             uint64_t seed);

/// Throws fbt::Error naming --prompt-format unless `task` has chat prompts (the math tasks; the
/// code tasks continue a program).
void check_chat_task(const GenTaskSpec& task);

/// The chat messages of problems[item] (`--prompt-format chat`): the same `shots` pool examples
/// as build_gen_prompt, each a user turn (its `user`) and an assistant turn (its `solution`),
/// then one user turn with the problem's `user`. Throws fbt::Error as build_gen_prompt and
/// check_chat_task do.
std::vector<ChatMessage> build_gen_chat(const GenTaskSpec& task, const GenTaskData& data, int64_t item, int64_t shots,
                                        uint64_t seed);

}  // namespace fbt
