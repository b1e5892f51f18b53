// Hugging Face BPE tokenizers (tokenizer.json), read and applied by fbt itself: byte-level ones
// (GPT-2, Llama-3, Qwen2/3, SmolLM) and SentencePiece-style ones with byte fallback (the Metaspace
// form transformers builds for Llama 2 / Mistral / TinyLlama and for GGUF "llama" tokenizers),
// and the fbt tokenizer directory an imported model carries.
//
// Encode follows HF tokenizers' Tokenizer::encode(text, add_special_tokens=true):
//   1. added tokens (tokenizer.json "added_tokens") are cut out of the raw text first — leftmost
//      longest, those with normalized=false before normalization, the others after; single_word
//      tokens only between non-alphanumeric characters, lstrip/rstrip take the whitespace beside
//      them along; special tokens are matched too (HF's default, encode_special_tokens=false);
//   2. the rest is normalized (null or NFC) and pre-tokenized (hf_pretokenizer.h);
//   3. each pre-token goes through the BPE model: its bytes in the ByteLevel alphabet (a
//      SentencePiece-style BPE: its characters, a character the vocab lacks as its "<0xNN>" byte
//      tokens with byte_fallback, else the unk token), merged by lowest merge rank, leftmost first
//      (HF's Word::merge_all); with ignore_merges (Llama-3) a pre-token that is itself in the vocab
//      is one token;
//   4. the post-processor adds a BOS when it is a TemplateProcessing "<bos> $A" (alone or in a
//      Sequence with ByteLevel), unless tokenizer_config.json's add_bos_token says otherwise.
// The tests compare ids with HF tokenizers' on fixtures made by its own trainer
// (tests/fixtures/hf_tokenizers/make_fixtures.py).
//
// Decode is the ByteLevel decoder: each token's characters mapped back to bytes (a token with a
// character outside the ByteLevel alphabet, e.g. an added token, as its UTF-8), the bytes made
// valid as Rust's String::from_utf8_lossy does; or the SentencePiece-style one (Metaspace, or a
// Sequence of Replace "▁" -> " ", ByteFallback, Fuse, Strip): "▁" as a space, runs of "<0xNN>"
// tokens as their bytes (one U+FFFD per token when the run is not UTF-8), one leading space
// stripped. As for fbt's other tokenizers, the BOS, EOS and PAD
// ids decode to nothing; other special tokens decode to their text (HF's skip_special_tokens=false).
// Ids below vocab_size() that no token has (the padding rows of a model's embedding) decode to "".
// Input that is not valid UTF-8 (HF takes Rust strings, which always are) is first repaired the
// same way, so each maximal malformed subsequence encodes as U+FFFD.
//
// Not supported (fbt::Error naming the file and field): model types other than BPE, BPE dropout,
// byte_fallback with a ByteLevel decoder, continuing_subword_prefix / end_of_word_suffix,
// normalizers other than null and NFC (so not the legacy Prepend + Replace form of Llama 2's own
// tokenizer.json), pre-tokenizers other than Split / Digits / ByteLevel / Sequence / Metaspace,
// other decoders, post-processors that add tokens after the text.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fbt/data/tokenizer.h"

namespace fbt {

/// The special ids of an HF tokenizer as fbt records them (-1: none).
struct HfSpecialIds {
  int64_t bos = -1, eos = -1, pad = -1;
  bool add_bos = false;  ///< encode-time BOS: documents start with it (Tokenizer::document_prefix)
};

class HfBpeTokenizer : public Tokenizer {
 public:
  /// Parses tokenizer.json's text `json_text` (`origin` names it in errors) for a model whose
  /// embedding has `model_vocab` rows: every token id must be below it. fbt::Error naming
  /// `origin` and the field for bad JSON or anything unsupported (see the file comment).
  static std::unique_ptr<HfBpeTokenizer> from_text(const std::string& json_text, const std::string& origin,
                                                   int64_t model_vocab, const HfSpecialIds& specials,
                                                   std::string chat_template = "");
  /// The tokenizer of an fbt tokenizer or data directory whose meta.json (`meta_path`) holds the
  /// "hf_bpe" block `meta`: DIR/<model> (sha256 checked against model_sha256), the ids and
  /// add_bos, and DIR/<chat_template> when named.
  static std::unique_ptr<HfBpeTokenizer> from_dir(const std::string& dir, const nlohmann::json& meta,
                                                  const std::string& meta_path);
  /// The tokenizer of HF's tokenizer.json content `hf_tokenizer` and tokenizer_config.json content
  /// `hf_tokenizer_config` (or null), for a model of `model_vocab` rows: special ids by
  /// hf_special_ids, the chat template if tokenizer_config.json's chat_template is a string.
  /// Errors name `source`/tokenizer.json or `source`/tokenizer_config.json (`source`: the model
  /// directory, or the file the two were made from) and the field.
  static std::unique_ptr<HfBpeTokenizer> from_hf(const nlohmann::json& hf_tokenizer,
                                                 const nlohmann::json& hf_tokenizer_config, int64_t model_vocab,
                                                 const std::string& source);
  /// A tokenizer.json file on its own (fbt prepare --tokenizer-model FILE): from_hf with the
  /// tokenizer_config.json beside it, if any; vocab_size = its largest token id + 1 (an imported
  /// model's padded vocab comes with its run's tokenizer directory instead).
  static std::unique_ptr<HfBpeTokenizer> from_file(const std::string& path);
  ~HfBpeTokenizer() override;

  std::vector<int64_t> encode(std::string_view text) const override;
  /// encode(text), and in `prefixed` (one flag per id) whether the token starts with the space a
  /// Metaspace pre-tokenizer put before a segment (bytes_of spells it; the text does not have it).
  std::vector<int64_t> encode_marking_prefixes(std::string_view text, std::vector<bool>& prefixed) const;
  std::string decode(const std::vector<int64_t>& ids) const override;
  /// decode without the decoder's Strip step (Tokenizer::decode_continuation).
  std::string decode_continuation(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override;
  int64_t bos_id() const override;
  int64_t eos_id() const override;
  /// The pad id; the EOS id when the tokenizer has no pad token (meta.json records pad_id -1).
  int64_t pad_id() const override;
  /// {BOS} when the tokenizer adds one (Llama-3), else {} (GPT-2, Qwen, SmolLM add nothing).
  std::vector<int64_t> document_prefix() const override;
  std::string type() const override { return "hf_bpe"; }
  /// type, vocab_size, bos_id, eos_id, pad_id (-1 if none), add_bos, model ("tokenizer.json"),
  /// model_sha256 and, when there is one, chat_template ("chat_template.jinja").
  nlohmann::json meta() const override;
  std::vector<std::pair<std::string, std::string>> files() const override;

  /// The Jinja chat template of tokenizer_config.json, verbatim; empty if none.
  const std::string& chat_template() const;
  /// The id of the token (added or in the BPE vocab) spelled `content` in tokenizer.json, or -1.
  int64_t token_id(const std::string& content) const;
  /// The bytes token `id` stands for (an added token: its content), as encode() consumed them:
  /// bytes_of each id of encode(text), concatenated, give normalize(text), with one space more
  /// wherever encode_marking_prefixes marks a token (a SentencePiece-style token spells "▁" as a
  /// space and "<0xNN>" as its byte). Throws fbt::Error for an id
  /// outside [0, vocab_size()).
  const std::string& bytes_of(int64_t id) const;
  /// `text` after the tokenizer's normalizer (NFC where tokenizer.json asks for it; else unchanged).
  std::string normalize(std::string_view text) const;

 private:
  struct Model;
  explicit HfBpeTokenizer(std::unique_ptr<const Model> model);
  std::vector<int64_t> encode_piece(const std::string& piece) const;
  std::string decode_impl(const std::vector<int64_t>& ids, bool strip) const;
  std::unique_ptr<const Model> model_;
};

/// The special ids of `hf_tokenizer` (tokenizer.json content) given `hf_tokenizer_config`
/// (tokenizer_config.json content, or null): bos_token / eos_token / pad_token as strings or
/// {"content": ...} objects, looked up among the tokens; add_bos_token if it is a boolean, else
/// whether the post-processor adds a BOS (whose id then is the BOS). Throws fbt::Error naming
/// `config_origin` (or `tokenizer_origin`, for the post-processor) and the field for a token that
/// does not exist, a missing eos_token, or an unsupported post-processor.
HfSpecialIds hf_special_ids(const nlohmann::json& hf_tokenizer, const nlohmann::json& hf_tokenizer_config,
                            const std::string& tokenizer_origin, const std::string& config_origin);

/// Writes an fbt tokenizer directory for an imported model: DIR/tokenizer.json (hf_tokenizer),
/// DIR/chat_template.jinja (tokenizer_config.json's chat_template, if a string) and DIR/meta.json
/// ({"tokenizer": the HfBpeTokenizer's meta()}, vocab_size = model_vocab). Everything is checked
/// (HfBpeTokenizer::from_hf) before DIR is created. Returns the meta block, which the
/// checkpoint records. Used by `fbt import` from HF directories and from GGUF files.
nlohmann::json write_hf_tokenizer_dir(const std::string& dir, const nlohmann::json& hf_tokenizer,
                                      const nlohmann::json& hf_tokenizer_config, int64_t model_vocab);

}  // namespace fbt
