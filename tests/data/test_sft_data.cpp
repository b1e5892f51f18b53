// Conversation datasets (sft_data.h): the input formats, the mask shards `fbt prepare
// --conversations` writes, SftData's padded rows, SftLoader's epochs and named errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "expect_error.h"
#include "fbt/data/prepare.h"
#include "fbt/data/sft_data.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;

std::string prepare(const fs::path& dir, const std::string& format, const std::string& jsonl) {
  std::ofstream(dir / "in.jsonl") << jsonl;
  PrepareOptions p;
  p.inputs = {(dir / "in.jsonl").string()};
  p.out_dir = (dir / "data").string();
  p.tokenizer = "byte";
  p.conversations = format;
  p.val_fraction = 0.34;
  std::ostringstream log;
  prepare_dataset(p, log);
  return p.out_dir;
}

/// The scored targets of every conversation of a split, decoded (EOS as "<eos>").
std::set<std::string> scored_texts(const SftData& d) {
  std::set<std::string> out;
  for (int64_t i = 0; i < d.size(); ++i) {
    const auto mb = d.batch({i}, 1000, ByteTokenizer::kPad);
    std::string s;
    for (int64_t t = 0; t < mb.targets.size(1); ++t) {
      const int64_t id = mb.targets[0][t].item<int64_t>();
      if (id >= 0) s += id == ByteTokenizer::kEos ? std::string("<eos>") : std::string(1, char(id));
    }
    out.insert(s);
  }
  return out;
}

// GSM8K records lose their calculator annotations; only the answers and their EOS are scored.
TEST(SftData, Gsm8kMaskScoresTheAnswersOnly) {
  testing::TempDir tmp;
  const auto data = prepare(tmp.path, "gsm8k",
                            R"({"question": "Q1?", "answer": "2 * 3 = <<2*3=6>>6\n#### 6"})"
                            "\n"
                            R"({"question": "Q2?", "answer": "#### 7"})"
                            "\n"
                            R"({"question": "Q3?", "answer": "1 + 1 = <<1+1=2>>2.\n#### 2"})"
                            "\n");
  const auto meta = read_dataset_meta(data);
  ASSERT_TRUE(is_conversation_dataset(meta));
  EXPECT_EQ(meta["conversations"]["chat_template"], "fbt");
  EXPECT_EQ(meta["conversations"]["end_of_turn_id"], ByteTokenizer::kEos);
  std::set<std::string> all;
  for (const char* split : {"train", "val"}) {
    const auto d = SftData::open(data, split);
    const auto texts = scored_texts(d);
    all.insert(texts.begin(), texts.end());
    EXPECT_EQ(meta["conversations"][split]["conversations"].get<int64_t>(), d.size());
  }
  EXPECT_EQ(all, (std::set<std::string>{"2 * 3 = 6\n#### 6<eos>", "#### 7<eos>", "1 + 1 = 2.\n#### 2<eos>"}));
}

// Rows start at a conversation's first token, are cut to seq + 1 tokens and right-padded.
TEST(SftData, RowsArePaddedAndCut) {
  testing::TempDir tmp;
  const auto data =
      prepare(tmp.path, "alpaca",
              R"({"instruction": "Add.", "input": "1 2", "output": "3"})"
              "\n"
              R"({"instruction": "Long.", "instances": [{"input": "", "output": "abcdefghijklmnopqrstuvwxyz"}, )"
              R"({"input": "x", "output": "y"}]})"
              "\n");
  const auto d = SftData::open(data, "train");
  ASSERT_EQ(d.size(), 2);
  std::vector<int64_t> all{0, 1};
  const auto mb = d.batch(all, 1000, ByteTokenizer::kPad);
  const int64_t width = std::max(d.length(0), d.length(1)) - 1;
  ASSERT_EQ(mb.inputs.sizes(), (std::vector<int64_t>{2, width}));
  EXPECT_EQ(mb.tokens, d.length(0) + d.length(1) - 2);
  for (int64_t b = 0; b < 2; ++b) {
    EXPECT_EQ(mb.inputs[b][0].item<int64_t>(), ByteTokenizer::kEos);  // the document prefix: position 0 is plain
    for (int64_t t = d.length(b) - 1; t < width; ++t) {
      EXPECT_EQ(mb.inputs[b][t].item<int64_t>(), ByteTokenizer::kPad);
      EXPECT_EQ(mb.targets[b][t].item<int64_t>(), -1);
    }
  }
  const auto cut = d.batch(all, 8, ByteTokenizer::kPad);
  EXPECT_EQ(cut.inputs.size(1), 8);
  EXPECT_EQ(cut.tokens, 16);
  EXPECT_EQ(d.longer_than(9), 2);
}

// Every epoch visits every conversation once, in a new order; the state resumes the stream.
TEST(SftData, LoaderEpochsAndState) {
  testing::TempDir tmp;
  std::string jsonl;
  for (int i = 0; i < 10; ++i)
    jsonl += R"({"messages": [{"role": "user", "content": "n"}, {"role": "assistant", "content": ")" +
             std::string(size_t(i + 1), 'a') + "\"}]}\n";
  const auto data = prepare(tmp.path, "messages", jsonl);
  const auto d = SftData::open(data, "train");
  ASSERT_EQ(d.size(), 7);  // 3 of 10 held out
  SftLoader loader(d, 1, 64, ByteTokenizer::kPad, 5);
  std::vector<int64_t> lengths;
  for (int i = 0; i < 14; ++i) lengths.push_back(loader.next_batch().tokens);
  EXPECT_EQ(std::set<int64_t>(lengths.begin(), lengths.begin() + 7).size(), 7u);
  EXPECT_EQ(std::set<int64_t>(lengths.begin() + 7, lengths.end()).size(), 7u);
  EXPECT_NE(std::vector<int64_t>(lengths.begin(), lengths.begin() + 7),
            std::vector<int64_t>(lengths.begin() + 7, lengths.end()));
  SftLoader a(d, 2, 64, ByteTokenizer::kPad, 9);
  for (int i = 0; i < 5; ++i) a.next_batch();
  SftLoader b(d, 2, 64, ByteTokenizer::kPad, 9);
  b.set_state(a.state());
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(torch::equal(a.next_batch().inputs, b.next_batch().inputs)) << i;
  EXPECT_EQ(a.skip_batch().scored, b.next_batch().scored);
  SftLoader other(d, 3, 64, ByteTokenizer::kPad, 9);
  expect_error([&] { other.set_state(a.state()); }, {"loader state: field \"batch\" is 2 but this loader has 3"});
}

TEST(SftData, NamedErrors) {
  testing::TempDir tmp;
  expect_error(
      [&] {
        prepare(tmp.path, "messages",
                R"({"messages": [{"role": "user", "content": "x"}]})"
                "\n"
                R"({"messages": [{"role": "user", "content": "y"}]})"
                "\n");
      },
      {"in.jsonl:1: the conversation has no assistant message"});
  expect_error(
      [&] {
        prepare(tmp.path, "gsm8k",
                R"({"question": "x"})"
                "\n");
      },
      {"in.jsonl:1: record has no string field \"answer\""});
  expect_error([&] { prepare(tmp.path, "messages", "{\"messages\": 3}\n"); },
               {"in.jsonl:1: \"messages\" must be a non-empty array"});
  expect_error([&] { prepare(tmp.path, "alpaca", "not json\n"); }, {"in.jsonl:1: invalid JSON"});
  expect_error(
      [&] {
        prepare(tmp.path, "gsm8k",
                R"({"question": "x", "answer": "y"})"
                "\n");
      },
      {"1 conversation(s); train and val need at least 2"});
  std::ofstream(tmp.path / "in.jsonl") << R"({"question": "x", "answer": "y"})";
  PrepareOptions p;
  p.inputs = {(tmp.path / "in.jsonl").string()};
  p.out_dir = (tmp.path / "bpe").string();
  p.conversations = "gsm8k";
  std::ostringstream log;
  expect_error([&] { prepare_dataset(p, log); },
               {"--conversations renders chats with the model's tokenizer: give --tokenizer-model"});
  EXPECT_FALSE(fs::exists(tmp.path / "bpe"));
}

}  // namespace
}  // namespace fbt
