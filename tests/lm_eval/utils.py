"""Offline datasets for lm-evaluation-harness's copies of fbt's tasks (the fbt_*.yaml next to this file).

Each task's `custom_dataset` reads the same local file `fbt eval` reads and builds the same documents
(src/eval/tasks.cpp, re-implemented here so that the harness checks fbt's parsing too):

  fbt_arc_easy   DIR/arc/ARC-Easy-test.json           LLM-Adapters JSON array -> question, choices, gold
  fbt_piqa       DIR/piqa/valid.jsonl + valid-labels.lst -> goal, sol1, sol2, label
  fbt_hellaswag  DIR/hellaswag/hellaswag_val.txt      llama.cpp text, 6 lines an item -> query, choices, label
  fbt_lambada    DIR/lambada/lambada_test.jsonl       OpenAI's {text}

DIR is `--metadata '{"data_dir": DIR}'` or else the environment variable FBT_DATA_DIR (the one
`fbt eval` reads), laid out as shared/data. The split is "test" and holds every record but the last
100, which `fbt eval` keeps as its few-shot pool (include/fbt/eval/tasks.h), so that lm-eval's
`--limit N` and `fbt eval --limit N` score the same first N items. There is no training split:
these tasks are for 0-shot runs (fbt draws its few-shot examples with its own generator anyway).
Nothing is downloaded.
"""
import json
import os
import re

import datasets

FEWSHOT_POOL = 100  # TaskSpec::fewshot_pool, include/fbt/eval/tasks.h


def _data_dir(kwargs):
    path = kwargs.get("data_dir") or os.environ.get("FBT_DATA_DIR")
    if not path:
        raise ValueError("fbt tasks: pass --metadata '{\"data_dir\": DIR}' or set FBT_DATA_DIR "
                         "(a directory laid out as shared/data)")
    if not os.path.isdir(path):
        raise ValueError(f"fbt tasks: data directory {path!r} does not exist")
    return path


def _lines(path):
    """The lines of `path` as C++'s std::getline gives them: '\\n'-separated, one final '\\r' removed,
    no empty line after a final '\\n' (tasks.cpp for_each_line)."""
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _jsonl(path):
    return [json.loads(line) for line in _lines(path) if line.strip()]


def _test_split(docs):
    """DatasetDict {"test": every doc but the few-shot pool at the end}."""
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(docs[:-FEWSHOT_POOL])})


def _fields_between(text, markers):
    """The texts between consecutive markers; each marker is the first occurrence after the previous
    one (tasks.cpp fields_between)."""
    if not text.startswith(markers[0]):
        raise ValueError(f"text does not start with {markers[0]!r}")
    fields, start = [], len(markers[0])
    for marker in markers[1:]:
        at = text.find(marker, start)
        if at < 0:
            raise ValueError(f"text lacks {marker!r}")
        fields.append(text[start:at])
        start = at + len(marker)
    return fields


def _one_based(answer, prefix):
    """The 0-based index of an answer written "<prefix>N" (tasks.cpp one_based_answer)."""
    if not answer.startswith(prefix) or not answer[len(prefix):].isdigit() or int(answer[len(prefix):]) < 1:
        raise ValueError(f"answer {answer!r} is not {prefix}N")
    return int(answer[len(prefix):]) - 1


def arc_easy(**kwargs):
    """ARC-Easy in the LLM-Adapters layout (tasks.cpp arc_doc): instruction = "Please choose the
    correct answer to the question: Q\\n\\nAnswer1: A Answer2: B ...\\n\\nAnswer format: answer1/...",
    answer = "answerN" -> {question, choices, gold}."""
    with open(os.path.join(_data_dir(kwargs), "arc", "ARC-Easy-test.json"), encoding="utf-8") as f:
        records = json.load(f)
    docs = []
    for r in records:
        text = r["instruction"]
        format_marker = "\n\nAnswer format: "
        n_choices = text[text.rindex(format_marker) + len(format_marker):].count("/") + 1
        markers = ["Please choose the correct answer to the question: ", "\n\nAnswer1: "]
        markers += [f" Answer{i}: " for i in range(2, n_choices + 1)] + [format_marker]
        fields = _fields_between(text, markers)
        docs.append({"question": fields[0], "choices": fields[1:], "gold": _one_based(r["answer"], "answer")})
    return _test_split(docs)


def piqa(**kwargs):
    """PIQA dev: {goal, sol1, sol2} with the label from the line of valid-labels.lst (tasks.cpp
    attach_labels)."""
    data_dir = _data_dir(kwargs)
    records = _jsonl(os.path.join(data_dir, "piqa", "valid.jsonl"))
    labels = [int(line) for line in _lines(os.path.join(data_dir, "piqa", "valid-labels.lst")) if line.strip()]
    if len(labels) != len(records):
        raise ValueError(f"piqa: {len(labels)} labels for {len(records)} records")
    return _test_split([{"goal": r["goal"], "sol1": r["sol1"], "sol2": r["sol2"], "label": label}
                        for r, label in zip(records, labels)])


def _hellaswag_preprocess(text):
    """lm-eval's hellaswag preprocess() (lm_eval/tasks/hellaswag/utils.py), as tasks.cpp
    hellaswag_preprocess: strip, " [title]" -> ". ", drop "[...]" tags, "  " -> " "."""
    text = text.strip().replace(" [title]", ". ")
    return re.sub("\\[.*?\\]", "", text).replace("  ", " ")


def hellaswag(**kwargs):
    """HellaSwag val in llama.cpp's text layout: per item a query line ("activity_label: ctx",
    already joined, so lm-eval's capitalisation of ctx_b cannot be applied), the label 0-3 and 4
    ending lines -> {query, choices, label}, all preprocessed."""
    lines = _lines(os.path.join(_data_dir(kwargs), "hellaswag", "hellaswag_val.txt"))
    if len(lines) % 6:
        raise ValueError(f"hellaswag: {len(lines)} lines, not a multiple of 6")
    docs = [{"query": _hellaswag_preprocess(lines[i]), "label": int(lines[i + 1]),
             "choices": [_hellaswag_preprocess(e) for e in lines[i + 2:i + 6]]}
            for i in range(0, len(lines), 6)]
    return _test_split(docs)


def lambada(**kwargs):
    """LAMBADA, OpenAI's test file: {text}; the YAML splits off the last word as lambada_openai does."""
    return _test_split([{"text": r["text"]} for r in _jsonl(os.path.join(_data_dir(kwargs), "lambada",
                                                                           "lambada_test.jsonl"))])
