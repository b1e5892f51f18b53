// `fbt generate` and `fbt eval-loss` end to end through the CLI binary, on a checkpoint and a
// byte-tokenizer dataset written by the test; greedy output is compared with in-process generate().
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "cli_test_helpers.h"
#include "fbt/eval/loss.h"
#include "fbt/infer/decode_backend.h"
#include "fbt/infer/generate.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

using testing::CliRun;
using testing::make_run_dir;
using testing::slurp;
using testing::write_file;

struct GenerateCli : ::testing::Test {
  fs::path dir = fs::temp_directory_path() / ("fbt_gencli_" + std::to_string(::getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::path run = dir / "run";
  FBT model{nullptr};
  ByteTokenizer tokenizer;

  void SetUp() override {
    fs::remove_all(dir);
    model = make_run_dir(run, ByteTokenizer::kVocab);
  }
  void TearDown() override { fs::remove_all(dir); }

  /// Runs the fbt CLI with `args` (shell-quoted where needed), stdout and stderr apart.
  CliRun fbt_cli(const std::string& args) const { return testing::run_cli(dir, args); }

  /// Greedy continuation of `text` computed in process: the CLI's prompt is [EOS] + encode(text).
  std::string greedy_text(const std::string& text, DecodeMode mode, int64_t max_new_tokens,
                          std::shared_ptr<DecodeBackend> backend = nullptr) {
    std::vector<int64_t> prompt{tokenizer.eos_id()};
    for (int64_t id : tokenizer.encode(text)) prompt.push_back(id);
    GenerationOptions o;
    o.decoding = Decoding::make(mode, 1);
    o.max_new_tokens = max_new_tokens;
    o.eos_id = tokenizer.eos_id();
    o.pad_id = tokenizer.pad_id();
    o.backend = backend;
    return tokenizer.decode(generate(model, {prompt}, o)[0]);
  }
};

TEST_F(GenerateCli, GreedyOutputMatchesInProcessGeneration) {
  const auto r =
      fbt_cli("generate --checkpoint " + run.string() + " --prompt hello --max-new-tokens 8 --temperature 0");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, greedy_text("hello", DecodeMode::Standard, 8) + "\n");
  EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;
}

// --weights int8 / int4: the CLI decodes with Q8_0 / Q4_0 weights, as generate() with such a
// CpuDecoder does; another value is refused naming the flag.
TEST_F(GenerateCli, QuantisedWeightsMatchInProcessQuantisedGeneration) {
  for (auto [flag, weights] : {std::pair{"int8", DecodeWeights::Int8}, std::pair{"int4", DecodeWeights::Int4}}) {
    const auto r = fbt_cli("generate --checkpoint " + run.string() +
                           " --prompt hello --max-new-tokens 8 --temperature 0 --mode soft --weights " + flag);
    ASSERT_EQ(r.rc, 0) << r.err;
    auto backend = cpu_backend(std::make_shared<CpuDecoder>(model, CpuDecoderOptions{false, weights}));
    EXPECT_EQ(r.out, greedy_text("hello", DecodeMode::Soft, 8, backend) + "\n") << flag;
  }
  const auto bad = fbt_cli("generate --checkpoint " + run.string() + " --prompt hello --weights int3");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("--weights"), std::string::npos) << bad.err;
}

TEST_F(GenerateCli, AllModesPrintsOneSectionPerMode) {
  const auto r = fbt_cli("generate --checkpoint " + run.string() +
                         " --prompt 'hello there' --max-new-tokens 6 --temperature 0 --all-modes");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string expected = "=== standard ===\n" + greedy_text("hello there", DecodeMode::Standard, 6) + "\n" +
                               "=== soft ===\n" + greedy_text("hello there", DecodeMode::Soft, 6) + "\n" +
                               "=== fused(1) ===\n" + greedy_text("hello there", DecodeMode::Fused, 6) + "\n";
  EXPECT_EQ(r.out, expected);
  for (const char* label : {"[standard]", "[soft]", "[fused(1)]"})
    EXPECT_NE(r.err.find(label), std::string::npos) << r.err;
}

// More new tokens than the context leaves room for: capped, and said so (the debug context is 64:
// [EOS] + "hello" leaves 58).
TEST_F(GenerateCli, MaxNewTokensBeyondTheContextIsCappedWithANote) {
  const auto r =
      fbt_cli("generate --checkpoint " + run.string() + " --prompt hello --max-new-tokens 1000 --temperature 0");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(
      r.err.find("note: --max-new-tokens 1000 is capped at 58 by the model context (64 tokens, 6 of them the prompt)"),
      std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, greedy_text("hello", DecodeMode::Standard, 58) + "\n");
}

// Issue 36: --top-k -1 is "all tokens", as serve's top_k -1 (vLLM's convention) and --top-k 0.
TEST_F(GenerateCli, TopKMinusOneKeepsEveryTokenAsInServe) {
  const std::string sampled =
      "generate --checkpoint " + run.string() + " --prompt hi --max-new-tokens 12 --temperature 1 --seed 7";
  const auto all = fbt_cli(sampled + " --top-k 0");
  ASSERT_EQ(all.rc, 0) << all.err;
  const auto off = fbt_cli(sampled + " --top-k -1");
  ASSERT_EQ(off.rc, 0) << off.err;
  EXPECT_EQ(off.out, all.out);
}

TEST_F(GenerateCli, BadInputFailsWithAClearMessage) {
  const std::string ckpt = " --checkpoint " + run.string();
  const std::string too_long(100, 'a');  // 101 tokens with the leading EOS; the context is 64
  auto r = fbt_cli("generate" + ckpt + " --prompt " + too_long);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("101 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("context is 64"), std::string::npos) << r.err;

  r = fbt_cli("generate" + ckpt + " --prompt ''");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("empty"), std::string::npos) << r.err;

  r = fbt_cli("generate" + ckpt + " --prompt hi --mode turbo");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("standard, soft, fused"), std::string::npos) << r.err;

  r = fbt_cli("generate --checkpoint " + (dir / "nowhere").string() + " --prompt hi");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("nowhere"), std::string::npos) << r.err;
}

TEST_F(GenerateCli, EvalLossPrintsTableAndWritesJson) {
  for (int i = 0; i < 10; ++i)
    write_file(dir / "corpus" / ("doc" + std::to_string(i) + ".txt"),
               "Document " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog, again and again.\n");
  const fs::path data = dir / "data";
  auto r = fbt_cli("prepare --input " + (dir / "corpus").string() + " --out " + data.string() + " --tokenizer byte");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;

  const fs::path json = dir / "loss.json";
  r = fbt_cli("eval-loss --checkpoint " + run.string() + " --data " + data.string() +
              " --split train --max-tokens 128 --passes 2 --sequential --json " + json.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("| mode | nats/token | bits/byte | tokens |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| passes=2 |"), std::string::npos) << r.out;

  const auto results = nlohmann::json::parse(slurp(json)).at("results");
  ASSERT_EQ(results.size(), 4u);
  LossEvalOptions o;
  o.max_tokens = 128;
  o.passes = 2;
  o.rows = {sequential_row(model)};
  const auto expected = evaluate_loss(model, open_split(data.string(), "train"), tokenizer, o);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(results[i].at("name"), expected[i].name);
    EXPECT_EQ(results[i].at("tokens"), 128);
    EXPECT_NEAR(results[i].at("nats_per_token").get<double>(), expected[i].nats_per_token, 1e-6);
    EXPECT_NEAR(results[i].at("bits_per_byte").get<double>(), expected[i].bits_per_byte, 1e-6);
  }
}

TEST_F(GenerateCli, EvalLossRejectsDataOfAnotherVocab) {
  const fs::path other = dir / "other";
  make_run_dir(other, 300);
  const fs::path data = dir / "data";
  write_file(dir / "corpus" / "a.txt", "one document\n");
  write_file(dir / "corpus" / "b.txt", "another document\n");
  ASSERT_EQ(
      fbt_cli("prepare --input " + (dir / "corpus").string() + " --out " + data.string() + " --tokenizer byte").rc, 0);
  auto r = fbt_cli("eval-loss --checkpoint " + other.string() + " --data " + data.string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("vocab_size 259"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("vocab_size 300"), std::string::npos) << r.err;

  r = fbt_cli("eval-loss --checkpoint " + run.string() + " --data " + (dir / "missing").string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("meta.json"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fbt
