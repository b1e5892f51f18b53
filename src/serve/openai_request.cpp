// Parsing and checking of the OpenAI request bodies of `fbt serve` (see openai_request.h).
#include "fbt/serve/openai_request.h"

#include <random>

#include "fbt/serve/api_error.h"
#include "fbt/util/json_fields.h"

namespace fbt {

std::string openai_param(RequestField field) {
  switch (field) {
    case RequestField::Prompt: return "prompt";
    case RequestField::MaxNewTokens: return "max_tokens";
    case RequestField::FusedPasses: return "fbt_fused_passes";
    case RequestField::Temperature: return "temperature";
    case RequestField::TopK: return "top_k";
    case RequestField::TopP: return "top_p";
    case RequestField::TopN: return "logprobs";
  }
  throw Error("internal: request field without an API name");
}
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxChoices = 128, kMaxStops = 16, kMaxLogprobs = 20, kMaxFusedPasses = 64;
constexpr double kMaxApiTemperature = 2.0;  // OpenAI's documented range is [0, 2]

/// `j` in an error message: a scalar as JSON (80 characters at most), a list or an object by its
/// kind (printing a deeply nested value would recurse once per level).
std::string brief(const json& j) {
  return j.is_array() ? "a list" : j.is_object() ? "an object" : j.dump().substr(0, 80);
}

json parse_body(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    throw ApiError(400, "the request body is not valid JSON: " + json_error_brief(e));
  }
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object, got " + brief(j));
  return j;
}

/// The value of `key`, or null when absent or JSON null (OpenAI clients send null for "default").
const json* field(const json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

/// Reads optional field `key` into `out` with read_field's type check; false when absent.
template <class T>
bool read_optional(const json& j, const char* key, T& out) {
  const json* v = field(j, key);
  if (v == nullptr) return false;
  try {
    // read_field's message prints the value: a list or object is printed empty (see brief).
    read_field(v->is_array() ? json::array() : v->is_object() ? json::object() : *v, key, out);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), key);
  }
  return true;
}

void require(bool ok, const char* key, const std::string& message) {
  if (!ok) throw bad_field(key, message);
}

/// Refuses options that would change the output but that fbt does not implement: present, not
/// null and not their neutral value.
void refuse_unsupported(const json& j, int64_t n) {
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    double v = 0;
    if (read_optional(j, key, v)) require(v == 0, key, "only 0 is supported");
  }
  if (const json* v = field(j, "logit_bias"))
    require(v->is_object() && v->empty(), "logit_bias", "is not supported (give {} or leave it out)");
  if (field(j, "suffix") != nullptr) throw bad_field("suffix", "is not supported");
  int64_t best_of = n;
  if (read_optional(j, "best_of", best_of)) require(best_of == n, "best_of", "only best_of = n is supported");
}

std::vector<std::string> read_stop(const json& j) {
  const json* v = field(j, "stop");
  if (v == nullptr) return {};
  std::vector<std::string> stop;
  if (v->is_string()) {
    stop.push_back(v->get<std::string>());
  } else {
    require(v->is_array(), "stop", "expected a string or a list of strings, got " + brief(*v));
    for (const auto& s : *v) {
      if (!s.is_string()) throw bad_field("stop", "expected a list of strings, got an element " + brief(s));
      stop.push_back(s.get<std::string>());
    }
  }
  require(static_cast<int64_t>(stop.size()) <= kMaxStops, "stop",
          "at most " + std::to_string(kMaxStops) + " stop strings (got " + std::to_string(stop.size()) + ")");
  for (const auto& s : stop) require(!s.empty(), "stop", "stop strings must not be empty");
  return stop;
}

/// The shared fields; params.max_tokens stays `default_max_tokens` unless the body gives one
/// (under `max_tokens`, or for chat also `max_completion_tokens`).
GenerationParams read_params(const json& j, const ServedModel& model, int64_t default_max_tokens, bool chat) {
  GenerationParams p;
  DecodeMode mode = model.default_mode;
  int64_t fused_passes = model.default_fused_passes;
  std::string mode_name;
  if (read_optional(j, "fbt_mode", mode_name)) {
    try {
      mode = enum_from_string<DecodeMode>(mode_name, "fbt_mode");
    } catch (const Error& e) {
      throw ApiError(400, e.what(), "fbt_mode");
    }
  }
  if (read_optional(j, "fbt_fused_passes", fused_passes))
    require(fused_passes >= 1 && fused_passes <= kMaxFusedPasses, "fbt_fused_passes",
            "must be in [1, " + std::to_string(kMaxFusedPasses) + "] (got " + std::to_string(fused_passes) + ")");
  p.decoding = Decoding::make(mode, fused_passes, "fbt_fused_passes");  // valid: k >= 1 was checked
  p.sampling.temperature = 1.0;                                         // OpenAI's default
  if (read_optional(j, "temperature", p.sampling.temperature))
    require(temperature_in_range(p.sampling.temperature) && p.sampling.temperature <= kMaxApiTemperature, "temperature",
            "must be 0 (greedy) or in [" + std::to_string(kMinTemperature) + ", 2] (got " +
                std::to_string(p.sampling.temperature) + ")");
  if (read_optional(j, "top_p", p.sampling.top_p))
    require(p.sampling.top_p > 0 && p.sampling.top_p <= 1, "top_p",
            "must be in (0, 1] (got " + std::to_string(p.sampling.top_p) + ")");
  if (read_optional(j, "top_k", p.sampling.top_k)) {
    const auto problem = top_k_problem(p.sampling.top_k);
    require(problem.empty(), "top_k", problem);
    if (p.sampling.top_k == -1) p.sampling.top_k = 0;  // the same "all" as 0
  }
  if (!read_optional(j, "seed", p.sampling.seed)) p.sampling.seed = std::random_device{}();
  p.max_tokens = default_max_tokens;
  const char* max_key = chat && field(j, "max_completion_tokens") != nullptr ? "max_completion_tokens" : "max_tokens";
  if (read_optional(j, max_key, p.max_tokens))
    require(p.max_tokens >= 0, max_key, "must be >= 0 (got " + std::to_string(p.max_tokens) + ")");
  if (read_optional(j, "n", p.n))
    require(p.n >= 1 && p.n <= kMaxChoices, "n",
            "must be in [1, " + std::to_string(kMaxChoices) + "] (got " + std::to_string(p.n) + ")");
  p.stop = read_stop(j);
  read_optional(j, "ignore_eos", p.ignore_eos);
  read_optional(j, "stream", p.stream);
  if (const json* options = field(j, "stream_options")) {
    require(options->is_object(), "stream_options", "expected an object, got " + brief(*options));
    read_optional(*options, "include_usage", p.include_usage);
  }
  refuse_unsupported(j, p.n);
  return p;
}

/// Refuses a request naming a model the server does not serve, as OpenAI does (API reference,
/// "Error codes": 404, type invalid_request_error, code "model_not_found"; vLLM's
/// OpenAIServing._check_model too). An absent, null or empty `model` means the served one, as in
/// vLLM. Checked before the other fields: a client that asks for another model learns that first.
void check_model(const json& j, const ServedModel& model) {
  std::string name;
  if (!read_optional(j, "model", name) || name.empty() || name == model.name) return;
  throw ApiError(404,
                 "model: '" + name + "' does not exist here; this server serves '" + model.name +
                     "' (GET /v1/models lists it; leave model out to use it)",
                 "model", "invalid_request_error", "model_not_found");
}

/// One token-id prompt from a JSON array of integers in [0, vocab).
std::vector<int64_t> read_token_ids(const json& ids, int64_t vocab) {
  std::vector<int64_t> out;
  for (const auto& id : ids) {
    if (!id.is_number_integer()) throw bad_field("prompt", "token ids must be integers, got " + brief(id));
    const bool in_range = id.is_number_unsigned() ? id.get<uint64_t>() < static_cast<uint64_t>(vocab)
                                                  : id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab;
    if (!in_range)
      throw bad_field("prompt",
                      "token id " + id.dump() + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    out.push_back(id.get<int64_t>());
  }
  require(!out.empty(), "prompt", "a token-id prompt must not be empty");
  return out;
}

/// Fills req.prompts / prompt_texts from "prompt": a string, a list of strings, a list of token
/// ids, or a list of lists of token ids.
void read_prompts(const json& j, const Tokenizer& tokenizer, CompletionRequest& req) {
  const json* prompt = field(j, "prompt");
  require(prompt != nullptr, "prompt", "is required");
  auto add_text = [&](const std::string& text) {
    std::vector<int64_t> ids = tokenizer.document_prefix();
    for (int64_t id : tokenizer.encode(text)) ids.push_back(id);
    require(!ids.empty(), "prompt", "the prompt is empty (and this tokenizer has no document prefix)");
    req.prompts.push_back(std::move(ids));
    req.prompt_texts.push_back(text);
  };
  auto add_ids = [&](const json& ids) {
    req.prompts.push_back(read_token_ids(ids, tokenizer.vocab_size()));
    req.prompt_texts.push_back(tokenizer.decode(req.prompts.back()));
  };
  const std::string expected =
      "expected a string, a list of strings, a list of token ids or a list of lists of "
      "token ids";
  if (prompt->is_string()) return add_text(prompt->get<std::string>());
  require(prompt->is_array() && !prompt->empty(), "prompt", expected + ", got " + brief(*prompt));
  const auto& first = prompt->front();
  if (first.is_number()) return add_ids(*prompt);
  for (const auto& item : *prompt) {
    require(item.type() == first.type() && (item.is_string() || item.is_array()), "prompt",
            expected + " (the elements differ in type or are neither strings nor lists)");
    if (item.is_string())
      add_text(item.get<std::string>());
    else
      add_ids(item);
  }
}

/// Throws ApiError naming `param` unless `length` prompt tokens fit the context: at most
/// context − 1 when tokens are to be generated, at most context for scoring alone.
void check_prompt_fits(int64_t length, int64_t context, bool generates, const char* param) {
  const int64_t limit = generates ? context - 1 : context;
  require(length <= limit, param,
          "the prompt is " + std::to_string(length) + " tokens but the model context is " + std::to_string(context) +
              " tokens; at most " + std::to_string(limit) + (generates ? " leave room to generate" : " can be scored"));
}

/// `messages` with array contents ([{"type": "text", "text": ...}, ...], OpenAI's content parts)
/// joined into strings; other shapes are left for chat_messages_from_json to refuse.
json with_text_contents(json messages) {
  if (!messages.is_array()) return messages;
  for (auto& m : messages) {
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    std::string text;
    for (const auto& part : m["content"]) {
      const bool text_part = part.is_object() && part.contains("type") && part["type"] == "text" &&
                             part.contains("text") && part["text"].is_string();
      require(text_part, "messages", "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
      text += part["text"].get<std::string>();
    }
    m["content"] = text;
  }
  return messages;
}

}  // namespace

CompletionRequest parse_completion_request(const std::string& body, const ServedModel& model) {
  const json j = parse_body(body);
  check_model(j, model);
  CompletionRequest req;
  req.params = read_params(j, model, /*default_max_tokens=*/16, /*chat=*/false);
  read_optional(j, "echo", req.echo);
  if (read_optional(j, "logprobs", req.logprobs))
    require(req.logprobs >= 0 && req.logprobs <= kMaxLogprobs, "logprobs",
            "must be in [0, " + std::to_string(kMaxLogprobs) + "] (got " + std::to_string(req.logprobs) + ")");
  require(req.params.max_tokens > 0 || req.echo, "max_tokens", "must be >= 1 (0 only with echo: scoring the prompt)");
  read_prompts(j, *model.tokenizer, req);
  for (const auto& p : req.prompts)
    check_prompt_fits(static_cast<int64_t>(p.size()), model.context, req.params.max_tokens > 0, "prompt");
  return req;
}

ChatRequest parse_chat_request(const std::string& body, const ServedModel& model) {
  const json j = parse_body(body);
  check_model(j, model);
  if (model.chat == nullptr) throw bad_field("messages", "this model has no chat template; use /v1/completions");
  ChatRequest req;
  req.params = read_params(j, model, /*default_max_tokens=*/-1, /*chat=*/true);
  require(req.params.max_tokens != 0, field(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens",
          "must be >= 1");
  bool logprobs = false;
  read_optional(j, "logprobs", logprobs);
  require(!logprobs && field(j, "top_logprobs") == nullptr, "logprobs",
          "log-probabilities are not supported on /v1/chat/completions (use /v1/completions)");
  const json* messages = field(j, "messages");
  require(messages != nullptr, "messages", "is required");
  try {
    req.prompt = model.chat->render(chat_messages_from_json(with_text_contents(*messages), "request body"), true).ids;
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "messages");
  }
  const auto length = static_cast<int64_t>(req.prompt.size());
  check_prompt_fits(length, model.context, /*generates=*/true, "messages");
  if (req.params.max_tokens < 0) req.params.max_tokens = model.context - length;
  return req;
}

}  // namespace fbt
