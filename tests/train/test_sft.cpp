// Supervised fine-tuning on a conversation dataset (issue 18): the step's loss is the mean over all
// of its assistant tokens, so one micro-batch of 2 conversations equals 2 accumulated micro-batches
// of 1, and both equal that mean computed by hand from the model's own per-conversation losses.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "fbt/data/prepare.h"
#include "fbt/data/sft_data.h"
#include "fbt/train/held_out_loss.h"
#include "fbt/io/checkpoint.h"
#include "fbt/model/model.h"
#include "fbt/model/passes.h"
#include "fbt/train/trainer.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

/// A byte-tokenizer conversation dataset of `lines` (messages JSONL) in DIR/data.
std::string prepare_chats(const fs::path& dir, const std::vector<std::string>& lines, double val_fraction) {
  std::ofstream(dir / "chats.jsonl") << [&] {
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
  }();
  PrepareOptions p;
  p.inputs = {(dir / "chats.jsonl").string()};
  p.out_dir = (dir / "data").string();
  p.tokenizer = "byte";
  p.conversations = "messages";
  p.val_fraction = val_fraction;
  std::ostringstream log;
  prepare_dataset(p, log);
  return p.out_dir;
}

TrainOptions sft_run(const std::string& data, const fs::path& out, std::vector<std::string> sets) {
  TrainOptions o;
  o.config = "debug";
  o.data_dir = data;
  o.out_dir = out.string();
  o.steps = 1;
  o.sets = {"train.pass_schedule=[{\"until_fraction\":1,\"passes_probabilities\":{\"3\":1}}]",
            "train.jitter=0",
            "train.mixin_prob=0",
            "train.seq_len=64",
            "train.warmup_steps=0",
            "train.eval_every=0"};
  o.sets.insert(o.sets.end(), sets.begin(), sets.end());
  return o;
}

TEST(Sft, AccumulationWeightsEveryAssistantTokenEqually) {
  testing::TempDir tmp;
  // Two train conversations with very different numbers of assistant tokens (and a val one).
  const auto data = prepare_chats(
      tmp.path,
      {R"({"messages": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi!"}]})",
       R"({"messages": [{"role": "user", "content": "Count."}, {"role": "assistant", "content": "One, two, three, four, five."}]})",
       R"({"messages": [{"role": "user", "content": "And?"}, {"role": "assistant", "content": "Done."}]})"},
      0.3);
  const auto train = SftData::open(data, "train");
  ASSERT_EQ(train.size(), 2);
  std::ostringstream log;
  const auto one = run_training(sft_run(data, tmp.path / "b2", {"train.batch_size=2"}), log);
  const auto two =
      run_training(sft_run(data, tmp.path / "b1x2", {"train.batch_size=1", "train.batch_tokens=128"}), log);
  ASSERT_EQ(one.losses.size(), 1u);
  ASSERT_EQ(two.losses.size(), 1u);

  // By hand: the run's initial weights (same seed), each conversation's K=3 loss on its own, and
  // the mean over all assistant tokens.
  CheckpointInfo info;
  load_model((tmp.path / "b2" / "step-0000001" / "model.safetensors").string(), &info);
  torch::manual_seed(1337);
  FBT fresh(info.config);
  PassOptions po;
  po.passes = 3;
  double weighted = 0, plain_mean = 0, standard = 0;
  int64_t scored = 0;
  std::vector<int64_t> counts;
  for (int64_t i = 0; i < 2; ++i) {
    const auto mb = train.batch({i}, 64, ByteTokenizer::kPad);
    const auto out = forward_passes(fresh, mb.inputs, mb.targets, po);
    const double loss = out.loss.item<double>();
    weighted += loss * double(mb.scored);
    standard += out.losses[0].item<double>() * double(mb.scored);
    plain_mean += loss / 2;
    scored += mb.scored;
    counts.push_back(mb.scored);
  }
  const double expected = weighted / double(scored);
  EXPECT_NE(counts[0], counts[1]);
  EXPECT_GT(std::abs(expected - plain_mean), 1e-3);  // a mean of per-conversation means would differ
  EXPECT_NEAR(one.losses[0], expected, 1e-5);
  EXPECT_NEAR(two.losses[0], expected, 1e-5);
  // The validation loss weights the same way (one padded batch of both conversations).
  const auto val = evaluate_conversation_loss(fresh, train, 2, 64, ByteTokenizer::kPad, 2, -1);
  ASSERT_EQ(val.size(), 3u);
  EXPECT_NEAR(val[0], standard / double(scored), 1e-5);

  // The same step: the same weights after it.
  const auto a = load_model((tmp.path / "b2" / "step-0000001" / "model.safetensors").string());
  const auto b = load_model((tmp.path / "b1x2" / "step-0000001" / "model.safetensors").string());
  const auto bp = b->named_parameters();
  for (const auto& p : a->named_parameters())
    EXPECT_LT((p.value() - bp[p.key()]).abs().max().item<double>(), 1e-5) << p.key();
}

// Training reads whole conversations and resumes their order exactly; validation reports the
// assistant-token loss.
TEST(Sft, ResumeRepeatsTheConversationStream) {
  testing::TempDir tmp;
  std::vector<std::string> lines;
  for (int i = 0; i < 12; ++i)
    lines.push_back(R"({"messages": [{"role": "user", "content": "What is )" + std::to_string(i) +
                    R"( + 1?"}, )"
                    R"({"role": "assistant", "content": "It is )" +
                    std::to_string(i + 1) + R"(."}]})");
  const auto data = prepare_chats(tmp.path, lines, 0.25);
  std::ostringstream log;
  auto full = sft_run(data, tmp.path / "full", {"train.batch_size=2", "train.checkpoint_every=3"});
  full.steps = 6;  // 12 conversations in 2 epochs of 9 train ones: a reshuffle on the way
  const auto a = run_training(full, log);
  ASSERT_EQ(a.losses.size(), 6u);
  EXPECT_TRUE(a.validated);
  EXPECT_TRUE(std::isfinite(a.val_standard) && std::isfinite(a.val_fused1));
  fs::remove_all(tmp.path / "full" / "step-0000006");
  std::ofstream(tmp.path / "full" / "latest") << "step-0000003\n";
  TrainOptions resume;
  resume.data_dir = data;
  resume.out_dir = (tmp.path / "full").string();
  resume.resume = true;
  const auto b = run_training(resume, log);
  ASSERT_EQ(b.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(b.losses[i], a.losses[3 + i]) << i;
}

}  // namespace
}  // namespace fbt
