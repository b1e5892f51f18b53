// HfBpeTokenizer against Hugging Face tokenizers: the ids HF gives for GPT-2-, Llama-3-, Qwen2- and
// SmolLM-style tokenizers trained by HF's own trainer (tests/fixtures/hf_tokenizers), its decode,
// its pre-tokens for every Split behavior; round trips, padding ids, and named errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "expect_error.h"
#include "fbt/data/hf_pretokenizer.h"
#include "fbt/data/hf_tokenizer.h"
#include "fbt/util/error.h"
#include "temp_dir.h"
#include "cli_test_helpers.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;

const fs::path kHfTokenizerDir = fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "hf_tokenizers";

const nlohmann::json& expected() {
  static const auto j = nlohmann::json::parse(testing::slurp(kHfTokenizerDir / "expected_ids.json"));
  return j;
}

std::unique_ptr<HfBpeTokenizer> hf_fixture(const std::string& name) {
  return HfBpeTokenizer::from_file((kHfTokenizerDir / name / "tokenizer.json").string());
}

nlohmann::json fixture_json(const std::string& name) {
  return nlohmann::json::parse(testing::slurp(kHfTokenizerDir / name / "tokenizer.json"));
}

// document_prefix() + encode(text) is HF's encode(text).ids (BOS included where HF adds it), and
// decode gives HF's decode of those ids less BOS/EOS/PAD; where that is the text, it round-trips.
TEST(HfTokenizer, IdsAndTextEqualHfTokenizers) {
  int round_trips = 0;
  for (const auto& [name, cases] : expected().at("fixtures").items()) {
    SCOPED_TRACE(name);
    const auto tok = hf_fixture(name);
    for (const auto& c : cases) {
      const auto text = c.at("text").get<std::string>();
      SCOPED_TRACE(c.at("text").dump());
      std::vector<int64_t> ids = tok->document_prefix();
      for (int64_t id : tok->encode(text)) ids.push_back(id);
      EXPECT_EQ(ids, c.at("ids").get<std::vector<int64_t>>());
      EXPECT_EQ(tok->decode(ids), c.at("decoded").get<std::string>());
      if (c.at("decoded") == text) {
        EXPECT_EQ(tok->decode(tok->encode(text)), text);
        ++round_trips;
      }
    }
  }
  EXPECT_GE(round_trips, 70);  // all but the texts with BOS/EOS/PAD inline, lstrip/rstrip tokens, or NFC changes
}

TEST(HfTokenizer, PreTokensEqualHfTokenizers) {
  for (const auto& c : expected().at("pre_tokenizers")) {
    SCOPED_TRACE(c.at("pre_tokenizer").dump() + " on " + c.at("text").dump());
    const auto pre = HfPreTokenizer::from_json(c.at("pre_tokenizer"), "test");
    EXPECT_EQ(pre.split(c.at("text").get<std::string>()), c.at("pieces").get<std::vector<std::string>>());
  }
}

TEST(HfTokenizer, SpecialIdsAndDocumentPrefix) {
  const auto llama = hf_fixture("llama3"), qwen = hf_fixture("qwen2"), gpt2 = hf_fixture("gpt2");
  EXPECT_EQ(llama->bos_id(), llama->token_id("<|begin_of_text|>"));
  EXPECT_EQ(llama->document_prefix(), std::vector<int64_t>{llama->bos_id()});  // its TemplateProcessing
  EXPECT_EQ(llama->pad_id(), llama->eos_id());                                 // no pad token: padding uses EOS
  EXPECT_EQ(llama->meta().at("pad_id"), -1);
  EXPECT_FALSE(llama->chat_template().empty());
  EXPECT_TRUE(qwen->document_prefix().empty());
  EXPECT_EQ(qwen->bos_id(), -1);
  EXPECT_EQ(qwen->eos_id(), qwen->token_id("<|im_end|>"));
  EXPECT_EQ(qwen->pad_id(), qwen->token_id("<|endoftext|>"));
  EXPECT_TRUE(gpt2->document_prefix().empty());  // add_bos_token false, ByteLevel post-processor
  EXPECT_TRUE(gpt2->chat_template().empty());
  EXPECT_FALSE(gpt2->meta().contains("chat_template"));
  EXPECT_EQ(gpt2->vocab_size(), 364);
}

// Invalid UTF-8 is repaired as Rust's from_utf8_lossy does (one U+FFFD per maximal malformed
// subsequence) before encoding; decode repairs the bytes of partial characters the same way.
TEST(HfTokenizer, InvalidUtf8BecomesReplacementCharacters) {
  const auto tok = hf_fixture("gpt2");
  EXPECT_EQ(tok->encode("a\xFF"
                        "b\xE2\x82"),
            tok->encode("a\xEF\xBF\xBD"
                        "b\xEF\xBF\xBD"));
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");  // a truncated 4-byte sequence: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate: three
  const auto ids = tok->encode("\xF0\x9F\x98\x80");  // 😀, one byte-level token per byte here
  ASSERT_GT(ids.size(), 1u);
  EXPECT_EQ(tok->decode({ids[0]}), "\xEF\xBF\xBD");
  EXPECT_EQ(tok->decode(ids), "\xF0\x9F\x98\x80");
}

// A model's embedding may have more rows than the tokenizer has tokens: those ids decode to "".
TEST(HfTokenizer, PaddedVocabAndIdRange) {
  const auto text = testing::slurp(kHfTokenizerDir / "qwen2" / "tokenizer.json");
  const auto tok = HfBpeTokenizer::from_text(text, "qwen2", 400, {-1, 2, -1, false});
  EXPECT_EQ(tok->vocab_size(), 400);
  EXPECT_EQ(tok->decode({399, 360}), "");
  expect_error([&] { tok->decode({400}); }, {"400", "outside the vocab [0, 400)"});
  expect_error(
      [&] {
        HfBpeTokenizer::from_text(text, "'x/tokenizer.json'", 300, {-1, 2, -1, false});
      },
      {"'x/tokenizer.json'", "model.vocab", "outside the model's vocabulary [0, 300)"});
  expect_error([&] { HfBpeTokenizer::from_text(text, "t.json", 400, {-1, 450, -1, false}); }, {"t.json", "eos_id 450"});
}

/// `edit` applied to the llama3 fixture's tokenizer.json, parsed as `t.json`: the error's text.
void expect_refused(const std::function<void(nlohmann::json&)>& edit, const std::vector<std::string>& parts) {
  auto j = fixture_json("llama3");
  edit(j);
  expect_error([&] { HfBpeTokenizer::from_text(j.dump(), "'t.json'", 400, {0, 1, -1, true}); }, parts);
}

TEST(HfTokenizer, UnsupportedPipelinesAreNamed) {
  expect_error([&] { HfBpeTokenizer::from_text("{\"model\": ", "'t.json'", 400, {}); }, {"'t.json'", "not valid JSON"});
  expect_refused([](auto& j) { j["model"]["type"] = "WordPiece"; },
                 {"'t.json'", "model.type", "WordPiece", "only BPE"});
  expect_refused([](auto& j) { j["model"]["type"] = "Unigram"; }, {"'t.json'", "model.type", "Unigram"});
  expect_refused([](auto& j) { j["model"]["byte_fallback"] = true; },
                 {"'t.json'", "model.byte_fallback"});  // with ByteLevel
  expect_refused([](auto& j) { j["model"]["dropout"] = 0.1; }, {"'t.json'", "model.dropout"});
  expect_refused([](auto& j) { j["model"]["merges"][0] = "zzz qqq"; },
                 {"'t.json'", "model.merges[0]", "not in model.vocab"});
  expect_refused([](auto& j) { j["normalizer"] = {{"type", "NFKC"}}; }, {"'t.json'", "normalizer.type", "NFKC"});
  // A SentencePiece-style stage beside byte-level ones, or one fbt does not implement.
  expect_refused(
      [](auto& j) {
        j["decoder"] = {{"type", "Metaspace"}};
      },
      {"'t.json'", "byte-level", "needs a ByteLevel decoder"});
  expect_refused(
      [](auto& j) {
        j["pre_tokenizer"] = {{"type", "Metaspace"}};
      },
      {"'t.json'", "pre_tokenizer is a Metaspace", "SentencePiece-style decoder"});
  expect_refused(
      [](auto& j) {
        j["pre_tokenizer"] = {{"type", "Metaspace"}, {"prepend_scheme", "sometimes"}};
      },
      {"'t.json'", "pre_tokenizer.prepend_scheme", "sometimes"});
  expect_refused(
      [](auto& j) {
        j["decoder"] = {
            {"type", "Sequence"},
            {"decoders", {{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}, {{"type", "Fuse"}}}}};
      },
      {"'t.json'", "decoder.decoders[0]", "Strip (after Fuse)"});
  expect_refused([](auto& j) { j["decoder"] = {{"type", "WordPiece"}}; }, {"'t.json'", "field decoder", "WordPiece"});
  expect_refused([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["type"] = "Whitespace"; },
                 {"'t.json'", "pre_tokenizer.pretokenizers[0].type", "Whitespace"});
  expect_refused([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; },
                 {"'t.json'", "pre_tokenizer.pretokenizers[0].behavior", "Sideways"});
  expect_refused([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"; },
                 {"'t.json'", "pre_tokenizer.pretokenizers[0].pattern", "does not compile"});
  expect_refused(
      [](auto& j) { std::swap(j["pre_tokenizer"]["pretokenizers"][0], j["pre_tokenizer"]["pretokenizers"][1]); },
      {"'t.json'", "pre_tokenizer.pretokenizers[0]", "ByteLevel"});
  expect_refused([](auto& j) { j["added_tokens"][0]["id"] = 1000; }, {"'t.json'", "added_tokens[0].id", "1000"});
  // A post-processor appending EOS is refused where the special ids are resolved.
  auto j = fixture_json("llama3");
  j["post_processor"]["processors"][1]["single"].push_back(
      {{"SpecialToken", {{"id", "<|end_of_text|>"}, {"type_id", 0}}}});
  expect_error(
      [&] {
        hf_special_ids(j, nlohmann::json::object({{"eos_token", "<|end_of_text|>"}}), "'t.json'", "'c.json'");
      },
      {"'t.json'", "post_processor.processors[1].single", "after the text"});
  expect_error([&] { hf_special_ids(fixture_json("llama3"), nlohmann::json::object(), "'t.json'", "'c.json'"); },
               {"'c.json'", "eos_token"});
}

// An fbt tokenizer directory: what write_hf_tokenizer_dir writes, Tokenizer::load reads back (sha checked).
TEST(HfTokenizer, TokenizerDirectoryRoundTrips) {
  testing::TempDir tmp;
  const auto dir = (tmp.path / "tokenizer").string();
  const auto config = nlohmann::json::parse(testing::slurp(kHfTokenizerDir / "llama3" / "tokenizer_config.json"));
  const auto meta = write_hf_tokenizer_dir(dir, fixture_json("llama3"), config, 384);
  EXPECT_EQ(meta.at("type"), "hf_bpe");
  EXPECT_EQ(meta.at("vocab_size"), 384);
  EXPECT_EQ(meta.at("add_bos"), true);
  const auto tok = Tokenizer::load(dir);
  EXPECT_EQ(tok->meta(), meta);
  EXPECT_EQ(testing::slurp(fs::path(dir) / "chat_template.jinja"), config.at("chat_template").get<std::string>());
  const std::string text = "DON'T stop: 12345 😀";
  EXPECT_EQ(tok->encode(text), hf_fixture("llama3")->encode(text));
  testing::write_file(fs::path(dir) / "tokenizer.json", testing::slurp(fs::path(dir) / "tokenizer.json") + " ");
  expect_error([&] { Tokenizer::load(dir); }, {"tokenizer.json", "sha256", "tokenizer.model_sha256"});
}

}  // namespace
}  // namespace fbt
