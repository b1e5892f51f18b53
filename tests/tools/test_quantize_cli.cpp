// `fbt quantize` end to end: the run it writes generates and chats exactly as the fp32 run does with
// `--weights` of the same kind (the same blocks, read from the file instead of made at load), and
// it holds the blocks, the fp32 rest and the tokenizer.
#include <gtest/gtest.h>

#include <filesystem>

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

}  // namespace
}  // namespace fbt
