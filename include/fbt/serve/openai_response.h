// The response bodies of `fbt serve` in the shapes of the OpenAI API reference: completion
// ("text_completion") and chat ("chat.completion", "chat.completion.chunk") objects, the legacy
// completions logprobs object, usage, and server-sent events (the SSE spec's "data:" lines, with
// OpenAI's closing "data: [DONE]").
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fbt/data/tokenizer.h"

namespace fbt {

/// What every response object of one request carries.
struct ResponseHeader {
  std::string id;        ///< "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;   ///< Unix time in seconds
  std::string model;     ///< the served model's name
  std::string fbt_mode;  ///< the decoding mode used, Decoding::label: "standard", "soft", "fused(2)"
};

/// A fresh header: id `prefix` + 24 random hex digits, created = now.
ResponseHeader make_header(const std::string& prefix, const std::string& model, const std::string& fbt_mode);

/// One token's entry of the legacy logprobs object.
struct TokenLogprob {
  int64_t token = 0;
  float logprob = 0;  ///< nats; NaN is written as null (the first prompt token has no prediction)
  std::vector<std::pair<int64_t, float>> top;  ///< the most likely (token, logprob), best first
  int64_t text_offset = 0;                     ///< characters before the token in the choice's text
};

/// The key of token `id` in "tokens" and "top_logprobs": its text decoded alone, or
/// "token_id:ID" (vLLM's return_tokens_as_token_ids spelling) when that text is not whole UTF-8
/// (a byte-fallback or byte-level fragment of a character decodes to U+FFFD or invalid bytes).
std::string logprob_key(const Tokenizer& tokenizer, int64_t id);

/// {"tokens": [each token's logprob_key], "token_logprobs": [...], "top_logprobs": [{logprob_key:
/// logprob} per token, null where the logprob is NaN], "text_offset": [...]}. Every entry of a
/// top_logprobs object has its own key: a token whose key an earlier, more likely one
/// took is written "token_id:ID", so logprobs=N gives N entries.
nlohmann::json legacy_logprobs(const std::vector<TokenLogprob>& entries, const Tokenizer& tokenizer);

/// {"prompt_tokens", "completion_tokens", "total_tokens"}.
nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

/// A completion choice {"index", "text", "logprobs" (null when `logprobs` is null), "finish_reason"
/// ("" is written as null: a stream chunk before the end)}.
nlohmann::json completion_choice(int64_t index, const std::string& text, nlohmann::json logprobs,
                                 const std::string& finish_reason);
/// A chat choice {"index", "message": {"role": "assistant", "content"}, "logprobs": null, "finish_reason"}.
nlohmann::json chat_choice(int64_t index, const std::string& content, const std::string& finish_reason);
/// A chat stream choice {"index", "delta", "logprobs": null, "finish_reason" ("" = null)}.
nlohmann::json chat_delta_choice(int64_t index, nlohmann::json delta, const std::string& finish_reason);

/// The response object: "text_completion" (chat = false) or "chat.completion" / with `chunk`
/// "chat.completion.chunk", with id, created, model, choices, fbt_mode, and usage unless it is null.
nlohmann::json response_object(const ResponseHeader& header, bool chat, bool chunk, nlohmann::json choices,
                               nlohmann::json usage);

/// `j` serialized; text that is not valid UTF-8 (a byte-level model can emit any bytes) is written
/// with U+FFFD instead of failing.
std::string dump_json(const nlohmann::json& j);

/// One server-sent event carrying `j`: "data: " + dump_json(j) + "\n\n".
std::string sse_event(const nlohmann::json& j);
/// OpenAI's end of stream: "data: [DONE]\n\n".
std::string sse_done();

}  // namespace fbt
