// The response objects, SSE framing and Prometheus exposition of `fbt serve`, against hand-written
// JSON in the shapes of the OpenAI API reference.
#include <gtest/gtest.h>

#include <cmath>

#include "fbt/serve/metrics.h"
#include "fbt/serve/openai_response.h"

namespace fbt {
namespace {

using json = nlohmann::json;

TEST(OpenAiResponse, LegacyLogprobs) {
  const ByteTokenizer bytes;
  const float nan = std::nanf("");
  const auto j = legacy_logprobs(
      {{ByteTokenizer::kEos, nan, {}, 0}, {'h', -1.5f, {{'h', -1.5f}, {'H', -2.0f}}, 0}, {'i', -0.25f, {}, 1}}, bytes);
  EXPECT_EQ(j, json::parse(R"({"tokens": ["", "h", "i"], "token_logprobs": [null, -1.5, -0.25],
      "top_logprobs": [null, {"h": -1.5, "H": -2.0}, {}], "text_offset": [0, 0, 1]})"));
  // Two ids with the same text: the first (most likely) keeps the text, the other is "token_id:ID",
  // so no entry is lost (issue 36).
  const auto same =
      legacy_logprobs({{'a', -1.0f, {{ByteTokenizer::kEos, -1.0f}, {ByteTokenizer::kPad, -3.0f}}, 0}}, bytes);
  EXPECT_EQ(same["top_logprobs"][0], json::parse(R"({"": -1.0, "token_id:256": -3.0})"));
  // Fragments of one character (0xE3 0x81 0x82 is "あ"): each is "token_id:ID", in "tokens" too,
  // so a client finds the chosen token among the top entries.
  const auto frag = legacy_logprobs({{0xE3, -0.5f, {{0xE3, -0.5f}, {0xE4, -1.0f}, {0xE5, -2.0f}}, 0}}, bytes);
  EXPECT_EQ(frag["tokens"], json::parse(R"(["token_id:227"])"));
  EXPECT_EQ(frag["top_logprobs"][0],
            json::parse(R"({"token_id:227": -0.5, "token_id:228": -1.0, "token_id:229": -2.0})"));
}

TEST(OpenAiResponse, ObjectsAndChunks) {
  const ResponseHeader h{"cmpl-1", 1700000000, "tiny", "fused(2)"};
  const auto completion =
      response_object(h, false, false, json::array({completion_choice(0, "hi", nullptr, "length")}), usage_json(3, 2));
  EXPECT_EQ(completion, json::parse(R"J({"id": "cmpl-1", "object": "text_completion", "created": 1700000000,
      "model": "tiny", "fbt_mode": "fused(2)",
      "choices": [{"index": 0, "text": "hi", "logprobs": null, "finish_reason": "length"}],
      "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})J"));
  const auto chat = response_object(h, true, false, json::array({chat_choice(1, "yo", "stop")}), nullptr);
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0], json::parse(R"({"index": 1, "message": {"role": "assistant", "content": "yo"},
      "logprobs": null, "finish_reason": "stop"})"));
  EXPECT_FALSE(chat.contains("usage"));
  const auto chunk =
      response_object(h, true, true, json::array({chat_delta_choice(0, {{"content", "y"}}, "")}), nullptr);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0], json::parse(R"({"index": 0, "delta": {"content": "y"}, "logprobs": null,
      "finish_reason": null})"));
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  // Bytes that are not UTF-8 (a byte-level model's output) are written as U+FFFD, not an exception.
  EXPECT_EQ(dump_json(json("a\xFF")), "\"a\xEF\xBF\xBD\"");
  const auto fresh = make_header("chatcmpl-", "m", "soft");
  EXPECT_EQ(fresh.id.rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(fresh.id.size(), 9u + 24u);
  EXPECT_NE(fresh.id, make_header("chatcmpl-", "m", "soft").id);
}

TEST(Metrics, PrometheusExposition) {
  RequestCounters counters;
  counters.count("/v1/completions", 200);
  counters.count("/v1/completions", 200);
  counters.count("/v1/chat/completions", 400);
  EngineStats stats;
  stats.queued = 2;
  stats.active = 3;
  stats.prompt_tokens = 40;
  stats.generated_tokens = 100;
  stats.busy_seconds = 4;
  const std::string text = prometheus_metrics(stats, counters.snapshot());
  for (const char* line :
       {"# TYPE fbt_requests_total counter\n", "fbt_requests_total{endpoint=\"/v1/chat/completions\",code=\"400\"} 1\n",
        "fbt_requests_total{endpoint=\"/v1/completions\",code=\"200\"} 2\n", "fbt_prompt_tokens_total 40\n",
        "fbt_generated_tokens_total 100\n", "# TYPE fbt_queue_length gauge\n", "fbt_queue_length 2\n",
        "fbt_active_sequences 3\n", "fbt_generated_tokens_per_second 25\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " not in\n" << text;
  EXPECT_NE(prometheus_metrics(EngineStats{}, {}).find("fbt_generated_tokens_per_second 0\n"), std::string::npos);
}

}  // namespace
}  // namespace fbt
