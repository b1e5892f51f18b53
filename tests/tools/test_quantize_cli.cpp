// `fbt quantize` end to end: the run it writes generates and chats exactly as the fp32 run does with
// `--weights` of the same kind (the same blocks, read from the file instead of made at load), and
// it holds the blocks, the fp32 rest and the tokenizer; with --from-gguf it keeps a GGUF file's
// blocks, and `fbt bench --checkpoint` measures that run.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli_test_helpers.h"
#include "fbt/io/checkpoint.h"
#include "fbt/io/quantized_checkpoint.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

TEST(QuantizeCli, QuantisedRunGeneratesAndChatsAsTheFp32RunQuantisedAtLoad) {
  testing::TempDir tmp;
  const auto run = tmp.path / "run";
  testing::make_run_dir(run, ByteTokenizer::kVocab);
  for (const std::string weights : {"int8", "int4"}) {
    SCOPED_TRACE(weights);
    const auto q = tmp.path / ("q" + weights);
    auto r = testing::run_cli(
        tmp.path, "quantize --checkpoint " + run.string() + " --weights " + weights + " --out " + q.string());
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("to " + weights + ": "), std::string::npos) << r.out;
    EXPECT_EQ(testing::slurp(q / "latest").find("step-0000001"), 0u);
    EXPECT_EQ(testing::slurp(q / "tokenizer" / "meta.json"), testing::slurp(run / "tokenizer" / "meta.json"));
    const auto info = read_checkpoint_info((q / "step-0000001" / "model.safetensors").string());
    ASSERT_TRUE(info.quantized);
    EXPECT_EQ(info.quantized->weights, weights);
    // Smaller than the fp32 file: the blocks replace every matrix whose rows split into 32-value blocks.
    EXPECT_LT(fs::file_size(q / "step-0000001" / "model.safetensors"),
              fs::file_size(run / "step-0000001" / "model.safetensors") / 2);

    const std::string generate = " --prompt 'To be, or not' --max-new-tokens 24 --temperature 0 --mode soft";
    const auto fp32 =
        testing::run_cli(tmp.path, "generate --checkpoint " + run.string() + " --weights " + weights + generate);
    const auto quantised = testing::run_cli(tmp.path, "generate --checkpoint " + q.string() + generate);
    ASSERT_EQ(fp32.rc, 0) << fp32.err;
    ASSERT_EQ(quantised.rc, 0) << quantised.err;
    EXPECT_EQ(quantised.out, fp32.out);
    EXPECT_FALSE(quantised.out.empty());

    testing::write_file(tmp.path / "say.txt", "Good morrow\n");
    const std::string chat = " --temperature 0 --max-new-tokens 16 < " + (tmp.path / "say.txt").string();
    const auto chat_fp32 =
        testing::run_cli(tmp.path, "chat --checkpoint " + run.string() + " --weights " + weights + chat);
    const auto chat_q = testing::run_cli(tmp.path, "chat --checkpoint " + q.string() + chat);
    ASSERT_EQ(chat_q.rc, 0) << chat_q.err;
    EXPECT_EQ(chat_q.out.substr(chat_q.out.find("you>")), chat_fp32.out.substr(chat_fp32.out.find("you>")));
  }
}

// llama.cpp's Q4_K_M fixture (tests/fixtures/gguf): imported, then quantised keeping its blocks; the
// run generates, `fbt bench --checkpoint` reads the file's blocks per decode step (their bytes, not
// a requantisation's), and another file or a training benchmark is refused by name.
TEST(QuantizeCli, FromGgufKeepsTheFileBlocksAndBenchReadsThem) {
  testing::TempDir tmp;
  const auto gguf = fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "gguf" / "llama_q4_k_m.gguf";
  const auto imported = tmp.path / "imported", q = tmp.path / "q";
  auto r = testing::run_cli(tmp.path, "import --from gguf " + gguf.string() + " --out " + imported.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  r = testing::run_cli(tmp.path, "quantize --checkpoint " + imported.string() + " --weights int8 --from-gguf " +
                                     gguf.string() + " --out " + q.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("kept the blocks of " + gguf.string() + ":"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" Q4_K"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" Q6_K"), std::string::npos) << r.out;
  EXPECT_EQ(nlohmann::json::parse(testing::slurp(q / "run.json")).at("from_gguf"), gguf.string());

  r = testing::run_cli(tmp.path,
                       "generate --checkpoint " + q.string() + " --prompt 'To be' --max-new-tokens 8 --temperature 0");
  ASSERT_EQ(r.rc, 0) << r.err;

  r = testing::run_cli(tmp.path, "bench --checkpoint " + q.string() +
                                     " --device cpu --tests decode --batch-sizes 1 --contexts 8 --new-tokens 8 "
                                     "--reps 1 --warmup 0 --format json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto record = nlohmann::json::parse(r.out);
  const auto model_file = (q / "step-0000000" / "model.safetensors").string();
  EXPECT_EQ(record.at("checkpoint"), model_file);
  int64_t step_bytes = 0;  // a standard step reads every group but the fusion's
  const auto info = read_checkpoint_info(model_file);
  for (const auto& g : info.quantized->groups)
    if (g.parts[0].rfind("fusion.", 0) != 0) step_bytes += g.bytes();
  const auto& row = record.at("results").at(0);
  EXPECT_EQ(row.at("mode"), "standard");
  EXPECT_EQ(row.at("weight_bytes_per_step").get<int64_t>(), step_bytes);

  r = testing::run_cli(tmp.path, "bench --checkpoint " + q.string() + " --device cpu --tests train");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--tests train"), std::string::npos) << r.err;
  const auto other = fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "gguf" / "llama_untied_q8_0.gguf";
  r = testing::run_cli(tmp.path, "quantize --checkpoint " + imported.string() + " --weights int8 --from-gguf " +
                                     other.string() + " --out " + (tmp.path / "other").string());
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("not the file this run was imported from"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp.path / "other" / "latest"));
}

}  // namespace
}  // namespace fbt
