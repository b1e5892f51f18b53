// Tokenizers behind one interface: byte-level (bits-per-byte work), sentencepiece BPE, and
// Hugging Face byte-level BPE (hf_tokenizer.h, for imported models).
//
// Byte tokenizer ids: 0..255 are the bytes themselves, then PAD = 256, BOS = 257, EOS = 258
// (vocab 259). It round-trips any byte string exactly, UTF-8 or not.
//
// BPE tokenizer: a sentencepiece BPE model file (tokenizer.model, the standard ModelProto),
// read and applied by fbt itself. (Debian's libsentencepiece embeds protobuf-lite 3.14 and cannot
// run in a process that also loads libtorch's libprotobuf 3.21, so it is not called in-process.)
// Encode and decode follow sentencepiece's BPE algorithm and its identity normalizer; the tests
// compare them with spm_encode / spm_decode. Training runs sentencepiece's own trainer, the
// `spm_train` program (Debian package "sentencepiece"). Models trained here have model_type=bpe,
// byte_fallback, ids UNK = 0, BOS = 1, EOS = 2, PAD = 3, "\n" as a user-defined piece (id 4), the
// 256 byte pieces <0x00>..<0xFF> (ids 5..260), the corpus' characters, then the learned merges
// (so the vocab must exceed 261 + the number of distinct characters); identity normalization, no dummy prefix,
// whitespace kept. So every valid UTF-8 string round-trips exactly, except that U+2581 ("\xE2\x96\x81", sentencepiece's
// space mark) decodes as a space. Invalid UTF-8 cannot round-trip: like sentencepiece, each malformed byte becomes
// U+FFFD
// ("\xEF\xBF\xBD") before encoding (no crash, no error).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fbt/util/utf8.h"  // is_valid_utf8: the strings a BPE tokenizer round-trips

namespace fbt {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// Text -> ids, without BOS/EOS. Never throws for arbitrary bytes (see file comment).
  virtual std::vector<int64_t> encode(std::string_view text) const = 0;
  /// Ids -> text; BOS/EOS/PAD decode to nothing. Throws fbt::Error for an id outside
  /// [0, vocab_size()).
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  /// Ids that continue a text (generated tokens) -> their text: decode, except that a tokenizer
  /// whose decoder strips the space its pre-tokenizer put before the text (SentencePiece-style HF
  /// tokenizers: "▁Paris" alone decodes as "Paris") keeps it, so "The capital of France is" +
  /// decode_continuation(ids) reads " Paris" (llama.cpp prints it so; HF's decode drops it).
  virtual std::string decode_continuation(const std::vector<int64_t>& ids) const { return decode(ids); }

  virtual int64_t vocab_size() const = 0;
  virtual int64_t bos_id() const = 0;
  virtual int64_t eos_id() const = 0;
  virtual int64_t pad_id() const = 0;
  /// "byte", "bpe" or "hf_bpe" (the meta.json "tokenizer.type").
  virtual std::string type() const = 0;
  /// The ids a document starts with, put before a prompt: fbt's training streams separate
  /// documents by EOS, so {eos_id()} for fbt's own tokenizers (HfBpeTokenizer: its BOS or nothing).
  virtual std::vector<int64_t> document_prefix() const { return {eos_id()}; }
  /// The files the tokenizer's directory holds beside meta.json: {file name, bytes}.
  virtual std::vector<std::pair<std::string, std::string>> files() const { return {}; }

  /// The dataset meta.json "tokenizer" block: type, vocab_size, bos_id, eos_id, pad_id; BPE adds
  /// unk_id, model (file name inside the data dir) and model_sha256.
  virtual nlohmann::json meta() const;

  /// The tokenizer of a prepared data dir: reads DIR/meta.json and, for BPE, DIR/tokenizer.model
  /// (for hf_bpe DIR/tokenizer.json and the chat template; HfBpeTokenizer::from_dir), checked
  /// against meta's sha256, vocab size and special ids. Throws fbt::Error naming the file or field
  /// at fault.
  static std::unique_ptr<Tokenizer> load(const std::string& data_dir);
};

class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int64_t kPad = 256, kBos = 257, kEos = 258, kVocab = 259;

  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return kVocab; }
  int64_t bos_id() const override { return kBos; }
  int64_t eos_id() const override { return kEos; }
  int64_t pad_id() const override { return kPad; }
  std::string type() const override { return "byte"; }
};

/// The BPE vocab sizes BpeTokenizer::train accepts: 4 specials + 256 byte pieces + "\n" + at
/// least one more piece, and at most 2^24.
constexpr int64_t kMinBpeVocab = 262, kMaxBpeVocab = int64_t{1} << 24;

/// Settings for BpeTokenizer::train.
struct BpeTrainOptions {
  int64_t vocab_size = 4096;          // requested; fewer if the corpus cannot fill it
  uint64_t seed = 1337;               // picks the training sample when it is capped
  int64_t max_sentences = 2'000'000;  // training sample cap (lines)
  int64_t max_sentence_bytes = 4096;  // longer lines are cut into pieces of at most this
  int num_threads = 2;
};

/// What BpeTokenizer::train did to the corpus before spm_train saw it, and what spm_train said.
struct BpeTrainReport {
  int64_t lines = 0;       ///< non-empty lines of the documents
  int64_t long_lines = 0;  ///< lines longer than max_sentence_bytes, each cut into pieces
  int64_t pieces = 0;      ///< training lines after cutting (lines - long_lines + their pieces)
  int64_t sampled = 0;     ///< training lines given to spm_train: pieces, or max_sentences of them
  std::string spm_log;     ///< spm_train's output (warnings and errors: it runs with --minloglevel=1)
};

class BpeTokenizer : public Tokenizer {
 public:
  /// Trains on `documents` (split into lines, "\n" being its own piece) by running spm_train on
  /// a temp file. Throws fbt::Error if vocab_size is outside [262, 2^24], spm_train cannot be run,
  /// or it fails (with the tail of its log; e.g. a vocab too small for the corpus' characters).
  /// If `report` is given, it receives the line counts (long lines cut, sample taken) and spm_train's log.
  static std::unique_ptr<BpeTokenizer> train(const std::vector<std::string>& documents, const BpeTrainOptions& options,
                                             BpeTrainReport* report = nullptr);
  /// Loads a sentencepiece model file. Throws fbt::Error naming `path` if it cannot be read or
  /// parsed, is not a BPE model with identity normalization (no precompiled charsmap, whitespace
  /// not as suffix, no UNUSED pieces), or lacks UNK, BOS, EOS or PAD.
  static std::unique_ptr<BpeTokenizer> from_file(const std::string& path);
  /// Loads a serialized sentencepiece ModelProto; `origin` names it in error messages.
  static std::unique_ptr<BpeTokenizer> from_serialized(std::string proto, const std::string& origin);

  ~BpeTokenizer() override;

  /// Writes the serialized model (a regular sentencepiece .model file) to `path`.
  void save(const std::string& path) const;
  /// The serialized sentencepiece ModelProto (the bytes save() writes).
  const std::string& serialized() const { return proto_; }

  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override;
  int64_t bos_id() const override;
  int64_t eos_id() const override;
  int64_t pad_id() const override;
  int64_t unk_id() const;
  /// The model's settings that change valid UTF-8 text on the way through encode and decode, as
  /// "name=value" (add_dummy_prefix=true, remove_extra_whitespaces=true, byte_fallback=false);
  /// empty for models trained by fbt (train()), which round-trip every valid UTF-8 string.
  std::vector<std::string> text_changing_settings() const;
  std::string type() const override { return "bpe"; }
  nlohmann::json meta() const override;
  std::vector<std::pair<std::string, std::string>> files() const override { return {{"tokenizer.model", proto_}}; }

 private:
  struct Model;
  BpeTokenizer(std::unique_ptr<const Model> model, std::string proto);
  std::unique_ptr<const Model> model_;
  std::string proto_;
};

}  // namespace fbt
