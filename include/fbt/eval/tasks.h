// Few-shot multiple-choice and cloze tasks (SPEC §8): one small descriptor per task.
//
// Each task reads its original file under a data directory (`fbt eval --data-dir DIR` or the
// environment variable FBT_DATA_DIR), laid out as shared/data (shared/data/MANIFEST.md):
//
//   arc_easy       DIR/arc/ARC-Easy-test.json          JSON array (LLM-Adapters), 2,376 items
//   arc_challenge  DIR/arc/ARC-Challenge-test.json     JSON array (LLM-Adapters), 1,172 items
//   piqa           DIR/piqa/valid.jsonl                JSON lines {goal, sol1, sol2}, 1,838 items
//                  DIR/piqa/valid-labels.lst           one label (0/1) per line
//   hellaswag      DIR/hellaswag/hellaswag_val.txt     llama.cpp text, 6 lines per item, 9,037 items
//   winogrande     DIR/winogrande/winogrande-dev.json  JSON array (LLM-Adapters), 1,267 items
//   lambada        DIR/lambada/lambada_test.jsonl      JSON lines {text} (OpenAI's), 5,153 items
//
// Prompts follow lm-evaluation-harness v0.4 (its task YAMLs; see each descriptor in
// src/eval/tasks.cpp). Choice i of a document is scored as the request
// (contexts[i], kTargetDelimiter + choices[i]); a few-shot example is the document's gold request
// written out, contexts[gold] + kTargetDelimiter + choices[gold].
//
// Few-shot pool: none of these files has a train split, so the last `fewshot_pool` records of each
// file (100 for every task) form the pool and are never evaluated; the evaluated items are the
// records before them, in file order. Scores are therefore over all records but the last 100,
// not the full published sets.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fbt/data/records.h"

namespace fbt {

/// lm-eval's default target_delimiter: put between a context and the choice that continues it.
inline constexpr const char* kTargetDelimiter = " ";

/// One evaluated item: choice i continues contexts[i]. The contexts are all equal except for
/// partial evaluation (WinoGrande), where each choice changes the context and the choices share
/// one continuation.
struct Doc {
  std::vector<std::string> contexts;  ///< per choice: the prompt (without few-shot examples)
  std::vector<std::string> choices;   ///< per choice: the continuation, without kTargetDelimiter
  int64_t gold = 0;                   ///< index of the correct choice
};

/// A reported metric (lm-eval's names and definitions).
enum class Metric {
  Acc,         ///< "acc": the choice with the highest summed log-likelihood is gold
  AccNorm,     ///< "acc_norm": the highest log-likelihood / characters of choices[i] is gold
               ///< (lm-evaluation-harness: len() of the choice string, i.e. Unicode code points)
  AccBytes,    ///< "acc_bytes": the same with UTF-8 bytes of choices[i] (fbt's former acc_norm)
  GreedyAcc,   ///< "acc" of a cloze task (one choice): greedy argmax reproduces every token
  Perplexity,  ///< "perplexity": exp(−mean over items of the continuation's summed log-likelihood)
};

/// The metric's name in tables and JSON ("acc", "acc_norm", "acc_bytes", "perplexity").
std::string metric_name(Metric metric);

/// Everything that makes a task: where its records are, how one record becomes a Doc (the
/// prompt template and the gold index), what is reported and which records form the few-shot pool.
struct TaskSpec {
  std::string name;     ///< the `fbt eval` task name, e.g. "arc_easy"
  std::string summary;  ///< one line for --help
  std::string path;     ///< record file, relative to the data directory
  RecordFormat format = RecordFormat::JsonLines;
  std::string labels_path;  ///< optional file of one integer per line, set as record["label"]
  /// Builds the Doc of one record; may throw fbt::Error or nlohmann::json::exception for a
  /// malformed record (load_docs adds the file and record number).
  std::function<Doc(const nlohmann::json& record)> to_doc;
  std::vector<Metric> metrics;
  int64_t fewshot_pool = 100;  ///< the last this many records: few-shot pool, never evaluated
};

/// The built-in tasks, in the order of `fbt eval --help`.
const std::vector<TaskSpec>& builtin_tasks();

/// The built-in task called `name`; throws fbt::Error listing the task names otherwise.
const TaskSpec& find_task(const std::string& name);

/// Reads DIR/task.path (and DIR/task.labels_path) and builds one Doc per record, in file order.
/// Throws fbt::Error naming the file (and record number) when a file is missing or malformed,
/// the label file has a different number of lines, or a Doc has no choices, contexts and
/// choices of different lengths or a gold index out of range.
std::vector<Doc> load_docs(const TaskSpec& task, const std::string& data_dir);

}  // namespace fbt
