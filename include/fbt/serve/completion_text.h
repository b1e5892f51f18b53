// The text of one generated choice while its tokens arrive (`fbt serve`): incremental
// detokenization into whole UTF-8 characters, cut at OpenAI's text-level stop strings, and the
// character offsets of the legacy completions logprobs ("text_offset").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "fbt/data/tokenizer.h"
#include "fbt/util/utf8.h"

namespace fbt {

/// text_offset of each of `tokens` [T]: the characters (utf8_length) of the stable decoded text
/// (stable_prefix) of the tokens before it; offsets[0] = 0.
std::vector<int64_t> text_offsets(const Tokenizer& tokenizer, const std::vector<int64_t>& tokens);

/// One choice's text. push() each generated token; it returns the text that became final: whole
/// characters that cannot be the beginning of a stop string. Once the decoded text contains a
/// stop string, the choice is stopped: its text ends right before the earliest occurrence, the
/// token that completed it is the last one kept, and later pushes are ignored.
class ChoiceText {
 public:
  /// `stop`: non-empty stop strings (none: no stop).
  ChoiceText(const Tokenizer& tokenizer, std::vector<std::string> stop)
      : tokenizer_(&tokenizer), stop_(std::move(stop)) {}

  /// Adds a generated token; returns the newly final text (often "").
  std::string push(int64_t token);
  /// At the end of the sequence (not stopped): returns the text held back so far, which becomes
  /// final. Returns "" after a stop.
  std::string finish();

  bool stopped() const { return stopped_; }
  /// The final text so far (the whole choice after finish() or a stop).
  const std::string& text() const { return text_; }
  /// The tokens kept: every token pushed up to and including the one that completed a stop string.
  const std::vector<int64_t>& tokens() const { return tokens_; }
  /// text_offset of each kept token within this choice's text (text_offsets' definition).
  const std::vector<int64_t>& offsets() const { return offsets_; }
  /// text_offset a token after the kept ones has (the reported stop token's).
  int64_t next_offset() const;

 private:
  const Tokenizer* tokenizer_;
  std::vector<std::string> stop_;
  std::vector<int64_t> tokens_, offsets_;
  std::string decoded_;  ///< decode(tokens_)
  std::string text_;     ///< the final text: a prefix of decoded_
  bool stopped_ = false;
};

}  // namespace fbt
