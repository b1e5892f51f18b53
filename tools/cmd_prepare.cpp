// `fbt prepare`: the CLI front of fbt::prepare_dataset (corpus -> tokenizer, shards, meta.json).
#include <iostream>
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "fbt/data/prepare.h"
#include "fbt/util/error.h"

namespace fbt::cli {

void add_prepare_command(CLI::App& app) {
  auto opts = std::make_shared<PrepareOptions>();
  CLI::App* cmd = app.add_subcommand(
      "prepare", "Tokenize a corpus into DIR/{train.bin,val.bin,meta.json[,tokenizer.model|tokenizer.json]}");
  cmd->add_option("--input", opts->inputs,
                  "Corpus: text files, directories (recursive) or *.jsonl; documents are "
                  "separated by EOS")
      ->required();
  cmd->add_option("--out", opts->out_dir, "Output data directory")->required();
  cmd->add_option("--tokenizer", opts->tokenizer, "bpe (sentencepiece) or byte (256 bytes + specials)")
      ->check(CLI::IsMember({"bpe", "byte"}))
      ->capture_default_str();
  CLI::Option* vocab = cmd->add_option("--vocab-size", opts->vocab_size, "BPE vocab size to train")
                           ->capture_default_str()
                           ->check(integer_range(kMinBpeVocab, kMaxBpeVocab));
  cmd->add_option("--val-fraction", opts->val_fraction, "Fraction of documents held out")
      ->capture_default_str()
      ->check(number_range(0, 1, true, true));
  cmd->add_option("--seed", opts->seed, "Seed for the split and the tokenizer's training sample")
      ->capture_default_str()
      ->check(seed_value());
  cmd->add_option("--tokenizer-model", opts->tokenizer_model,
                  "Reuse a tokenizer instead of training one: a sentencepiece .model, a Hugging Face "
                  "tokenizer.json, or a directory holding one (an imported run's RUNDIR/tokenizer keeps the "
                  "model's vocab size)")
      ->excludes(vocab);
  cmd->add_option("--text-field", opts->text_field, "JSONL field holding the text")->capture_default_str();
  cmd->add_option("--doc-split", opts->doc_split,
                  "Documents of text files: file (one per file) or blank (blank-line blocks)")
      ->check(CLI::IsMember({"file", "blank"}))
      ->capture_default_str();
  cmd->add_option("--conversations", opts->conversations,
                  "Prepare conversations for SFT instead of a text corpus: JSONL in the format messages "
                  "({\"messages\": [{\"role\", \"content\"}]}), alpaca or gsm8k, rendered by the chat template "
                  "of --tokenizer-model (an imported run's RUNDIR/tokenizer) with a loss mask on the assistant tokens")
      ->check(CLI::IsMember({"messages", "alpaca", "gsm8k"}));
  cmd->add_option("--chat-template", opts->chat_template,
                  "With --conversations: auto (the tokenizer's own template; fbt's native one for fbt tokenizers), "
                  "chatml, llama3 or fbt")
      ->check(CLI::IsMember({"auto", "chatml", "llama3", "fbt"}))
      ->capture_default_str();
  cmd->add_flag("--force", opts->force, "Overwrite a different dataset already in --out");
  cmd->callback([opts, vocab] {
    check_output_dir("--out", opts->out_dir);
    if (opts->tokenizer == "byte" && vocab->count() > 0)
      throw Error("--vocab-size applies to --tokenizer bpe only (the byte tokenizer has 259 ids)");
    prepare_dataset(*opts, std::cout);
  });
}

}  // namespace fbt::cli
