// The built-in few-shot tasks: record readers and one descriptor per task (lm-eval v0.4 prompts).
#include "fbt/eval/tasks.h"

#include <algorithm>
#include <filesystem>
#include <regex>

#include "fbt/data/records.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

/// Python's str.strip(): without leading and trailing ASCII whitespace.
std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t begin = s.find_first_not_of(ws);
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(ws) + 1 - begin);
}

/// Python's s.replace(from, to): every non-overlapping occurrence, left to right, in one pass.
std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size())
    out.append(s, pos, hit - pos).append(to);
  return out.append(s, pos, std::string::npos);
}

/// The texts between consecutive `markers` in `text`: text must start with markers[0], and each
/// later marker is the first occurrence after the previous one. Returns markers.size() - 1 fields;
/// text after the last marker is ignored. Throws fbt::Error naming a missing marker.
std::vector<std::string> fields_between(const std::string& text, const std::vector<std::string>& markers) {
  if (text.compare(0, markers[0].size(), markers[0]) != 0)
    throw Error("text does not start with \"" + markers[0] + "\"");
  std::vector<std::string> fields;
  size_t start = markers[0].size();
  for (size_t i = 1; i < markers.size(); ++i) {
    const size_t at = text.find(markers[i], start);
    if (at == std::string::npos) throw Error("text lacks \"" + markers[i] + "\"");
    fields.push_back(text.substr(start, at - start));
    start = at + markers[i].size();
  }
  return fields;
}

/// `text` as a decimal integer (digits only, at most 18), or -1.
int64_t parse_index(const std::string& text) {
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(text);
}

/// The 0-based index N-1 of an answer written "<prefix>N" (e.g. "answer3", "option1").
int64_t one_based_answer(const nlohmann::json& record, const std::string& prefix) {
  const std::string answer = record.at("answer").get<std::string>();
  const int64_t n = answer.compare(0, prefix.size(), prefix) == 0 ? parse_index(answer.substr(prefix.size())) : -1;
  if (n < 1) throw Error("answer \"" + answer + "\" is not " + prefix + "N");
  return n - 1;
}

/// lm-eval's HellaSwag preprocess(): strip, " [title]" -> ". ", drop "[...]" tags, "  " -> " ".
std::string hellaswag_preprocess(const std::string& text) {
  static const std::regex tag("\\[.*?\\]");
  const std::string titled = replace_all(strip(text), " [title]", ". ");
  return replace_all(std::regex_replace(titled, tag, ""), "  ", " ");
}

/// A Doc whose choices all continue the same context.
Doc shared_context(const std::string& context, std::vector<std::string> choices, int64_t gold) {
  Doc d;
  d.contexts.assign(choices.size(), context);
  d.choices = std::move(choices);
  d.gold = gold;
  return d;
}

/// ARC in the LLM-Adapters layout: instruction = "Please choose the correct answer to the
/// question: Q\n\nAnswer1: A Answer2: B ...\n\nAnswer format: answer1/answer2/...", answer =
/// "answerN". lm-eval arc_easy/arc_challenge: "Question: {{question}}\nAnswer:", " {{choice}}".
Doc arc_doc(const nlohmann::json& record) {
  const std::string text = record.at("instruction").get<std::string>();
  const std::string format_marker = "\n\nAnswer format: ";
  const size_t format_at = text.rfind(format_marker);
  if (format_at == std::string::npos) throw Error("instruction lacks \"" + format_marker + "\"");
  const std::string format = text.substr(format_at + format_marker.size());
  const auto n_choices = std::count(format.begin(), format.end(), '/') + 1;
  std::vector<std::string> markers{"Please choose the correct answer to the question: ", "\n\nAnswer1: "};
  for (int64_t i = 2; i <= n_choices; ++i) markers.push_back(" Answer" + std::to_string(i) + ": ");
  markers.push_back(format_marker);
  auto fields = fields_between(text, markers);  // question, then the choices
  const std::string question = fields.front();
  fields.erase(fields.begin());
  return shared_context("Question: " + question + "\nAnswer:", std::move(fields), one_based_answer(record, "answer"));
}

/// lm-eval piqa: "Question: {{goal}}\nAnswer:", choices [sol1, sol2], label from valid-labels.lst.
Doc piqa_doc(const nlohmann::json& r) {
  return shared_context("Question: " + r.at("goal").get<std::string>() + "\nAnswer:",
                        {r.at("sol1").get<std::string>(), r.at("sol2").get<std::string>()},
                        r.at("label").get<int64_t>());
}

/// lm-eval hellaswag: query = preprocess(activity_label + ": " + ctx), choices = the preprocessed
/// endings. The llama.cpp file holds "activity_label: ctx" already joined, so lm-eval's
/// capitalisation of ctx_b (the last part of ctx) cannot be applied: the context keeps its case.
Doc hellaswag_doc(const nlohmann::json& r) {
  std::vector<std::string> endings;
  for (const auto& e : r.at("endings")) endings.push_back(hellaswag_preprocess(e.get<std::string>()));
  return shared_context(hellaswag_preprocess(r.at("query").get<std::string>()), std::move(endings),
                        r.at("label").get<int64_t>());
}

/// WinoGrande in the LLM-Adapters layout: instruction = "Please choose the correct answer to fill
/// in the blank to complete the given sentence: S\n\nOption1: A Option2: B Answer format:
/// option1/option2", answer = "optionN". lm-eval winogrande (partial evaluation): choice i's
/// context is S up to the blank "_" with option i in it; both continue with the rest of S, stripped.
Doc winogrande_doc(const nlohmann::json& record) {
  const auto f =
      fields_between(record.at("instruction").get<std::string>(),
                     {"Please choose the correct answer to fill in the blank to complete the given sentence: ",
                      "\n\nOption1: ", " Option2: ", " Answer format: option1/option2"});
  const std::string& sentence = f[0];
  const size_t blank = sentence.find('_');
  if (blank == std::string::npos) throw Error("sentence has no blank \"_\": " + sentence);
  const std::string rest = strip(sentence.substr(blank + 1));
  Doc d;
  d.contexts = {sentence.substr(0, blank) + f[1], sentence.substr(0, blank) + f[2]};
  d.choices = {rest, rest};
  d.gold = one_based_answer(record, "option");
  return d;
}

/// lm-eval lambada_openai: context = the text up to its last ' ', continuation " " + last word.
Doc lambada_doc(const nlohmann::json& r) {
  const std::string text = r.at("text").get<std::string>();
  const size_t space = text.rfind(' ');
  if (space == std::string::npos) throw Error("text has no space to split off the last word");
  return shared_context(text.substr(0, space), {text.substr(space + 1)}, 0);
}

/// Sets record["label"] from line i of `path` (choice indices; blank lines are skipped).
void attach_labels(std::vector<nlohmann::json>& records, const std::string& path) {
  std::vector<int64_t> labels;
  for_each_record_line(path, [&](const std::string& line, int64_t number) {
    if (strip(line).empty()) return;
    labels.push_back(parse_index(line));
    if (labels.back() < 0)
      throw Error(path + ":" + std::to_string(number) + ": label \"" + line + "\" is not a choice index");
  });
  if (labels.size() != records.size())
    throw Error(path + " has " + std::to_string(labels.size()) + " labels but its records file has " +
                std::to_string(records.size()) + " records");
  for (size_t i = 0; i < records.size(); ++i) records[i]["label"] = labels[i];
}

}  // namespace

std::string metric_name(Metric metric) {
  switch (metric) {
    case Metric::Acc:
    case Metric::GreedyAcc: return "acc";
    case Metric::AccNorm: return "acc_norm";
    case Metric::AccBytes: return "acc_bytes";
    case Metric::Perplexity: return "perplexity";
  }
  throw Error("internal: metric without a name");
}

const std::vector<TaskSpec>& builtin_tasks() {
  using M = Metric;
  using F = RecordFormat;
  static const std::vector<TaskSpec> tasks{
      {"arc_easy",
       "ARC-Easy test (3-5 choices): acc, acc_norm, acc_bytes",
       "arc/ARC-Easy-test.json",
       F::JsonArray,
       "",
       arc_doc,
       {M::Acc, M::AccNorm, M::AccBytes}},
      {"arc_challenge",
       "ARC-Challenge test (3-5 choices): acc, acc_norm, acc_bytes",
       "arc/ARC-Challenge-test.json",
       F::JsonArray,
       "",
       arc_doc,
       {M::Acc, M::AccNorm, M::AccBytes}},
      {"piqa",
       "PIQA dev (2 choices): acc, acc_norm, acc_bytes",
       "piqa/valid.jsonl",
       F::JsonLines,
       "piqa/valid-labels.lst",
       piqa_doc,
       {M::Acc, M::AccNorm, M::AccBytes}},
      {"hellaswag",
       "HellaSwag val (4 endings): acc, acc_norm, acc_bytes",
       "hellaswag/hellaswag_val.txt",
       F::HellaSwagText,
       "",
       hellaswag_doc,
       {M::Acc, M::AccNorm, M::AccBytes}},
      {"winogrande",
       "WinoGrande 1.1 dev (2 options, partial evaluation): acc",
       "winogrande/winogrande-dev.json",
       F::JsonArray,
       "",
       winogrande_doc,
       {M::Acc}},
      {"lambada",
       "LAMBADA (OpenAI) test, last word: acc (greedy), perplexity",
       "lambada/lambada_test.jsonl",
       F::JsonLines,
       "",
       lambada_doc,
       {M::GreedyAcc, M::Perplexity}},
  };
  return tasks;
}

const TaskSpec& find_task(const std::string& name) {
  std::string names;
  for (const auto& t : builtin_tasks()) {
    if (t.name == name) return t;
    names += (names.empty() ? "" : ", ") + t.name;
  }
  throw Error("unknown task '" + name + "' (expected one of: " + names + ")");
}

std::vector<Doc> load_docs(const TaskSpec& task, const std::string& data_dir) {
  const std::string path = (std::filesystem::path(data_dir) / task.path).string();
  auto records = read_records(path, task.format);
  if (!task.labels_path.empty()) attach_labels(records, (std::filesystem::path(data_dir) / task.labels_path).string());
  std::vector<Doc> docs;
  for (size_t i = 0; i < records.size(); ++i) {
    const std::string where = path + ": record " + std::to_string(i + 1);
    Doc d;
    try {
      d = task.to_doc(records[i]);
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + ": " + e.what());
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
    if (d.choices.empty() || d.contexts.size() != d.choices.size())
      throw Error(where + ": " + std::to_string(d.contexts.size()) + " contexts for " +
                  std::to_string(d.choices.size()) + " choices");
    if (d.gold < 0 || d.gold >= static_cast<int64_t>(d.choices.size()))
      throw Error(where + ": gold index " + std::to_string(d.gold) + " is outside 0.." +
                  std::to_string(d.choices.size() - 1));
    docs.push_back(std::move(d));
  }
  return docs;
}

}  // namespace fbt
