// SentencePiece ("llama") GGUF tokenizers: a SentencePiece BPE trained here and converted by
// llama.cpp's convert_hf_to_gguf.py (tests/fixtures/gguf/make_spm_fixtures.py) encodes and decodes
// every text of a hard set as the tokenizer transformers builds from the same file; the imported
// run's tokenizer directory gives the same ids; the merges follow the scores; broken vocabularies
// are named.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "cli_test_helpers.h"
#include "expect_error.h"
#include "fbt/data/chat_template.h"
#include "fbt/data/hf_tokenizer.h"
#include "fbt/io/gguf.h"
#include "fbt/io/gguf_import.h"
#include "fbt/io/gguf_tokenizer.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;

const fs::path kSpmDir = fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "gguf";
const std::string kSpm = (kSpmDir / "spm_llama.gguf").string();
constexpr int64_t kVocab = 700;

std::unique_ptr<HfBpeTokenizer> tokenizer_of(const GgufFile& f) {
  const auto files = hf_tokenizer_from_gguf(f);
  return HfBpeTokenizer::from_hf(files.tokenizer, files.config, kVocab, f.path);
}

std::vector<int64_t> with_prefix(const Tokenizer& tok, const std::string& text) {
  auto ids = tok.document_prefix();
  for (int64_t id : tok.encode(text)) ids.push_back(id);
  return ids;
}

nlohmann::json expected_texts() {
  return nlohmann::json::parse(testing::slurp(kSpmDir / "spm_expected.json")).at("texts");
}

TEST(SpmGgufTokenizer, EncodeAndDecodeEqualTransformers) {
  const auto tok = tokenizer_of(read_gguf(kSpm));
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  const auto texts = expected_texts();
  ASSERT_EQ(texts.size(), 21u);
  for (const auto& e : texts) {
    const auto text = e.at("text").get<std::string>();
    SCOPED_TRACE(text);
    const auto ids = e.at("ids").get<std::vector<int64_t>>();
    EXPECT_EQ(with_prefix(*tok, text), ids);  // BOS first: the file's add_bos_token
    EXPECT_EQ(tok->decode(ids), e.at("decoded").get<std::string>());
  }
}

// `fbt import` writes the converted tokenizer into the run; loaded back it is the same tokenizer.
TEST(SpmGgufTokenizer, ImportedRunTokenizerGivesTheSameIds) {
  testing::TempDir tmp;
  const auto imported = import_gguf_model(kSpm);
  EXPECT_EQ(imported.model->config().vocab_size, kVocab);
  const auto dir = (tmp.path / "tokenizer").string();
  write_hf_tokenizer_dir(dir, imported.hf_tokenizer, imported.hf_tokenizer_config, kVocab);
  const auto tok = Tokenizer::load(dir);
  for (const auto& e : expected_texts())
    EXPECT_EQ(with_prefix(*tok, e.at("text")), e.at("ids").get<std::vector<int64_t>>());
}

// The merges are the score order: SentencePiece's first learned merge (the highest-scoring piece
// of two characters after the byte pieces, "▁t") comes first; every merge is a pair of pieces whose
// concatenation is a piece.
TEST(SpmGgufTokenizer, MergesFollowTheScores) {
  const auto f = read_gguf(kSpm);
  const auto files = hf_tokenizer_from_gguf(f);
  const auto& tokens = f.metadata.at("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens[261], "\xE2\x96\x81t");  // the first piece after <unk> <s> </s>, 2 user-defined, 256 bytes
  const auto& merges = files.tokenizer.at("model").at("merges");
  ASSERT_GT(merges.size(), 400u);
  EXPECT_EQ(merges[0], nlohmann::json::array({"\xE2\x96\x81", "t"}));
  const std::set<std::string> vocab(tokens.begin(), tokens.end());
  for (const auto& m : merges) EXPECT_TRUE(vocab.count(m[0].get<std::string>() + m[1].get<std::string>())) << m.dump();
}

// The space before a text's first segment is Metaspace's, not the text's: encode_marking_prefixes
// marks it (SFT masks count bytes with it), decode strips it, decode_continuation keeps it.
TEST(SpmGgufTokenizer, PrefixSpaceIsMarkedAndKeptInContinuations) {
  const auto tok = tokenizer_of(read_gguf(kSpm));
  std::vector<bool> prefixed;
  const auto ids = tok->encode_marking_prefixes("the king", prefixed);
  ASSERT_EQ(ids.size(), prefixed.size());
  ASSERT_GE(ids.size(), 2u);
  std::vector<bool> want(ids.size(), false);
  want[0] = true;
  EXPECT_EQ(prefixed, want);
  EXPECT_EQ(tok->bytes_of(ids[0]).substr(0, 1), " ");
  EXPECT_EQ(tok->decode(ids), "the king");
  EXPECT_EQ(tok->decode_continuation(ids), " the king");
  // After an added token nothing is prepended ("first"), and a text starting with a space gets none.
  tok->encode_marking_prefixes("<s>the", prefixed);
  EXPECT_EQ(prefixed, std::vector<bool>(prefixed.size(), false));
  tok->encode_marking_prefixes(" the", prefixed);
  EXPECT_EQ(prefixed, std::vector<bool>(prefixed.size(), false));
}

// A chat rendered and tokenized whole: the mask's byte count includes the "▁" Metaspace put before
// the text (without it the tokens spell one byte more than the text and rendering is refused).
// (fbt's own template: the fixture has no chat template of its own.)
TEST(SpmGgufTokenizer, ChatMaskCountsThePrefixSpace) {
  const auto tok = tokenizer_of(read_gguf(kSpm));
  const auto t = ChatTemplate::for_tokenizer(*tok, "fbt", "spm");
  const auto r = t.render({{"user", "Good morrow"}, {"assistant", "And to you, my lord"}}, false);
  ASSERT_EQ(r.scored.size(), r.ids.size());
  std::vector<int64_t> scored;
  for (size_t i = 0; i < r.ids.size(); ++i)
    if (r.scored[i]) scored.push_back(r.ids[i]);
  // "▁And" straddles the header's space and the reply, so it is scored (transformers' rule); then
  // the end-of-turn EOS, which decodes to nothing.
  EXPECT_EQ(tok->decode_continuation(scored), " And to you, my lord");
  EXPECT_EQ(scored.back(), tok->eos_id());
  EXPECT_EQ(tok->decode(r.ids), r.text);
}

TEST(SpmGgufTokenizer, BrokenVocabulariesAreNamed) {
  const auto good = read_gguf(kSpm);
  auto f = good;
  f.metadata["tokenizer.ggml.scores"].erase(699);
  expect_error([&] { hf_tokenizer_from_gguf(f); },
               {"'" + kSpm + "'", "'tokenizer.ggml.scores' holds 699 scores for 700 tokens"});
  f = good;
  f.metadata["tokenizer.ggml.scores"][5] = "high";
  expect_error([&] { hf_tokenizer_from_gguf(f); }, {"'tokenizer.ggml.scores'[5] is not a number"});
  f = good;
  f.metadata.erase("tokenizer.ggml.scores");
  expect_error([&] { hf_tokenizer_from_gguf(f); }, {"'tokenizer.ggml.scores' is missing"});
  f = good;
  ASSERT_EQ(f.metadata["tokenizer.ggml.tokens"][5 + 0x0A], "<0x0A>");
  f.metadata["tokenizer.ggml.tokens"][5 + 0x0A] = "newline";
  expect_error([&] { hf_tokenizer_from_gguf(f); }, {"'tokenizer.ggml.tokens' lacks the byte-fallback piece <0x0A>"});
  f = good;
  f.metadata["tokenizer.ggml.add_space_prefix"] = "yes";
  expect_error([&] { hf_tokenizer_from_gguf(f); }, {"'tokenizer.ggml.add_space_prefix'"});
}

// tokenizer.ggml.add_space_prefix false (llama.cpp's reading): no "▁" before the text, no Strip.
TEST(SpmGgufTokenizer, NoSpacePrefixWhenTheFileSaysSo) {
  auto f = read_gguf(kSpm);
  f.metadata["tokenizer.ggml.add_space_prefix"] = false;
  const auto tok = tokenizer_of(f);
  const auto with = tokenizer_of(read_gguf(kSpm));
  EXPECT_EQ(tok->encode(" the"), with->encode(" the"));  // the text's own space either way
  EXPECT_EQ(tok->decode(tok->encode(" the")), " the");   // and nothing stripped
  EXPECT_NE(tok->encode("the"), with->encode("the"));
}

}  // namespace
}  // namespace fbt
