// GGUF import (issue 17): the tiny GGUF files of tests/fixtures/gguf (F32, Q8_0, Q4_0, Q4_1 of the
// HF fixtures, written like llama.cpp's converter) give transformers' logits of the same files in
// fbt's standard mode; the llama q/k un-permutation restores the HF weights exactly; the
// tokenizer becomes HF files that encode as the HF fixtures' tokenizer.json; unsupported
// architectures and tokenizers, and files without a tokenizer, are named.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <map>

#include "cli_test_helpers.h"
#include "expect_error.h"
#include "fbt/data/hf_tokenizer.h"
#include "fbt/io/gguf_import.h"
#include "fbt/io/gguf_tokenizer.h"
#include "fbt/io/safetensors.h"
#include "temp_dir.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;

const fs::path kGgufImportDir = fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "gguf";
const std::vector<std::string> kGgufFixtures = {"llama_tied_f32", "llama_untied_q8_0", "qwen2_q4_0", "qwen3_q4_1"};

std::string gguf_fixture(const std::string& name) { return (kGgufImportDir / (name + ".gguf")).string(); }

TEST(GgufImport, StandardLogitsEqualTransformers) {
  for (const auto& name : kGgufFixtures) {
    SCOPED_TRACE(name);
    auto imported = import_gguf_model(gguf_fixture(name));
    torch::Tensor tokens, expected;  // [1,T] int64, [1,T,V] fp32: transformers on the same GGUF file
    for (const auto& [key, t] :
         load_foreign_tensors((kGgufImportDir / (name + ".expected.safetensors")).string()).tensors)
      (key == "tokens" ? tokens : expected) = t;
    torch::NoGradGuard no_grad;
    const double diff = testing::max_abs_diff(imported.model->forward(tokens), expected);
    std::cout << "[ GgufImport ] " << name << ": max |logit - transformers| = " << diff << "\n";
    EXPECT_LT(diff, 2e-5);
  }
}

// The F32 file holds the HF fixture's weights with q/k permuted as llama.cpp does: un-permuted,
// every parameter equals the HF import's bit for bit (the fusion too: same seed).
TEST(GgufImport, UnpermutedWeightsEqualTheHfImport) {
  auto gguf = import_gguf_model(gguf_fixture("llama_tied_f32"));
  auto hf = import_hf_model((fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "hf" / "llama_tied").string());
  auto config = gguf.model->config();
  EXPECT_NEAR(config.norm_eps, 1e-5, 1e-12);  // GGUF stores it as a FLOAT32
  config.norm_eps = hf.model->config().norm_eps;
  EXPECT_EQ(config, hf.model->config());
  const auto hf_params = hf.model->named_parameters();
  for (const auto& p : gguf.model->named_parameters())
    EXPECT_TRUE(torch::equal(p.value(), hf_params[p.key()])) << p.key();
  // The permutation itself: head 0 of a [2·4, 1] weight, rows x0 x1 y0 y1 -> interleaved x0 y0 x1 y1.
  const auto w = torch::arange(8, torch::kFloat).reshape({8, 1});
  const auto permuted =
      torch::tensor({0.f, 2.f, 1.f, 3.f, 4.f, 6.f, 5.f, 7.f}).reshape({8, 1});  // LlamaModel.permute(w, 2, 2)
  EXPECT_TRUE(torch::equal(unpermute_llama_qk(permuted, 2), w));
}

TEST(GgufImport, ConfigsAndProvenance) {
  const auto q8 = import_gguf_model(gguf_fixture("llama_untied_q8_0"));
  const auto& c = q8.model->config();
  EXPECT_EQ(c.block, BlockKind::Llama);
  EXPECT_FALSE(c.tie_embeddings);  // output.weight present
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(q8.source.at("format"), "gguf");
  EXPECT_EQ(q8.source.at("architecture"), "llama");
  EXPECT_EQ(q8.source.at("name"), "llama_untied_q8_0");
  EXPECT_EQ(q8.source.at("tensor_types").at("Q8_0"), 14);  // embedding, head, 6 of each block's 7 matrices
  EXPECT_EQ(q8.source.at("tensor_types").at("BF16"), 2);   // ffn_down: 48-value rows, not whole blocks
  EXPECT_EQ(q8.source.at("sha256_sampled").get<std::string>().size(), 64u);
  const auto qwen2 = import_gguf_model(gguf_fixture("qwen2_q4_0")).model->config();
  EXPECT_TRUE(qwen2.attention_bias && !qwen2.attention_out_bias && !qwen2.qk_norm);
  EXPECT_EQ(qwen2.doc_separator_id, 2);  // tokenizer.ggml.eos_token_id: <|im_end|>
  const auto qwen3 = import_gguf_model(gguf_fixture("qwen3_q4_1")).model->config();
  EXPECT_TRUE(qwen3.qk_norm && !qwen3.attention_bias);
  EXPECT_EQ(qwen3.head_dim(), 32);  // attention.key_length, not 64 / 4
}

TEST(GgufImport, TokenizerBecomesHfFiles) {
  const auto imported = import_gguf_model(gguf_fixture("llama_tied_f32"));
  const auto& t = imported.hf_tokenizer;
  ASSERT_TRUE(t.is_object());
  EXPECT_EQ(t.at("model").at("type"), "BPE");
  EXPECT_EQ(t.at("model").at("vocab").size(), 384u);  // the HF tokenizer's 360 and 24 "[PAD{i}]" (UNUSED)
  EXPECT_EQ(t.at("model").at("vocab").at("<|end_of_text|>"), 1);
  EXPECT_EQ(t.at("model").at("vocab").at("[PAD383]"), 383);
  EXPECT_TRUE(t.at("model").at("ignore_merges").get<bool>());  // llama-bpe, as Llama-3's tokenizer.json
  EXPECT_EQ(t.at("model").at("merges").size(), 99u);
  ASSERT_EQ(t.at("added_tokens").size(), 5u);  // the CONTROL tokens, not the UNUSED padding
  EXPECT_EQ(t.at("added_tokens")[3].at("content"), "<|im_start|>");
  EXPECT_TRUE(t.at("added_tokens")[3].at("special").get<bool>());
  EXPECT_EQ(t.at("pre_tokenizer").at("pretokenizers")[0].at("type"), "Split");  // llama-bpe
  EXPECT_EQ(t.at("decoder").at("type"), "ByteLevel");
  EXPECT_EQ(imported.hf_tokenizer_config.at("bos_token"), "<|begin_of_text|>");
  EXPECT_EQ(imported.hf_tokenizer_config.at("eos_token"), "<|end_of_text|>");
  EXPECT_TRUE(imported.hf_tokenizer_config.at("add_bos_token").get<bool>());
  EXPECT_NE(imported.hf_tokenizer_config.at("chat_template").get<std::string>().find("<|im_start|>"),
            std::string::npos);
  const auto qwen2 = import_gguf_model(gguf_fixture("qwen2_q4_0"));
  EXPECT_TRUE(qwen2.hf_tokenizer_config.at("bos_token").is_null());
  EXPECT_EQ(qwen2.hf_tokenizer_config.at("pad_token"), "<|endoftext|>");
  EXPECT_FALSE(qwen2.hf_tokenizer_config.at("add_bos_token").get<bool>());

  const auto llama3 = hf_pre_tokenizer_of_gguf("llama-bpe", "x.gguf");
  EXPECT_EQ(llama3.at("pretokenizers").size(), 2u);
  EXPECT_EQ(llama3.at("pretokenizers")[0].at("behavior"), "Isolated");
  EXPECT_FALSE(llama3.at("pretokenizers")[1].at("use_regex").get<bool>());
  EXPECT_EQ(hf_pre_tokenizer_of_gguf("default", "x.gguf").at("pretokenizers").size(), 5u);  // 4 regexes + ByteLevel
  EXPECT_EQ(hf_pre_tokenizer_of_gguf("smollm", "x.gguf").at("pretokenizers")[0].at("type"), "Digits");
  expect_error([] { hf_pre_tokenizer_of_gguf("deepseek-llm", "x.gguf"); },
               {"x.gguf", "tokenizer.ggml.pre", "\"deepseek-llm\"", "smollm", "llama-bpe", "qwen2"});
}

// Each fixture's tokenizer, converted to tokenizer.ggml.* as llama.cpp's converter does and back to
// HF files by fbt, encodes as HF tokenizers does with the HF fixture's own tokenizer.json
// (expected_ids.json, made by make_fixtures.py) and as fbt does with that tokenizer.json.
TEST(GgufImport, TokenizerGivesTheHfFixturesIds) {
  const auto expected = nlohmann::json::parse(testing::slurp(kGgufImportDir / "expected_ids.json")).at("fixtures");
  const std::map<std::string, std::string> hf = {{"llama_tied_f32", "llama_tied"},
                                                 {"llama_untied_q8_0", "llama_untied"},
                                                 {"qwen2_q4_0", "qwen2"},
                                                 {"qwen3_q4_1", "qwen3"}};
  for (const auto& name : kGgufFixtures) {
    SCOPED_TRACE(name);
    const auto imported = import_gguf_model(gguf_fixture(name));
    const auto vocab = imported.model->config().vocab_size;
    const auto gguf =
        HfBpeTokenizer::from_hf(imported.hf_tokenizer, imported.hf_tokenizer_config, vocab, gguf_fixture(name));
    const auto hf_dir = fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "hf" / hf.at(name);
    const auto own = HfBpeTokenizer::from_hf(nlohmann::json::parse(testing::slurp(hf_dir / "tokenizer.json")),
                                             nlohmann::json::parse(testing::slurp(hf_dir / "tokenizer_config.json")),
                                             vocab, hf_dir.string());
    ASSERT_EQ(expected.at(name).size(), 5u);
    for (const auto& e : expected.at(name)) {
      const auto text = e.at("text").get<std::string>();
      SCOPED_TRACE(text);
      auto ids = gguf->document_prefix();  // HF's ids hold the BOS (Llama-3) that fbt's encode leaves to documents
      for (const auto id : gguf->encode(text)) ids.push_back(id);
      EXPECT_EQ(ids, e.at("ids").get<std::vector<int64_t>>());
      EXPECT_EQ(gguf->encode(text), own->encode(text));
    }
    EXPECT_EQ(gguf->bos_id(), own->bos_id());
    EXPECT_EQ(gguf->eos_id(), own->eos_id());
    EXPECT_EQ(gguf->pad_id(), own->pad_id());
    EXPECT_EQ(gguf->document_prefix(), own->document_prefix());
    EXPECT_EQ(gguf->chat_template(), own->chat_template());
  }
}

TEST(GgufImport, RunDirectoryHoldsTheTokenizerFiles) {
  testing::TempDir tmp;
  const auto run = tmp.path / "run";
  write_imported_run(import_gguf_model(gguf_fixture("llama_tied_f32")), run.string());
  const auto tokenizer = nlohmann::json::parse(testing::slurp(run / "tokenizer" / "tokenizer.json"));
  EXPECT_EQ(tokenizer.at("model").at("vocab").size(), 384u);
  EXPECT_TRUE(fs::is_regular_file(run / "tokenizer" / "chat_template.jinja"));
  const auto meta = nlohmann::json::parse(testing::slurp(run / "tokenizer" / "meta.json")).at("tokenizer");
  EXPECT_EQ(meta.at("type"), "hf_bpe");
  EXPECT_EQ(meta.at("vocab_size"), 384);
  EXPECT_EQ(meta.at("bos_id"), 0);
  EXPECT_TRUE(meta.at("add_bos").get<bool>());
  const auto record = nlohmann::json::parse(testing::slurp(run / "run.json"));
  EXPECT_EQ(record.at("imported_from").at("format"), "gguf");
  EXPECT_EQ(record.at("imported_from").at("tokenizer_pre"), "llama-bpe");
  EXPECT_EQ(record.at("imported_from").at("tensor_types").at("F32"), 20);  // all: embedding, final norm, 9 per block
}

// Issue 36 item 4: the run is written under RUNDIR.partial and renamed at the end, so a write that
// fails part-way (here: run.json, the last file, cannot be serialized) leaves neither RUNDIR nor
// RUNDIR.partial, and the same RUNDIR can be imported into afterwards. Before, the failure left
// RUNDIR/step-0000000/ and RUNDIR/tokenizer/ behind and the next import failed with "already exists".
TEST(GgufImport, FailedWriteLeavesNoRunDirectory) {
  testing::TempDir tmp;
  const auto run = tmp.path / "run";
  auto imported = import_gguf_model(gguf_fixture("llama_tied_f32"));
  const auto good = imported.source;
  imported.source["note"] = std::string("\xFF");  // nlohmann refuses to dump invalid UTF-8
  EXPECT_ANY_THROW(write_imported_run(imported, run.string()));
  EXPECT_FALSE(fs::exists(run));
  EXPECT_FALSE(fs::exists(run.string() + ".partial"));
  imported.source = good;
  fs::create_directories(run);  // an empty directory is a valid --out, and is replaced
  write_imported_run(imported, run.string());
  EXPECT_TRUE(fs::is_regular_file(run / "run.json"));
  EXPECT_TRUE(fs::is_regular_file(run / "step-0000000" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(run.string() + ".partial"));
}

/// A copy of the llama fixture in `dir` with the first occurrence of each `from` replaced by its
/// `to` (same length, so every offset stays valid).
std::string patched(const fs::path& dir, const std::vector<std::pair<std::string, std::string>>& edits) {
  auto bytes = testing::slurp(gguf_fixture("llama_tied_f32"));
  for (const auto& [from, to] : edits) {
    const auto at = bytes.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) bytes.replace(at, from.size(), to);
  }
  const auto path = (dir / "patched.gguf").string();
  testing::write_file(path, bytes);
  return path;
}
std::string patched(const fs::path& dir, const std::string& from, const std::string& to) {
  return patched(dir, {{from, to}});
}

TEST(GgufImport, UnsupportedArchitectureAndTokenizerAreNamed) {
  testing::TempDir tmp;
  // general.architecture's value (a 5-byte string after the key, its type and its length).
  auto path = patched(tmp.path, std::string("\x05\0\0\0\0\0\0\0llama", 13), std::string("\x05\0\0\0\0\0\0\0gemma", 13));
  expect_error([&] { import_gguf_model(path); },
               {"'" + path + "'", "architecture \"gemma\"", "not supported", "llama, qwen2, qwen3"});
  path = patched(tmp.path, std::string("\x04\0\0\0\0\0\0\0gpt2", 12), std::string("\x04\0\0\0\0\0\0\0bert", 12));
  expect_error([&] { import_gguf_model(path); }, {path, "tokenizer.ggml.model", "\"bert\"", "gpt2"});
  path = patched(tmp.path, "llama-bpe", "llama-xxx");
  expect_error([&] { import_gguf_model(path); }, {path, "tokenizer.ggml.pre", "\"llama-xxx\""});
  path = patched(tmp.path, "llama.feed_forward_length", "llama.feed_forward_lengtX");
  expect_error([&] { import_gguf_model(path); }, {path, "metadata key 'llama.feed_forward_length' is missing"});
  path = patched(tmp.path, "blk.1.ffn_up.weight", "blk.1.ffn_up.weighX");
  expect_error([&] { import_gguf_model(path); }, {path, "missing tensor 'blk.1.ffn_up.weight'"});
}

// A file without tokenizer metadata (no tokenizer.ggml.model; the rest of tokenizer.ggml.* ignored)
// is refused, naming the file and the key, before any weight is read: a missing tensor is not
// what it reports.
TEST(GgufImport, FileWithoutTokenizerIsNamed) {
  testing::TempDir tmp;
  const auto path = patched(
      tmp.path, {{"tokenizer.ggml.model", "tokenizer.ggml.modeX"}, {"blk.1.ffn_up.weight", "blk.1.ffn_up.weighX"}});
  expect_error([&] { import_gguf_model(path); },
               {"'" + path + "'", "metadata key 'tokenizer.ggml.model' is missing", "no tokenizer"});
  expect_error([&] { hf_tokenizer_from_gguf(read_gguf(path)); }, {path, "tokenizer.ggml.model"});
}

}  // namespace
}  // namespace fbt
