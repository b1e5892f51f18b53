// Incremental detokenization with stop strings (see completion_text.h).
#include "fbt/serve/completion_text.h"

#include <algorithm>

#include "fbt/infer/stream_text.h"

namespace fbt {
namespace {

/// The characters of the stable prefix of `decoded`.
int64_t stable_length(const std::string& decoded) { return utf8_length(decoded.substr(0, stable_prefix(decoded))); }

/// The length of the longest proper prefix of a stop string that `text[..end)` ends with.
size_t held_back(const std::string& text, size_t end, const std::vector<std::string>& stop) {
  size_t hold = 0;
  for (const auto& s : stop)
    for (size_t k = std::min(s.size() - 1, end); k > hold; --k)
      if (text.compare(end - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  return hold;
}

}  // namespace

std::vector<int64_t> text_offsets(const Tokenizer& tokenizer, const std::vector<int64_t>& tokens) {
  std::vector<int64_t> offsets(tokens.size(), 0);
  for (size_t i = 1; i < tokens.size(); ++i)
    offsets[i] = stable_length(tokenizer.decode(std::vector<int64_t>(tokens.begin(), tokens.begin() + i)));
  return offsets;
}

std::string ChoiceText::push(int64_t token) {
  if (stopped_) return "";
  offsets_.push_back(stable_length(decoded_));
  tokens_.push_back(token);
  decoded_ = tokenizer_->decode_continuation(tokens_);
  size_t cut = std::string::npos;
  for (const auto& s : stop_) cut = std::min(cut, decoded_.find(s));
  size_t end = 0;
  if (cut != std::string::npos) {
    stopped_ = true;
    end = cut;
  } else {
    end = stable_prefix(decoded_);
    end -= held_back(decoded_, end, stop_);
  }
  if (end <= text_.size()) return "";
  std::string piece = decoded_.substr(text_.size(), end - text_.size());
  text_ += piece;
  return piece;
}

int64_t ChoiceText::next_offset() const { return stable_length(decoded_); }

std::string ChoiceText::finish() {
  if (stopped_ || decoded_.size() <= text_.size()) return "";
  std::string piece = decoded_.substr(text_.size());
  text_ = decoded_;
  return piece;
}

}  // namespace fbt
