// `fbt import --from hf|gguf` end to end through the CLI binary on the transformers and GGUF
// fixtures (tests/fixtures/hf, tests/fixtures/gguf): the run directory it writes, generate on it
// (text in, transformers' greedy text out), and a corpus prepared with its tokenizer scored by eval-loss.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_test_helpers.h"
#include "fbt/data/tokenizer.h"
#include "fbt/io/checkpoint.h"
#include "fbt/io/safetensors.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

const fs::path kFixture = fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "hf" / "llama_tied";

TEST(ImportCli, WritesARunThatGeneratesAndPreparesData) {
  testing::TempDir tmp;
  const auto run = tmp.path / "run";
  auto r = testing::run_cli(tmp.path, "import --from hf " + kFixture.string() + " --out " + run.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("imported llama model"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("with its chat template"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_regular_file(run / "step-0000000" / "model.safetensors"));
  EXPECT_TRUE(fs::is_regular_file(run / "tokenizer" / "tokenizer.json"));
  EXPECT_TRUE(fs::is_regular_file(run / "tokenizer" / "chat_template.jinja"));
  EXPECT_EQ(testing::slurp(run / "latest").find("step-0000000"), 0u);

  // transformers' greedy continuation of the fixture's prompt, up to the EOS (<|end_of_text|>, 1).
  const auto expected = load_foreign_tensors((kFixture / "expected_logits.safetensors").string());
  std::vector<int64_t> greedy;
  for (const auto& [key, t] : expected.tensors)
    if (key == "greedy") greedy.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  greedy.erase(std::find(greedy.begin(), greedy.end(), 1), greedy.end());
  const auto tokenizer = Tokenizer::load((run / "tokenizer").string());
  testing::write_file(tmp.path / "prompt.txt", expected.metadata.at("prompt").get<std::string>());
  r = testing::run_cli(tmp.path, "generate --checkpoint " + run.string() + " --prompt-file " +
                                     (tmp.path / "prompt.txt").string() + " --max-new-tokens 8 --temperature 0");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, tokenizer->decode(greedy) + "\n");

  // A corpus tokenized with the run's tokenizer: the data dir records the same tokenizer, which
  // eval-loss accepts against the checkpoint; a byte-tokenizer dataset is refused.
  std::string sentences;  // a document fills more than one eval-loss window (65 tokens) of the val split
  for (int i = 0; i < 4; ++i) sentences += " The quick brown fox jumps over the lazy dog; DON'T stop at 12345.";
  for (int i = 0; i < 10; ++i)
    testing::write_file(tmp.path / "corpus" / ("doc" + std::to_string(i) + ".txt"),
                        "Document " + std::to_string(i) + ":" + sentences + "\n");
  r = testing::run_cli(tmp.path, "prepare --input " + (tmp.path / "corpus").string() + " --out " +
                                     (tmp.path / "data").string() + " --tokenizer-model " +
                                     (run / "tokenizer").string());
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto data_meta = nlohmann::json::parse(testing::slurp(tmp.path / "data" / "meta.json"));
  const auto run_meta = nlohmann::json::parse(testing::slurp(run / "tokenizer" / "meta.json"));
  EXPECT_EQ(data_meta.at("tokenizer"), run_meta.at("tokenizer"));  // train's identity check compares these
  EXPECT_EQ(testing::slurp(tmp.path / "data" / "tokenizer.json"), testing::slurp(run / "tokenizer" / "tokenizer.json"));
  r = testing::run_cli(tmp.path, "eval-loss --checkpoint " + run.string() + " --data " + (tmp.path / "data").string());
  EXPECT_EQ(r.rc, 0) << r.err;
  ASSERT_EQ(testing::run_cli(tmp.path, "prepare --input " + (tmp.path / "corpus").string() + " --out " +
                                           (tmp.path / "bytes").string() + " --tokenizer byte")
                .rc,
            0);
  r = testing::run_cli(tmp.path, "eval-loss --checkpoint " + run.string() + " --data " + (tmp.path / "bytes").string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("vocab_size 259"), std::string::npos) << r.err;

  r = testing::run_cli(tmp.path, "import --from hf " + kFixture.string() + " --out " + run.string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("error: --out '" + run.string() + "' already exists"), std::string::npos) << r.err;
}

TEST(ImportCli, FromGgufWritesTheRunAndTheTokenizerFiles) {
  testing::TempDir tmp;
  const auto gguf = fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "gguf" / "llama_tied_f32.gguf";
  const auto run = tmp.path / "run";
  auto r = testing::run_cli(tmp.path, "import --from gguf " + gguf.string() + " --out " + run.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("imported llama model"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensor types: {\"F32\":20}"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_regular_file(run / "step-0000000" / "model.safetensors"));
  EXPECT_TRUE(fs::is_regular_file(run / "tokenizer" / "tokenizer.json"));
  const auto record = testing::slurp(run / "run.json");
  EXPECT_NE(record.find("\"sha256_sampled\""), std::string::npos);

  // The F32 file holds the HF fixture's weights and tokenizer: generate gives transformers' greedy
  // text of the HF fixture's prompt, through the tokenizer converted from tokenizer.ggml.*.
  const auto expected = load_foreign_tensors((kFixture / "expected_logits.safetensors").string());
  std::vector<int64_t> greedy;
  for (const auto& [key, t] : expected.tensors)
    if (key == "greedy") greedy.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  greedy.erase(std::find(greedy.begin(), greedy.end(), 1), greedy.end());  // up to the EOS
  testing::write_file(tmp.path / "prompt.txt", expected.metadata.at("prompt").get<std::string>());
  r = testing::run_cli(tmp.path, "generate --checkpoint " + run.string() + " --prompt-file " +
                                     (tmp.path / "prompt.txt").string() + " --max-new-tokens 8 --temperature 0");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, Tokenizer::load((run / "tokenizer").string())->decode(greedy) + "\n");
  // A quantized qwen2 file: imported and generating too.
  const auto qwen2 = tmp.path / "qwen2";
  r = testing::run_cli(
      tmp.path, "import --from gguf " + (gguf.parent_path() / "qwen2_q4_0.gguf").string() + " --out " + qwen2.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  r = testing::run_cli(tmp.path, "generate --checkpoint " + qwen2.string() +
                                     " --prompt 'Hello world' --max-new-tokens 4 --temperature 0");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(r.out.empty());

  // A directory where a file is expected, and a file that is not GGUF: named, nothing written.
  const auto bad = tmp.path / "bad.gguf";
  testing::write_file(bad, "GGML not a gguf file");
  for (const auto& src : {kFixture, bad}) {
    r = testing::run_cli(tmp.path, "import --from gguf " + src.string() + " --out " + (tmp.path / "r2").string());
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("error: '" + src.string() + "'"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(tmp.path / "r2"));
  }
}

// Issue 36 item 4: a GGUF file whose general.name is not UTF-8 fails naming the file and the key,
// writes nothing (before: nlohmann's "[json.exception.type_error.316] invalid UTF-8 byte" and a
// stub RUNDIR with step-0000000/ and tokenizer/), and the good file then imports into the same --out.
TEST(ImportCli, GgufStringNotUtf8IsNamedAndLeavesNoStub) {
  testing::TempDir tmp;
  const auto gguf = fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "gguf" / "llama_tied_f32.gguf";
  auto bytes = testing::slurp(gguf);
  bytes[bytes.find("general.name") + 12 + 4 + 8] = '\xFF';  // key, type, length: the value's first byte
  const auto bad = tmp.path / "bad.gguf";
  testing::write_file(bad, bytes);
  const auto run = tmp.path / "run";
  auto r = testing::run_cli(tmp.path, "import --from gguf " + bad.string() + " --out " + run.string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("error: '" + bad.string() + "': metadata 'general.name' is not valid UTF-8"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(run));
  EXPECT_FALSE(fs::exists(run.string() + ".partial"));
  r = testing::run_cli(tmp.path, "import --from gguf " + gguf.string() + " --out " + run.string());
  EXPECT_EQ(r.rc, 0) << r.err;
}

// A run imported before tokenizers were: its checkpoint records the tokenizer type "hf-pending".
TEST(ImportCli, PendingTokenizerOfAnOlderImportIsNamed) {
  testing::TempDir tmp;
  const auto run = tmp.path / "run";
  ASSERT_EQ(testing::run_cli(tmp.path, "import --from hf " + kFixture.string() + " --out " + run.string()).rc, 0);
  const auto file = (run / "step-0000000" / "model.safetensors").string();
  auto model = load_model(file);
  save_model(file, model, {{"type", "hf-pending"}, {"vocab_size", 384}}, 0);
  const auto r = testing::run_cli(tmp.path, "generate --checkpoint " + run.string() + " --prompt hi");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("error: checkpoint '" + file + "'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hf-pending"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("import the model again"), std::string::npos) << r.err;
}

TEST(ImportCli, UnsupportedModelTypeFailsBeforeWriting) {
  testing::TempDir tmp;
  const auto src = tmp.path / "gpt2";
  fs::create_directories(src);
  testing::write_file(src / "config.json", R"({"model_type": "gpt2", "vocab_size": 384})");
  const auto run = tmp.path / "run";
  const auto r = testing::run_cli(tmp.path, "import --from hf " + src.string() + " --out " + run.string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("error: '" + (src / "config.json").string() +
                       "': model_type \"gpt2\" is not supported (supported: llama, qwen2, qwen3)"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(run));
}

}  // namespace
}  // namespace fbt
