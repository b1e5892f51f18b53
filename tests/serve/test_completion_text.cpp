// ChoiceText and text_offsets: incremental detokenization cut at stop strings, on the byte
// tokenizer (one token per byte, so every expected piece and offset is counted by hand).
#include <gtest/gtest.h>

#include "fbt/infer/stream_text.h"
#include "fbt/serve/completion_text.h"

namespace fbt {
namespace {

std::vector<std::string> push_all(ChoiceText& text, const std::string& bytes) {
  std::vector<std::string> pieces;
  for (unsigned char c : bytes) pieces.push_back(text.push(c));
  return pieces;
}

TEST(ChoiceText, WithoutStopEveryByteIsFinalAtOnce) {
  const ByteTokenizer bytes;
  ChoiceText text(bytes, {});
  EXPECT_EQ(push_all(text, "ab"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(text.finish(), "");
  EXPECT_EQ(text.text(), "ab");
  EXPECT_EQ(text.offsets(), (std::vector<int64_t>{0, 1}));
}

TEST(ChoiceText, IncompleteCharactersWaitForTheirLastByte) {
  const ByteTokenizer bytes;
  ChoiceText text(bytes, {});
  // "é" = C3 A9, "€" = E2 82 AC: nothing is final until a character is whole.
  EXPECT_EQ(push_all(text, "a\xC3\xA9\xE2\x82\xAC"),
            (std::vector<std::string>{"a", "", "\xC3\xA9", "", "", "\xE2\x82\xAC"}));
  // Offsets count characters of the whole text before each token: a=0, C3=1, A9=1 (C3 alone is
  // not yet a character), E2=2, 82=2, AC=2.
  EXPECT_EQ(text.offsets(), (std::vector<int64_t>{0, 1, 1, 2, 2, 2}));
  EXPECT_EQ(text_offsets(bytes, {'a', 0xC3, 0xA9, 0xE2, 0x82, 0xAC}), text.offsets());
  // A sequence that ends inside a character: finish() gives the bytes held back.
  ChoiceText cut(bytes, {});
  EXPECT_EQ(push_all(cut, "x\xE2\x82"), (std::vector<std::string>{"x", "", ""}));
  EXPECT_EQ(cut.finish(), "\xE2\x82");
}

TEST(ChoiceText, StopStringsCutTheTextAndHoldBackTheirBeginnings) {
  const ByteTokenizer bytes;
  ChoiceText text(bytes, {"END", "\n\n"});
  // "ab" final; "E" and "EN" may begin "END": held; "D" completes it: stopped, text "ab".
  EXPECT_EQ(push_all(text, "abEND!"), (std::vector<std::string>{"a", "b", "", "", "", ""}));
  EXPECT_TRUE(text.stopped());
  EXPECT_EQ(text.text(), "ab");
  EXPECT_EQ(text.tokens(), (std::vector<int64_t>{'a', 'b', 'E', 'N', 'D'}));  // "!" came after the stop
  EXPECT_EQ(text.finish(), "");
  // A held-back beginning that does not continue into a stop string is released.
  ChoiceText released(bytes, {"END"});
  EXPECT_EQ(push_all(released, "aENx"), (std::vector<std::string>{"a", "", "", "ENx"}));
  EXPECT_FALSE(released.stopped());
  ChoiceText tail(bytes, {"END"});
  EXPECT_EQ(push_all(tail, "aEN"), (std::vector<std::string>{"a", "", ""}));
  EXPECT_EQ(tail.finish(), "EN");
  EXPECT_EQ(tail.text(), "aEN");
  // When two stop strings complete with the same token, the text ends before the earlier one.
  ChoiceText two(bytes, {"bc", "abc"});
  EXPECT_EQ(push_all(two, "xabc"), (std::vector<std::string>{"x", "", "", ""}));
  EXPECT_EQ(two.text(), "x");
  // A stop string at the very start leaves an empty text.
  ChoiceText first(bytes, {"a"});
  EXPECT_EQ(first.push('a'), "");
  EXPECT_TRUE(first.stopped());
  EXPECT_EQ(first.text(), "");
}

TEST(StablePrefix, DropsIncompleteTrailingCharacters) {
  EXPECT_EQ(stable_prefix("ab"), 2u);
  EXPECT_EQ(stable_prefix("a\xC3"), 1u);
  EXPECT_EQ(stable_prefix("a\xE2\x82"), 1u);
  EXPECT_EQ(stable_prefix("a\xE2\x82\xAC"), 4u);
  EXPECT_EQ(stable_prefix("a\xEF\xBF\xBD"), 1u);  // U+FFFD: sentencepiece's incomplete byte pieces
  EXPECT_EQ(utf8_length("a\xE2\x82\xAC\xC3\xA9"), 3);
}

}  // namespace
}  // namespace fbt
