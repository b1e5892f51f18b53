// `fbt import --from hf|gguf` end to end through the CLI binary on the transformers and GGUF
// fixtures (tests/fixtures/hf, tests/fixtures/gguf): the run directory it writes, and the errors
// of the commands that need the tokenizer it does not import yet.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_test_helpers.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

const fs::path kFixture = fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "hf" / "llama_tied";

TEST(ImportCli, WritesARunThatLoadsAndNamesTheMissingTokenizer) {
  testing::TempDir tmp;
  const auto run = tmp.path / "run";
  auto r = testing::run_cli(tmp.path, "import --from hf " + kFixture.string() + " --out " + run.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("imported llama model"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_regular_file(run / "step-0000000" / "model.safetensors"));
  EXPECT_EQ(testing::slurp(run / "latest").find("step-0000000"), 0u);

  r = testing::run_cli(tmp.path, "generate --checkpoint " + run.string() + " --prompt hi --max-new-tokens 4");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("error: checkpoint '" + (run / "step-0000000" / "model.safetensors").string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Hugging Face tokenizers is not implemented yet"), std::string::npos) << r.err;

  // eval-loss on a byte-tokenizer dataset: the checkpoint's pending tokenizer is named first.
  for (int i = 0; i < 10; ++i)
    testing::write_file(tmp.path / "corpus" / ("doc" + std::to_string(i) + ".txt"),
                        "Document " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog.\n");
  ASSERT_EQ(testing::run_cli(tmp.path, "prepare --input " + (tmp.path / "corpus").string() + " --out " +
                                           (tmp.path / "data").string() + " --tokenizer byte").rc, 0);
  r = testing::run_cli(tmp.path, "eval-loss --checkpoint " + run.string() + " --data " + (tmp.path / "data").string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("not implemented yet"), std::string::npos) << r.err;

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

TEST(ImportCli, UnsupportedModelTypeFailsBeforeWriting) {
  testing::TempDir tmp;
  const auto src = tmp.path / "gpt2";
  fs::create_directories(src);
  testing::write_file(src / "config.json", R"({"model_type": "gpt2", "vocab_size": 128})");
  const auto run = tmp.path / "run";
  const auto r = testing::run_cli(tmp.path, "import --from hf " + src.string() + " --out " + run.string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("error: '" + (src / "config.json").string() + "': model_type \"gpt2\" is not supported (supported: llama, qwen2, qwen3)"),
            std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(run));
}

}  // namespace
}  // namespace fbt
