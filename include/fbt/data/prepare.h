// `fbt prepare`: corpus files -> tokenizer + train/val token shards + meta.json in a data dir.
//
// meta.json (format "fbt-dataset", format_version 1):
//   tokenizer: {type, vocab_size, bos_id, eos_id, pad_id[, unk_id, model, model_sha256]} (hf_bpe:
//              hf_tokenizer.h's meta: add_bos, model tokenizer.json[, chat_template])
//   splits:    {train|val: {file, tokens, bytes, documents, sha256}} — tokens counts the shard
//              (EOS separators included); bytes is the UTF-8 length of the text the split's tokens
//              decode to, separators excluded (the denominator for bits per byte)
//   sources:   [{path, sha256, bytes, documents}]
//   options:   {tokenizer, vocab_size, tokenizer_model, text_field, doc_split, val_fraction, seed}
//   lossy_documents: documents whose decode(encode(text)) != text (invalid UTF-8 under BPE)
//   conversations: a conversation dataset for SFT (sft_data.h), with --conversations
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fbt {

struct PrepareOptions {
  std::vector<std::string> inputs;  // text files, directories (recursive), *.jsonl
  std::string out_dir;
  std::string tokenizer = "bpe";    // "bpe" or "byte"
  int64_t vocab_size = 4096;        // BPE training only
  std::string tokenizer_model;      // reuse this tokenizer instead of training: a sentencepiece model,
                                    // an HF tokenizer.json, or a directory holding an fbt tokenizer
                                    // (meta.json: a run's tokenizer/, a data dir) or a tokenizer.json
  std::string text_field = "text";  // JSONL field holding a document
  std::string doc_split = "file";   // "file": one document per file; "blank": blank-line blocks
  double val_fraction = 0.1;        // in (0, 1)
  uint64_t seed = 1337;
  bool force = false;                  // overwrite a different dataset already in out_dir
  std::string conversations;           // "" = a text corpus; messages, alpaca or gsm8k = JSONL conversations
                                       // rendered by the tokenizer's chat template (sft_data.h)
  std::string chat_template = "auto";  // with conversations: ChatTemplate::for_tokenizer's name
};

/// One input file as read.
struct SourceFile {
  std::string path;  // absolute
  std::string sha256;
  int64_t bytes = 0;
  int64_t documents = 0;
};

struct Corpus {
  std::vector<std::string> documents;  // non-empty, in input order
  std::vector<SourceFile> sources;
};

/// Reads `inputs` in order; a directory contributes its regular files recursively in sorted path
/// order (names starting with '.' skipped). *.jsonl files give one document per record (string
/// field `text_field`); other files one document each (doc_split "file") or one per block of
/// lines separated by blank (whitespace-only) lines ("blank"). Empty documents are dropped.
/// With `conversations` (a format of read_conversations) every file is JSONL and each document a
/// conversation (a JSON array of messages).
/// Throws fbt::Error naming the input if it is missing, given twice, has no text, or (JSONL) has a
/// bad line or field.
Corpus read_corpus(const std::vector<std::string>& inputs, const std::string& text_field, const std::string& doc_split,
                   const std::string& conversations = "");

struct TrainValSplit {
  std::vector<std::string> train, val;
};

/// Splits by document: round(val_fraction * n) documents, clamped to [1, n-1], drawn with a
/// seeded std::mt19937_64 go to val; both splits keep input order. A single document is cut by
/// byte position at a line boundary near (1 - val_fraction) of its length (at a UTF-8 character
/// boundary if it has no usable newline). Throws fbt::Error if that leaves a split empty.
TrainValSplit split_train_val(std::vector<std::string> documents, double val_fraction, uint64_t seed);

/// The whole pipeline: validate options, read the corpus, refuse a different dataset in out_dir
/// unless force, split, build the tokenizer, encode, write tokenizer.model (BPE), train.bin,
/// val.bin and meta.json (temp files renamed into place last). If out_dir already holds this
/// very dataset (same options and sources, files intact) nothing is rewritten. Progress goes to
/// `log`. Returns the meta.json content. Throws fbt::Error (naming the flag, file or field) for
/// bad input, before anything in out_dir is overwritten.
nlohmann::json prepare_dataset(const PrepareOptions& options, std::ostream& log);

}  // namespace fbt
