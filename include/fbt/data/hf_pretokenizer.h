// The text stages of a Hugging Face BPE tokenizer before its model (tokenizer.json "normalizer" and
// "pre_tokenizer"): NFC by ICU; the Split / Digits / ByteLevel pre-tokenizers of byte-level BPEs
// with PCRE2's Unicode regexes (UTF + UCP), and the Metaspace pre-tokenizer of SentencePiece-style
// BPEs, following HF tokenizers' pre_tokenizers/{split,digits,byte_level,metaspace}.rs and
// NormalizedString::split.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace fbt {

/// `text` (valid UTF-8) in Unicode Normalization Form C (ICU's unorm2 NFC instance; HF's NFC
/// normalizer is Rust's unicode-normalization: the two agree up to their Unicode versions).
std::string nfc(std::string_view text);

/// `text` with each maximal malformed UTF-8 subsequence replaced by U+FFFD, as Rust's
/// String::from_utf8_lossy does (what HF's ByteLevel decoder applies to the decoded bytes).
std::string utf8_lossy(std::string_view text);

/// A compiled PCRE2 pattern (UTF, UCP: \s \w \d and POSIX classes are Unicode-aware, as in
/// Oniguruma, which HF tokenizers uses). Oniguruma's \s also matches U+0085 (NEL), which PCRE2
/// 10.42's \s does not: the one difference for the patterns of Llama-3, Qwen2 and GPT-2.
class Regex {
 public:
  /// Compiles `pattern`, literally if `literal` (HF's Split with a String pattern); throws
  /// fbt::Error naming `origin` with PCRE2's message and offset if it does not compile.
  Regex(const std::string& pattern, bool literal, const std::string& origin);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  /// The non-empty, non-overlapping leftmost matches of the pattern in `text` (valid UTF-8), as
  /// [begin, end) byte offsets; an empty match advances one character and yields nothing.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
};

/// tokenizer.json's "pre_tokenizer": for a byte-level BPE, Split (Regex or String pattern; behavior
/// Isolated, Removed, MergedWithPrevious, MergedWithNext or Contiguous; invert), Digits
/// (individual_digits: each \p{N} character alone, else runs of them), ByteLevel (add_prefix_space;
/// use_regex: GPT-2's pattern, Isolated), or a Sequence of them with ByteLevel last; for a
/// SentencePiece-style BPE (Llama 2, Mistral, TinyLlama, and the GGUF "llama" tokenizers), a
/// Metaspace alone: every ' ' becomes `replacement` (U+2581 "▁"), then `replacement` is put before
/// a segment that does not already start with it (prepend_scheme "always"; "first": only the
/// segment at the start of the text, i.e. not one after an added token; "never"), then with split
/// true the text is cut before each `replacement` (MergedWithNext). Other types, a byte-level
/// sequence without ByteLevel last, or a ByteLevel before another step, are refused.
class HfPreTokenizer {
 public:
  /// Parses `pre_tokenizer` (`origin` names the file in errors, which also name the field, e.g.
  /// pre_tokenizer.pretokenizers[0].behavior).
  static HfPreTokenizer from_json(const nlohmann::json& pre_tokenizer, const std::string& origin);

  /// The pre-tokens of `text` (valid UTF-8), empty ones dropped as HF does. Byte-level: raw bytes
  /// (the ByteLevel alphabet mapping is the BPE model's business). Metaspace: the text with its
  /// spaces as `replacement`, prefixed when the scheme says so; `at_start` tells whether `text`
  /// begins the whole text (HF's offsets_original().0 == 0), which "first" needs.
  std::vector<std::string> split(std::string_view text, bool at_start = true) const;

  /// Whether split(text, at_start) puts a `replacement` before `text` that `text` does not have
  /// (the one difference between the bytes a Metaspace tokenizer's tokens spell and the text).
  bool prepends(std::string_view text, bool at_start) const;

  /// True for a Metaspace pre-tokenizer (a SentencePiece-style BPE), false for a byte-level one.
  bool metaspace() const { return metaspace_ != nullptr; }

 private:
  struct Metaspace {
    std::string replacement;
    enum class Prepend { Always, First, Never } prepend = Prepend::Always;
    std::shared_ptr<const Regex> split;  // the replacement, literally; null: split false
  };
  enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
  struct Step {
    std::shared_ptr<const Regex> regex;  // null: ByteLevel's add_prefix_space
    Behavior behavior = Behavior::Isolated;
    bool invert = false;
  };
  void add(const nlohmann::json& p, const std::string& origin, const std::string& field, bool last);
  static std::vector<std::string> apply(const Step& step, std::string_view piece);
  std::vector<Step> steps_;
  std::shared_ptr<const Metaspace> metaspace_;
};

}  // namespace fbt
