// fit_chat_history: the oldest exchanges go first, the system message and the last user message
// stay; token counts by hand for the byte tokenizer and fbt's native template (one token per byte):
//   [EOS] "System: S\n\n" (11)  "User: aaaa\n\n" (12)  "Assistant: bbbb" (15) [EOS]
//   "User: cc\n\n" (10)  "Assistant: dd" (13) [EOS]  "User: e\n\n" (9)  "Assistant: " (11)
// = 1 + 11 + 12 + 16 + 10 + 14 + 9 + 11 = 84 tokens; without the first exchange 84 − 28 = 56;
// without the second too 56 − 24 = 32 (system + last user + generation prompt).
#include <gtest/gtest.h>

#include "expect_error.h"
#include "fbt/infer/chat_history.h"

namespace fbt {
namespace {

std::vector<ChatMessage> conversation() {
  return {{"system", "S"}, {"user", "aaaa"}, {"assistant", "bbbb"}, {"user", "cc"}, {"assistant", "dd"}, {"user", "e"}};
}

TEST(ChatHistory, DropsOldestExchangesUntilThePromptFits) {
  const ByteTokenizer bytes;
  const auto chat = ChatTemplate::for_tokenizer(bytes, "auto", "bytes");
  struct Case {
    int64_t reserve, dropped, tokens;
    size_t kept;
  };
  // context 100: a budget of 100 − reserve prompt tokens
  for (const Case& c :
       {Case{16, 0, 84, 6}, Case{17, 2, 56, 4}, Case{44, 2, 56, 4}, Case{45, 4, 32, 2}, Case{68, 4, 32, 2}}) {
    SCOPED_TRACE("reserve " + std::to_string(c.reserve));
    auto messages = conversation();
    const auto fitted = fit_chat_history(chat, messages, 100, c.reserve);
    EXPECT_EQ(fitted.dropped, c.dropped);
    EXPECT_EQ(static_cast<int64_t>(fitted.prompt.ids.size()), c.tokens);
    ASSERT_EQ(messages.size(), c.kept);
    EXPECT_EQ(messages.front().content, "S");
    EXPECT_EQ(messages.back().content, "e");
    if (c.kept > 2) {
      EXPECT_EQ(messages[1].role, "user");  // the history still starts with a user turn
    }
    EXPECT_EQ(fitted.prompt.ids, chat.render(messages, true).ids);
  }
}

TEST(ChatHistory, WithoutSystemMessageAndWhenNothingFits) {
  const ByteTokenizer bytes;
  const auto chat = ChatTemplate::for_tokenizer(bytes, "auto", "bytes");
  auto messages = conversation();
  messages.erase(messages.begin());  // 84 − 11 = 73 tokens, 21 without the two exchanges
  auto fitted = fit_chat_history(chat, messages, 50, 29);
  EXPECT_EQ(fitted.dropped, 4);
  EXPECT_EQ(fitted.prompt.ids.size(), 21u);
  ASSERT_EQ(messages.size(), 1u);
  testing::expect_error([&] { fit_chat_history(chat, messages, 50, 30); }, {"21 tokens", "leaves 20"});
  testing::expect_error([&] { fit_chat_history(chat, messages, 50, 50); }, {"no room"});
  std::vector<ChatMessage> no_user{{"system", "S"}};
  testing::expect_error([&] { fit_chat_history(chat, no_user, 50, 10); }, {"user message"});
}

}  // namespace
}  // namespace fbt
