// Chat templates: a conversation (OpenAI "messages") -> token ids, with the assistant tokens marked
// for the SFT loss.
//
// fbt renders the chat formats it knows natively instead of running Jinja (no maintained C++ Jinja
// engine is packaged for Debian). An imported model's template (tokenizer_config.json's
// chat_template, kept in RUNDIR/tokenizer/chat_template.jinja) is recognised by its markers, and
// the tests check that fbt's rendering equals transformers' apply_chat_template of the same
// template text, ids included (tests/fixtures/chat_templates):
//   chatml  <|im_start|>{role}\n{content}<|im_end|>\n per message; generation prompt
//           <|im_start|>assistant\n. A template that adds a default system message when the first
//           message is not a system one (SmolLM2, Qwen2.5) has it taken from its text.
//   llama3  {bos}<|start_header_id|>{role}<|end_header_id|>\n\n{content, trimmed}<|eot_id|>;
//           generation prompt <|start_header_id|>assistant<|end_header_id|>\n\n (Meta-Llama-3-Instruct).
//   fbt     the native template of models trained by fbt (their tokenizers have no chat tokens):
//           document prefix, then "System: {content}\n\n" (if any), "User: {content}\n\n",
//           "Assistant: " + {content} + EOS. EOS ends the assistant turn, so, as between
//           documents, the position after it is plain (model.doc_separator_id).
// Any other template is refused with an error naming its file; `--chat-template NAME` overrides
// the detection.
//
// Tokenization: with an HF tokenizer the whole rendered text is tokenized at once, as
// apply_chat_template(tokenize=True) does (special tokens are matched in the text), so a message
// that starts with whitespace can share a token with its header (SmolLM2: "\n" + "  hi" gives
// "\n ", " hi"). The scored tokens are those whose bytes overlap an assistant message's content or
// its end-of-turn token (<|im_end|>, <|eot_id|>, EOS): one rule for a token that straddles the
// header and the reply, it is scored, as transformers' return_assistant_tokens_mask (TRL's
// assistant-only loss) marks it. The tests compare text, ids and mask with transformers
// (tests/fixtures/chat_templates). fbt's own tokenizers (the fbt template) tokenize each piece on
// its own, so the generation prompt "Assistant: " ends in the tokens every SFT reply followed.
// Role headers, the text after the end token and all other messages are context only.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fbt/data/tokenizer.h"

namespace fbt {

/// One chat message: role "system", "user" or "assistant" and its text.
struct ChatMessage {
  std::string role;
  std::string content;
};

/// The messages of an OpenAI-style array [{"role": ..., "content": "..."}] (`origin` names it in
/// errors). Throws fbt::Error naming `origin` and the index for a message that is not an object,
/// lacks a string role or content, has a role other than system/user/assistant, or a system
/// message after the first; and for an empty array.
std::vector<ChatMessage> chat_messages_from_json(const nlohmann::json& messages, const std::string& origin);

/// A rendered conversation: ids [N] and, per id, whether the SFT loss scores it.
struct RenderedChat {
  std::vector<int64_t> ids;
  std::vector<uint8_t> scored;  ///< 1 for assistant content and its end-of-turn token
  /// The rendered text (HF's apply_chat_template(tokenize=False)); the fbt template shows EOS as
  /// nothing, as decode does.
  std::string text;
};

/// The chat formats fbt renders (see the file comment).
enum class ChatFormat { ChatML, Llama3, Fbt };

class ChatTemplate {
 public:
  /// The template of `tokenizer`. `name` "auto" (or empty): an HF tokenizer's chat_template
  /// recognised by its markers (chatml, llama3), the fbt template for fbt's own tokenizers;
  /// "chatml", "llama3" or "fbt" force one. `origin` names the template's file in errors. Throws
  /// fbt::Error naming `origin` for an HF tokenizer without a template or with one fbt does not
  /// render (asking for --chat-template), for a forced format whose special tokens the tokenizer
  /// lacks (naming the token), or for an unknown `name`.
  static ChatTemplate for_tokenizer(const Tokenizer& tokenizer, const std::string& name, const std::string& origin);

  ChatFormat format() const { return format_; }
  /// "chatml", "llama3" or "fbt".
  std::string name() const;
  /// The token that ends an assistant turn: generation stops after it (<|im_end|>, <|eot_id|>, EOS).
  int64_t end_of_turn_id() const { return end_of_turn_; }
  /// The default system message the template adds when the first message is not a system one
  /// ("" if none).
  const std::string& default_system() const { return default_system_; }

  /// Renders `messages` (chat_messages_from_json's rules). With `add_generation_prompt` the text
  /// ends with the header of a new assistant turn (the prompt a reply continues). Throws fbt::Error
  /// for an empty list.
  RenderedChat render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

 private:
  ChatTemplate(const Tokenizer& tokenizer, ChatFormat format) : tokenizer_(&tokenizer), format_(format) {}
  const Tokenizer* tokenizer_;
  ChatFormat format_;
  int64_t end_of_turn_ = -1;
  std::string default_system_;
};

}  // namespace fbt
