// Tokenizers: byte-level exact round trip; BPE training, round trip, agreement with sentencepiece's
// own spm_encode / spm_decode, persistence; Tokenizer::load.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <cstdlib>
#include <sstream>

#include "fbt/util/error.h"
#include "cli_test_helpers.h"
#include "temp_dir.h"
#include "fbt/data/tokenizer.h"
#include "fbt/util/hash.h"
#include "shared_data.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

using testing::slurp;

using testing::TempDir;

void write_meta(const fs::path& dir, const nlohmann::json& tokenizer_block) {
  std::ofstream(dir / "meta.json") << nlohmann::json{
      {"format", "fbt-dataset"},
      {"format_version", 1},
      {"tokenizer", tokenizer_block}}.dump();
}

/// Runs a shell command, failing the test if it exits non-zero.
void sh(const std::string& cmd) { ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd; }

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<int64_t> parse_ids(const std::string& line) {
  std::istringstream in(line);
  std::vector<int64_t> ids;
  for (int64_t id; in >> id;) ids.push_back(id);
  return ids;
}

/// Checks tok against sentencepiece's spm_encode / spm_decode on `lines` (no '\n' inside).
void expect_matches_spm(const BpeTokenizer& tok, const std::vector<std::string>& lines, const fs::path& dir) {
  const fs::path model = dir / "m.model", in = dir / "in.txt", ids = dir / "ids.txt", back = dir / "back.txt";
  tok.save(model.string());
  {
    std::ofstream f(in, std::ios::binary);
    for (const auto& l : lines) f << l << "\n";
  }
  sh("spm_encode --model=" + model.string() + " --output_format=id < " + in.string() + " > " + ids.string());
  sh("spm_decode --model=" + model.string() + " --input_format=id < " + ids.string() + " > " + back.string());
  const auto spm_ids = read_lines(ids), spm_back = read_lines(back);
  ASSERT_EQ(spm_ids.size(), lines.size());
  ASSERT_EQ(spm_back.size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<int64_t> mine = tok.encode(lines[i]);
    EXPECT_EQ(mine, parse_ids(spm_ids[i])) << "line " << i << ": " << lines[i];
    EXPECT_EQ(tok.decode(mine), spm_back[i]) << "line " << i << ": " << lines[i];
  }
}

TEST(TokenizerByte, EveryByteAndInvalidUtf8RoundTrip) {
  std::string text;
  for (int b = 0; b < 256; ++b) text.push_back(static_cast<char>(b));
  text += "\xC3\x28\xFF\xFE\x80 plain \xE2\x82";  // malformed sequences, truncated 3-byte char
  ByteTokenizer tok;
  const std::vector<int64_t> ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i) EXPECT_EQ(ids[i], static_cast<unsigned char>(text[i]));
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(TokenizerByte, SpecialIdsDecodeToNothingAndOutOfRangeThrows) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.pad_id(), 256);
  EXPECT_EQ(tok.bos_id(), 257);
  EXPECT_EQ(tok.eos_id(), 258);
  EXPECT_EQ(tok.decode({257, 'h', 258, 'i', 256}), "hi");
  EXPECT_THROW(tok.decode({259}), Error);
  EXPECT_THROW(tok.decode({-1}), Error);
}

class TokenizerBpe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(testing::shared_data("tinyshakespeare/input.txt"))) return;  // SetUp skips
    const std::string corpus = slurp(FBT_SHARED_DATA "/tinyshakespeare/input.txt");
    ASSERT_GT(corpus.size(), 300'000u);
    train_text_ = new std::string(corpus.substr(0, 100'000));
    unseen_text_ = new std::string(corpus.substr(200'000, 20'000));
    BpeTrainOptions o;
    o.vocab_size = 400;
    tok_ = BpeTokenizer::train({*train_text_}, o).release();
  }
  void SetUp() override { FBT_SKIP_WITHOUT_SHARED_DATA("tinyshakespeare/input.txt"); }
  static void TearDownTestSuite() {
    delete tok_;
    delete train_text_;
    delete unseen_text_;
  }
  static BpeTokenizer* tok_;
  static std::string* train_text_;
  static std::string* unseen_text_;
};
BpeTokenizer* TokenizerBpe::tok_ = nullptr;
std::string* TokenizerBpe::train_text_ = nullptr;
std::string* TokenizerBpe::unseen_text_ = nullptr;

TEST_F(TokenizerBpe, LayoutOfSpecialAndBytePieces) {
  EXPECT_EQ(tok_->type(), "bpe");
  EXPECT_EQ(tok_->vocab_size(), 400);
  EXPECT_EQ(tok_->unk_id(), 0);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_EQ(tok_->pad_id(), 3);
  EXPECT_EQ(tok_->encode("\n"), std::vector<int64_t>{4});  // "\n" is a user-defined piece
  // Byte pieces <0x00>..<0xFF> are ids 5..260: each decodes to its byte.
  EXPECT_EQ(tok_->decode({5 + 0x41}), "A");
  EXPECT_EQ(tok_->decode({5 + 0x0A}), "\n");
  EXPECT_EQ(tok_->decode({5 + 0xC3, 5 + 0xA9}), "\xC3\xA9");  // bytes join into one character
  EXPECT_EQ(tok_->decode({1, 2, 3}), "");
  EXPECT_THROW(tok_->decode({400}), Error);
}

TEST_F(TokenizerBpe, TrainingAndUnseenTextRoundTripExactly) {
  for (const std::string* text : {train_text_, unseen_text_}) {
    const std::vector<int64_t> ids = tok_->encode(*text);
    EXPECT_EQ(tok_->decode(ids), *text);
    size_t byte_pieces = 0;
    for (int64_t id : ids) {
      EXPECT_GE(id, 4);  // no specials, no unk
      EXPECT_LT(id, 400);
      byte_pieces += id >= 5 && id <= 260;
    }
    EXPECT_LT(byte_pieces, ids.size() / 100) << "byte fallback only for rare characters";
    // 140 merges on Shakespeare must compress noticeably below one token per byte.
    EXPECT_LT(static_cast<double>(ids.size()), 0.75 * static_cast<double>(text->size()));
  }
}

TEST_F(TokenizerBpe, WhitespaceControlAndUnicodeRoundTripExactly) {
  const std::string text =
      "  two  spaces\n\n\ttab\r\n end  \x01\x7f \xC3\xBCn\xC3\xAF \xE2\x82\xAC"
      "\xF0\x9F\x98\x80 <s> </s> <pad>";
  const std::string with_nul = text + std::string(1, '\0') + "x";
  EXPECT_EQ(tok_->decode(tok_->encode(text)), text);
  EXPECT_EQ(tok_->decode(tok_->encode(with_nul)), with_nul);
  // "<s>" in text is plain text, never the BOS id.
  for (int64_t id : tok_->encode("<s></s><pad>")) EXPECT_GT(id, 3);
}

TEST_F(TokenizerBpe, InvalidUtf8BecomesReplacementCharacterWithoutCrashing) {
  const std::string bad = "ab\xFF\xFE\x80 c\xC3";
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(tok_->decode(tok_->encode(bad)), "ab" + fffd + fffd + fffd + " c" + fffd);
}

TEST_F(TokenizerBpe, MatchesSentencepieceOnUnseenAndOddText) {
  TempDir dir;
  std::vector<std::string> lines;
  std::istringstream unseen(*unseen_text_);
  for (std::string line; std::getline(unseen, line);) lines.push_back(line);
  lines.insert(lines.end(), {"", " ", "  two  spaces\ttab\r", "caf\xC3\xA9 \xE2\x82\xAC 42 1999 \xF0\x9F\x98\x80",
                             "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E never seen", "bad \xFF\xFE\x80 bytes \xC3",
                             "\xED\xA0\x80 surrogate, \xC0\xAF overlong", "<s> </s> <pad> <unk> <0x41>"});
  expect_matches_spm(*tok_, lines, dir.path);
}

TEST(TokenizerBpeCompat, DefaultWhitespaceOptionsAndNoByteFallbackMatchSentencepiece) {
  // A model as spm_train makes it by default (dummy prefix, extra whitespace removed, no byte
  // fallback) but identity-normalized: exercises the code paths fbt's own models do not use.
  FBT_SKIP_WITHOUT_SHARED_DATA("tinyshakespeare/input.txt");
  TempDir dir;
  const std::string corpus = slurp(FBT_SHARED_DATA "/tinyshakespeare/input.txt").substr(0, 50'000);
  std::ofstream(dir.path / "corpus.txt") << corpus;
  sh("spm_train --input=" + (dir.path / "corpus.txt").string() + " --model_prefix=" + (dir.path / "d").string() +
     " --model_type=bpe --vocab_size=300 --normalization_rule_name=identity" +
     " --pad_id=3 --minloglevel=2 > /dev/null 2>&1");
  auto tok = BpeTokenizer::from_file((dir.path / "d.model").string());
  std::vector<std::string> lines = {"  leading and   inner   spaces  ",
                                    "First Citizen:",
                                    "x",
                                    "   ",
                                    "\xE6\x97\xA5\xE6\x9C\xAC unknown run \xE6\x97\xA5 again",
                                    "tab\there"};
  std::istringstream text(corpus.substr(20'000, 3'000));
  for (std::string line; std::getline(text, line);) lines.push_back(line);
  expect_matches_spm(*tok, lines, dir.path);
}

TEST_F(TokenizerBpe, SaveLoadAndDataDirLoad) {
  TempDir dir;
  const std::string model = (dir.path / "tokenizer.model").string();
  tok_->save(model);
  auto loaded = BpeTokenizer::from_file(model);
  EXPECT_EQ(loaded->serialized(), tok_->serialized());
  EXPECT_EQ(loaded->encode(*unseen_text_), tok_->encode(*unseen_text_));

  write_meta(dir.path, tok_->meta());
  auto via_dir = Tokenizer::load(dir.path.string());
  EXPECT_EQ(via_dir->type(), "bpe");
  EXPECT_EQ(via_dir->vocab_size(), 400);
  EXPECT_EQ(via_dir->encode(*unseen_text_), tok_->encode(*unseen_text_));

  nlohmann::json wrong = tok_->meta();
  wrong["vocab_size"] = 512;
  write_meta(dir.path, wrong);
  try {
    Tokenizer::load(dir.path.string());
    FAIL() << "expected fbt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.vocab_size"), std::string::npos) << e.what();
  }
  wrong = tok_->meta();
  wrong["model_sha256"] = std::string(64, '0');
  write_meta(dir.path, wrong);
  EXPECT_THROW(Tokenizer::load(dir.path.string()), Error);
}

TEST(TokenizerLoad, ByteTypeAndBadInputs) {
  TempDir dir;
  write_meta(dir.path, ByteTokenizer().meta());
  auto tok = Tokenizer::load(dir.path.string());
  EXPECT_EQ(tok->type(), "byte");
  EXPECT_EQ(tok->vocab_size(), 259);

  write_meta(dir.path, {{"type", "wordpiece"}});
  EXPECT_THROW(Tokenizer::load(dir.path.string()), Error);
  fs::remove(dir.path / "meta.json");
  try {
    Tokenizer::load(dir.path.string());
    FAIL() << "expected fbt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("meta.json"), std::string::npos) << e.what();
  }
  const std::string garbage = (dir.path / "garbage.model").string();
  std::ofstream(garbage) << "not a protobuf";
  try {
    BpeTokenizer::from_file(garbage);
    FAIL() << "expected fbt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("garbage.model"), std::string::npos) << e.what();
  }
}

TEST(TokenizerBpeTrain, RejectsTooSmallVocabAndIsDeterministic) {
  FBT_SKIP_WITHOUT_SHARED_DATA("tinyshakespeare/input.txt");
  BpeTrainOptions o;
  o.vocab_size = 261;
  EXPECT_THROW(BpeTokenizer::train({"some text"}, o), Error);
  const std::string corpus = slurp(FBT_SHARED_DATA "/tinyshakespeare/input.txt").substr(0, 30'000);
  o.vocab_size = 400;
  const std::string a = BpeTokenizer::train({corpus}, o)->serialized();
  const std::string b = BpeTokenizer::train({corpus}, o)->serialized();
  EXPECT_EQ(sha256_hex(a.data(), a.size()), sha256_hex(b.data(), b.size()));
}

// Lines over max_sentence_bytes are cut and a capped sample is drawn before spm_train: the
// report counts both (issue: prepare used to do this silently).
TEST(TokenizerBpeTrain, ReportCountsCutLinesAndTheSample) {
  BpeTrainOptions o;
  o.vocab_size = 300;
  o.max_sentence_bytes = 100;
  // 2 lines of 250 bytes (3 pieces each: 100 + 100 + 50), 4 short lines, one empty line.
  const std::string long_line(250, 'x');
  const std::string doc = long_line + "\nab\n\ncd ef\n" + long_line + "\ngh\nij";
  BpeTrainReport r;
  BpeTokenizer::train({doc}, o, &r);
  EXPECT_EQ(r.lines, 6);
  EXPECT_EQ(r.long_lines, 2);
  EXPECT_EQ(r.pieces, 4 + 2 * 3);
  EXPECT_EQ(r.sampled, 10);
  o.max_sentences = 7;
  BpeTrainReport sampled;
  BpeTokenizer::train({doc}, o, &sampled);
  EXPECT_EQ(sampled.pieces, 10);
  EXPECT_EQ(sampled.sampled, 7);
}

TEST(TokenizerUtf8, ValidityMatchesTheNormalizer) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain \xE6\x97\xA5 \xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("bad \xFF"));
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));  // a surrogate
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));      // overlong '/'
  EXPECT_FALSE(is_valid_utf8("cut \xE6\x97"));  // truncated at the end
}

// An external model with sentencepiece's default whitespace options changes valid text, and
// says which settings do; fbt's own models change nothing.
TEST(TokenizerBpeCompat, TextChangingSettingsAreNamed) {
  TempDir dir;
  std::ofstream(dir.path / "corpus.txt") << "the quick brown fox\njumps over the lazy dog\n";
  sh("spm_train --input=" + (dir.path / "corpus.txt").string() + " --model_prefix=" + (dir.path / "d").string() +
     " --model_type=bpe --vocab_size=60 --normalization_rule_name=identity --pad_id=3 --minloglevel=2"
     " > /dev/null 2>&1");
  const auto external = BpeTokenizer::from_file((dir.path / "d.model").string());
  EXPECT_EQ(
      external->text_changing_settings(),
      (std::vector<std::string>{"add_dummy_prefix=true", "remove_extra_whitespaces=true", "byte_fallback=false"}));
  EXPECT_NE(external->decode(external->encode("  two  spaces")), "  two  spaces");
  BpeTrainOptions o;
  o.vocab_size = 300;
  EXPECT_TRUE(BpeTokenizer::train({"abc abc abd\nabc"}, o)->text_changing_settings().empty());
}

TEST(TokenizerBpeTrain, TinyCorpusGetsASmallerVocab) {
  BpeTrainOptions o;
  o.vocab_size = 5000;
  auto tok = BpeTokenizer::train({"abc abc abd\nabc"}, o);
  EXPECT_LT(tok->vocab_size(), 5000);
  EXPECT_GE(tok->vocab_size(), 261);
  EXPECT_EQ(tok->decode(tok->encode("abc abd zzz")), "abc abd zzz");
}

}  // namespace
}  // namespace fbt
