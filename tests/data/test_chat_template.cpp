// ChatTemplate against transformers' apply_chat_template (tests/fixtures/chat_templates): SmolLM2's,
// a plain ChatML, a Qwen2.5-style default system message and Meta-Llama-3-Instruct's template give
// the same text, ids and SFT mask (return_assistant_tokens_mask) on whole-text tokenization, with
// leading/trailing whitespace, empty and multi-turn contents; the native template; named errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "cli_test_helpers.h"
#include "expect_error.h"
#include "fbt/data/chat_template.h"
#include "fbt/data/hf_tokenizer.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;

const fs::path kChatTemplateDir = fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "chat_templates";

std::unique_ptr<HfBpeTokenizer> template_fixture(const std::string& name) {
  return HfBpeTokenizer::from_file((kChatTemplateDir / name / "tokenizer.json").string());
}

TEST(ChatTemplate, TextAndIdsEqualTransformers) {
  const auto expected = nlohmann::json::parse(testing::slurp(kChatTemplateDir / "expected.json"));
  int cases = 0;
  for (const auto& c : expected.at("cases")) {
    const std::string name = c.at("fixture");
    SCOPED_TRACE(name + ": " + c.at("messages").dump());
    const auto tok = template_fixture(name);
    const auto tmpl = ChatTemplate::for_tokenizer(*tok, "auto", name);
    const auto r = tmpl.render(chat_messages_from_json(c.at("messages"), "case"), c.at("add_generation_prompt"));
    EXPECT_EQ(r.text, c.at("text").get<std::string>());
    EXPECT_EQ(r.ids, c.at("ids").get<std::vector<int64_t>>());
    // The SFT mask is transformers' return_assistant_tokens_mask of the {% generation %} template.
    const auto mask = c.at("assistant_masks").get<std::vector<int>>();
    EXPECT_EQ(std::vector<int>(r.scored.begin(), r.scored.end()), mask);
    ++cases;
  }
  EXPECT_EQ(cases, 44);
}

TEST(ChatTemplate, DetectsFormatsAndDefaultSystem) {
  EXPECT_EQ(ChatTemplate::for_tokenizer(*template_fixture("smollm2"), "auto", "t").name(), "chatml");
  EXPECT_EQ(ChatTemplate::for_tokenizer(*template_fixture("smollm2"), "auto", "t").default_system(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(ChatTemplate::for_tokenizer(*template_fixture("qwen_like"), "auto", "t").default_system(),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_EQ(ChatTemplate::for_tokenizer(*template_fixture("chatml"), "auto", "t").default_system(), "");
  const auto llama = template_fixture("llama3");
  const auto t = ChatTemplate::for_tokenizer(*llama, "auto", "t");
  EXPECT_EQ(t.name(), "llama3");
  EXPECT_EQ(t.end_of_turn_id(), llama->token_id("<|eot_id|>"));
  EXPECT_EQ(ChatTemplate::for_tokenizer(ByteTokenizer(), "auto", "t").name(), "fbt");
}

// The scored ids decode to the assistant contents, each followed by the end-of-turn token.
TEST(ChatTemplate, MaskScoresAssistantContentAndEndOfTurn) {
  const std::vector<ChatMessage> chat{{"system", "Be brief."},
                                      {"user", "Hi there"},
                                      {"assistant", "Hello!"},
                                      {"user", "And 2+2?"},
                                      {"assistant", "4, of course."}};
  for (const std::string name : {"smollm2", "llama3"}) {
    SCOPED_TRACE(name);
    const auto tok = template_fixture(name);
    const auto t = ChatTemplate::for_tokenizer(*tok, "auto", name);
    const auto r = t.render(chat, false);
    ASSERT_EQ(r.scored.size(), r.ids.size());
    std::vector<int64_t> scored, ends;
    for (size_t i = 0; i < r.ids.size(); ++i)
      if (r.scored[i]) scored.push_back(r.ids[i]);
    for (size_t i = 0; i < r.ids.size(); ++i)
      if (r.ids[i] == t.end_of_turn_id()) ends.push_back(r.scored[i]);
    // (Both end-of-turn tokens are their tokenizer's EOS, which decodes to nothing.)
    EXPECT_EQ(tok->decode(scored), "Hello!4, of course.");
    EXPECT_EQ(std::count(scored.begin(), scored.end(), t.end_of_turn_id()), 2);
    // Every message ends with the end-of-turn token; only the assistants' are scored.
    EXPECT_EQ(ends, (std::vector<int64_t>{0, 0, 1, 0, 1}));
  }
}

TEST(ChatTemplate, NativeTemplateEndsAssistantTurnsWithEos) {
  ByteTokenizer tok;
  const auto t = ChatTemplate::for_tokenizer(tok, "auto", "t");
  EXPECT_EQ(t.end_of_turn_id(), ByteTokenizer::kEos);
  const auto r = t.render({{"user", "Hi"}, {"assistant", "Yo"}}, false);
  EXPECT_EQ(r.text, "User: Hi\n\nAssistant: Yo");
  std::vector<int64_t> ids{ByteTokenizer::kEos};  // the document prefix
  for (char c : std::string("User: Hi\n\nAssistant: Yo")) ids.push_back(static_cast<unsigned char>(c));
  ids.push_back(ByteTokenizer::kEos);
  EXPECT_EQ(r.ids, ids);
  std::vector<uint8_t> scored(ids.size(), 0);
  for (size_t i = ids.size() - 3; i < ids.size(); ++i) scored[i] = 1;  // "Yo" + EOS
  EXPECT_EQ(r.scored, scored);
  EXPECT_EQ(t.render({{"user", "Hi"}}, true).text, "User: Hi\n\nAssistant: ");
}

TEST(ChatTemplate, NamedErrors) {
  expect_error([] { ChatTemplate::for_tokenizer(ByteTokenizer(), "chatml", "run/tokenizer"); },
               {"run/tokenizer: the tokenizer has no <|im_start|> token"});
  expect_error([] { ChatTemplate::for_tokenizer(ByteTokenizer(), "jinja", "x"); }, {"--chat-template jinja"});
  // An HF tokenizer without a template (the hf_tokenizers smollm fixture has none).
  expect_error(
      [] {
        ChatTemplate::for_tokenizer(
            *HfBpeTokenizer::from_file(
                (fs::path(FBT_SOURCE_DIR) / "tests/fixtures/hf_tokenizers/smollm/tokenizer.json").string()),
            "auto", "tok");
      },
      {"tok: the tokenizer has no chat template; pass --chat-template"});
  const nlohmann::json bad_role = nlohmann::json::parse(R"([{"role": "tool", "content": "x"}])");
  expect_error([&] { chat_messages_from_json(bad_role, "f.jsonl:3"); },
               {"f.jsonl:3: messages[0].role: \"tool\" is not one of system, user, assistant"});
  const nlohmann::json late_system =
      nlohmann::json::parse(R"([{"role": "user", "content": "x"}, {"role": "system", "content": "y"}])");
  expect_error([&] { chat_messages_from_json(late_system, "f"); },
               {"f: messages[1]: a system message may only come first"});
  expect_error([] { chat_messages_from_json(nlohmann::json::array(), "f"); },
               {"f: \"messages\" must be a non-empty array"});
  expect_error([] { chat_messages_from_json(nlohmann::json::parse(R"([{"role": "user", "content": 3}])"), "f"); },
               {"f: messages[0]: expected an object with string fields"});
}

}  // namespace
}  // namespace fbt
