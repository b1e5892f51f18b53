// The request parsing of `fbt serve` without a model: the byte tokenizer (one token per byte, EOS
// = 258 as the document prefix) and fbt's native chat template, context 32. Every refused body is
// a 400 whose param names the field at fault.
#include <gtest/gtest.h>

#include <functional>

#include "fbt/serve/api_error.h"
#include "fbt/serve/openai_request.h"

namespace fbt {
namespace {

class OpenAiRequest : public ::testing::Test {
 protected:
  OpenAiRequest() : chat_(ChatTemplate::for_tokenizer(bytes_, "fbt", "test")) {
    model_.name = "tiny";
    model_.tokenizer = &bytes_;
    model_.chat = &chat_;
    model_.context = 32;
    model_.default_mode = DecodeMode::Soft;
    model_.default_fused_passes = 3;
  }
  ByteTokenizer bytes_;
  ChatTemplate chat_;
  ServedModel model_;
};

/// The ApiError that parsing `body` throws (a test failure if none).
template <class Parse>
ApiError refusal(Parse parse, const std::string& body) {
  try {
    parse(body);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "");
}

/// A body the parser must refuse: the field it names and a part of its message.
struct Refused {
  std::string body, param, message;
};

/// Expects `parse` to refuse every case with a 400 invalid_request_error whose param is the case's
/// field and whose message holds the case's words.
template <class Parse>
void expect_refused(Parse parse, const std::vector<Refused>& cases) {
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body);
    const auto e = refusal(parse, c.body);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_EQ(e.param, c.param);
    EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
  }
}

TEST_F(OpenAiRequest, CompletionPromptsInEveryShape) {
  const int64_t eos = ByteTokenizer::kEos;
  auto text = parse_completion_request(R"({"prompt": "ab", "seed": 7})", model_);
  EXPECT_EQ(text.prompts, (std::vector<std::vector<int64_t>>{{eos, 'a', 'b'}}));  // document prefix + bytes
  EXPECT_EQ(text.prompt_texts, std::vector<std::string>{"ab"});
  EXPECT_EQ(text.params.max_tokens, 16);  // OpenAI's default
  EXPECT_EQ(text.params.sampling.temperature, 1.0);
  EXPECT_EQ(text.params.sampling.seed, 7u);
  EXPECT_EQ(text.params.decoding, Decoding{DecodeMode::Soft});  // the server's default mode (its k is fused's)
  EXPECT_EQ(text.logprobs, -1);
  auto texts = parse_completion_request(R"({"prompt": ["a", "bc"]})", model_);
  EXPECT_EQ(texts.prompts, (std::vector<std::vector<int64_t>>{{eos, 'a'}, {eos, 'b', 'c'}}));
  auto ids = parse_completion_request(R"({"prompt": [104, 105]})", model_);  // used as given: no prefix
  EXPECT_EQ(ids.prompts, (std::vector<std::vector<int64_t>>{{104, 105}}));
  EXPECT_EQ(ids.prompt_texts, std::vector<std::string>{"hi"});
  auto lists = parse_completion_request(R"({"prompt": [[1], [2, 3]]})", model_);
  EXPECT_EQ(lists.prompts, (std::vector<std::vector<int64_t>>{{1}, {2, 3}}));
  // An empty string is a prompt of the document prefix alone.
  EXPECT_EQ(parse_completion_request(R"({"prompt": ""})", model_).prompts, (std::vector<std::vector<int64_t>>{{eos}}));
}

TEST_F(OpenAiRequest, CompletionFieldsAreRead) {
  auto r = parse_completion_request(
      R"({"model": "tiny", "prompt": "a", "max_tokens": 0, "echo": true, "logprobs": 2, "temperature": 0,
          "top_p": 0.5, "top_k": -1, "n": 3, "stop": ["\n", "END"], "stream": true,
          "stream_options": {"include_usage": true}, "fbt_mode": "fused", "fbt_fused_passes": 2, "ignore_eos": true,
          "presence_penalty": 0, "logit_bias": {}, "best_of": 3, "user": "ignored"})",
      model_);
  EXPECT_EQ(r.params.max_tokens, 0);
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_EQ(r.params.sampling.temperature, 0.0);
  EXPECT_EQ(r.params.sampling.top_p, 0.5);
  EXPECT_EQ(r.params.sampling.top_k, 0);  // -1 = all
  EXPECT_EQ(r.params.n, 3);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.params.stream);
  EXPECT_TRUE(r.params.include_usage);
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_FALSE(parse_completion_request(R"({"prompt": "a"})", model_).params.ignore_eos);
  EXPECT_EQ(r.params.decoding, Decoding::fused(2));
  EXPECT_EQ(parse_completion_request(R"({"prompt": "a", "stop": "x", "max_tokens": null})", model_).params.stop,
            std::vector<std::string>{"x"});
}

TEST_F(OpenAiRequest, CompletionContextLimits) {
  // 31 tokens (EOS + 30 bytes) leave one to generate in a 32-token context; 32 fit only for scoring.
  const std::string b30(30, 'b'), b31(31, 'b');
  EXPECT_EQ(parse_completion_request(R"({"prompt": ")" + b30 + R"(", "max_tokens": 100})", model_).prompts[0].size(),
            31u);
  const auto full = R"({"prompt": ")" + b31 + R"(", "max_tokens": 0, "echo": true})";
  EXPECT_EQ(parse_completion_request(full, model_).prompts[0].size(), 32u);
  const auto e =
      refusal([&](const std::string& b) { parse_completion_request(b, model_); }, R"({"prompt": ")" + b31 + R"("})");
  EXPECT_EQ(e.param, "prompt");
  EXPECT_NE(std::string(e.what()).find("the prompt is 32 tokens but the model context is 32 tokens"), std::string::npos)
      << e.what();
}

TEST_F(OpenAiRequest, EveryRefusedCompletionNamesItsField) {
  expect_refused(
      [&](const std::string& b) { parse_completion_request(b, model_); },
      {
          {R"({"prompt": "a",)", "", "not valid JSON"},
          {R"(["prompt"])", "", "must be a JSON object"},
          {R"({})", "prompt", "is required"},
          {R"({"prompt": 5})", "prompt", "expected a string"},
          {R"({"prompt": []})", "prompt", "expected a string"},
          {R"({"prompt": ["a", 1]})", "prompt", "differ in type"},
          {R"({"prompt": [[]]})", "prompt", "must not be empty"},
          {R"({"prompt": [259]})", "prompt", "outside the vocabulary [0, 259)"},
          {R"({"prompt": [-1]})", "prompt", "outside the vocabulary"},
          {R"({"prompt": [1.5]})", "prompt", "must be integers"},
          {R"({"prompt": "a", "max_tokens": -1})", "max_tokens", "must be >= 0"},
          {R"({"prompt": "a", "max_tokens": 0})", "max_tokens", "0 only with echo"},
          {R"({"prompt": "a", "max_tokens": "5"})", "max_tokens", "expected an integer"},
          {R"({"prompt": "a", "n": 0})", "n", "must be in [1, 128]"},
          {R"({"prompt": "a", "ignore_eos": 1})", "ignore_eos", "expected true or false"},
          {R"({"prompt": "a", "n": 2.0})", "n", "expected an integer"},
          {R"({"prompt": "a", "temperature": 2.5})", "temperature", "must be 0 (greedy) or in"},
          {R"({"prompt": "a", "temperature": -1})", "temperature", "must be 0"},
          {R"({"prompt": "a", "temperature": "hot"})", "temperature", "expected a number"},
          {R"({"prompt": "a", "top_p": 0})", "top_p", "must be in (0, 1]"},
          {R"({"prompt": "a", "top_k": -2})", "top_k", "must be >= 1, or 0 or -1 for all tokens (got -2)"},
          {R"({"prompt": "a", "seed": -1})", "seed", "expected an integer in [0, 2^64-1]"},
          {R"({"prompt": "a", "stop": 3})", "stop", "expected a string or a list"},
          {R"({"prompt": "a", "stop": [""]})", "stop", "must not be empty"},
          {R"({"prompt": "a", "stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})", "stop",
           "at most 16"},
          {R"({"prompt": "a", "echo": 1})", "echo", "expected true or false"},
          {R"({"prompt": "a", "logprobs": true})", "logprobs", "expected an integer"},
          {R"({"prompt": "a", "logprobs": 21})", "logprobs", "must be in [0, 20]"},
          {R"({"prompt": "a", "stream": "yes"})", "stream", "expected true or false"},
          {R"({"prompt": "a", "stream_options": 1})", "stream_options", "expected an object"},
          {R"({"prompt": "a", "fbt_mode": "turbo"})", "fbt_mode", "unknown value 'turbo'"},
          {R"({"prompt": "a", "fbt_mode": 1})", "fbt_mode", "expected a string"},
          {R"({"prompt": "a", "fbt_fused_passes": 0})", "fbt_fused_passes", "must be in [1, 64]"},
          {R"({"prompt": "a", "model": 3})", "model", "expected a string"},
          {R"({"prompt": "a", "presence_penalty": 0.5})", "presence_penalty", "only 0"},
          {R"({"prompt": "a", "logit_bias": {"1": 5}})", "logit_bias", "not supported"},
          {R"({"prompt": "a", "suffix": "z"})", "suffix", "not supported"},
          {R"({"prompt": "a", "best_of": 2})", "best_of", "only best_of = n"},
      });
}

// A value nested 100000 deep is refused without printing it (that would recurse once per level).
TEST_F(OpenAiRequest, DeeplyNestedValuesAreRefusedWithoutRecursion) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_refused([&](const std::string& b) { parse_completion_request(b, model_); },
                 {{R"({"prompt": )" + deep + "}", "prompt", "must be integers, got a list"},
                  {R"({"prompt": "a", "temperature": )" + deep + "}", "temperature", "expected a number, got []"},
                  {R"({"prompt": "a", "stop": [)" + deep + "]}", "stop", "got an element a list"},
                  {deep, "", "must be a JSON object, got a list"}});
}

TEST_F(OpenAiRequest, ChatRendersTheTemplateAndFillsTheContext) {
  auto r = parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], "temperature": 0})", model_);
  // [EOS] "User: hi\n\n" "Assistant: " = 1 + 10 + 11 tokens; max_tokens defaults to the rest of the context
  EXPECT_EQ(r.prompt, chat_.render({{"user", "hi"}}, true).ids);
  EXPECT_EQ(r.prompt.size(), 22u);
  EXPECT_EQ(r.params.max_tokens, 32 - 22);
  auto parts = parse_chat_request(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "h"}, {"type": "text", "text": "i"}]}],
          "max_completion_tokens": 4})",
      model_);
  EXPECT_EQ(parts.prompt, r.prompt);
  EXPECT_EQ(parts.params.max_tokens, 4);
}

TEST_F(OpenAiRequest, EveryRefusedChatNamesItsField) {
  const std::string user = R"("messages": [{"role": "user", "content": "hi"}])";
  expect_refused(
      [&](const std::string& b) { parse_chat_request(b, model_); },
      {
          {R"({"messages": "hi"})", "messages", "messages"},
          {R"({"messages": []})", "messages", "messages"},
          {R"({"messages": [{"role": "robot", "content": "hi"}]})", "messages", "robot"},
          {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages", "only text content"},
          {"{}", "messages", "is required"},
          {R"({"messages": [{"role": "user", "content": ")" + std::string(20, 'x') + R"("}]})", "messages",
           "the prompt is 40 tokens but the model context is 32"},
          {"{" + user + R"(, "max_tokens": 0})", "max_tokens", "must be >= 1"},
          {"{" + user + R"(, "max_completion_tokens": 0})", "max_completion_tokens", "must be >= 1"},
          {"{" + user + R"(, "logprobs": true})", "logprobs", "not supported"},
          {"{" + user + R"(, "n": 0})", "n", "must be in [1, 128]"},
          {"{" + user + R"(, "fbt_mode": "x"})", "fbt_mode", "unknown value"},
      });
  ServedModel no_chat = model_;
  no_chat.chat = nullptr;
  const auto e = refusal([&](const std::string& b) { parse_chat_request(b, no_chat); }, "{" + user + "}");
  EXPECT_EQ(e.param, "messages");
  EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
}

// Issue 36 item 2 (cf. vLLM #3486): a request naming a model the server does not serve is a 404
// with OpenAI's code "model_not_found", on both endpoints and before any other check; no model,
// null, "" or the served name are answered by the served model.
TEST_F(OpenAiRequest, UnknownModelNameIsA404ModelNotFound) {
  const std::string user = R"("messages": [{"role": "user", "content": "hi"}])";
  const auto completion = [&](const std::string& b) { parse_completion_request(b, model_); };
  const auto chat = [&](const std::string& b) { parse_chat_request(b, model_); };
  for (const auto& [parse, body] : std::vector<std::pair<std::function<void(const std::string&)>, std::string>>{
           {completion, R"({"model": "gpt-4-does-not-exist", "prompt": "hi"})"},
           {completion, R"({"model": "gpt-4-does-not-exist", "prompt": "hi", "n": 0})"},  // 404 before 400
           {chat, R"({"model": "gpt-4-does-not-exist", )" + user + "}"},
           {chat, R"({"model": "TINY", )" + user + "}"}}) {
    SCOPED_TRACE(body);
    const auto e = refusal(parse, body);
    EXPECT_EQ(e.status, 404);
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_EQ(e.code, "model_not_found");
    EXPECT_EQ(e.param, "model");
    EXPECT_NE(std::string(e.what()).find("'tiny'"), std::string::npos) << e.what();
    EXPECT_EQ(error_body(e)["error"]["code"], "model_not_found");
  }
  for (const std::string model : {"", R"("model": null, )", R"("model": "", )", R"("model": "tiny", )"}) {
    SCOPED_TRACE(model);
    EXPECT_NO_THROW(parse_completion_request("{" + model + R"("prompt": "hi"})", model_));
    EXPECT_NO_THROW(parse_chat_request("{" + model + user + "}", model_));
  }
}

TEST(ApiErrorBody, HasOpenAisShape) {
  const auto body = error_body(bad_field("n", "must be in [1, 128] (got 0)"));
  EXPECT_EQ(body, nlohmann::json::parse(R"J({"error": {"message": "n: must be in [1, 128] (got 0)",
      "type": "invalid_request_error", "param": "n", "code": null}})J"));
  EXPECT_TRUE(error_body(ApiError(401, "no key", "", "authentication_error"))["error"]["param"].is_null());
}

}  // namespace
}  // namespace fbt
