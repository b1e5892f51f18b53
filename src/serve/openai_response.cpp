// OpenAI response objects and server-sent events (see openai_response.h).
#include "fbt/serve/openai_response.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

namespace fbt {

using json = nlohmann::json;

ResponseHeader make_header(const std::string& prefix, const std::string& model, const std::string& fbt_mode) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char hex[32];
  std::snprintf(hex, sizeof hex, "%016llx%08llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xFFFFFFFFull));
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return {prefix + hex, std::chrono::duration_cast<std::chrono::seconds>(now).count(), model, fbt_mode};
}

std::string logprob_key(const Tokenizer& tokenizer, int64_t id) {
  const std::string text = tokenizer.decode({id});
  if (is_valid_utf8(text) && text.find("\xEF\xBF\xBD") == std::string::npos) return text;
  return "token_id:" + std::to_string(id);
}

json legacy_logprobs(const std::vector<TokenLogprob>& entries, const Tokenizer& tokenizer) {
  json tokens = json::array(), logprobs = json::array(), tops = json::array(), offsets = json::array();
  for (const auto& e : entries) {
    tokens.push_back(logprob_key(tokenizer, e.token));
    offsets.push_back(e.text_offset);
    if (std::isnan(e.logprob)) {
      logprobs.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    logprobs.push_back(e.logprob);
    json top = json::object();
    for (const auto& [id, lp] : e.top) {
      const std::string key = logprob_key(tokenizer, id);
      top[top.contains(key) ? "token_id:" + std::to_string(id) : key] = lp;
    }
    tops.push_back(std::move(top));
  }
  return {{"tokens", tokens}, {"token_logprobs", logprobs}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

namespace {
json reason_json(const std::string& finish_reason) {
  return finish_reason.empty() ? json(nullptr) : json(finish_reason);
}
}  // namespace

json completion_choice(int64_t index, const std::string& text, json logprobs, const std::string& finish_reason) {
  return {{"index", index},
          {"text", text},
          {"logprobs", std::move(logprobs)},
          {"finish_reason", reason_json(finish_reason)}};
}

json chat_choice(int64_t index, const std::string& content, const std::string& finish_reason) {
  return {{"index", index},
          {"message", {{"role", "assistant"}, {"content", content}}},
          {"logprobs", nullptr},
          {"finish_reason", reason_json(finish_reason)}};
}

json chat_delta_choice(int64_t index, json delta, const std::string& finish_reason) {
  return {{"index", index},
          {"delta", std::move(delta)},
          {"logprobs", nullptr},
          {"finish_reason", reason_json(finish_reason)}};
}

json response_object(const ResponseHeader& header, bool chat, bool chunk, json choices, json usage) {
  json j = {{"id", header.id},
            {"object", !chat   ? "text_completion"
                       : chunk ? "chat.completion.chunk"
                               : "chat.completion"},
            {"created", header.created},
            {"model", header.model},
            {"choices", std::move(choices)},
            {"fbt_mode", header.fbt_mode}};
  if (!usage.is_null()) j["usage"] = std::move(usage);
  return j;
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace fbt
