// Training: pass-schedule proportions, LR schedule, config overrides, exact resume, and a
// 200-step debug run on TinyShakespeare that must beat the unigram entropy (issue #3 tests).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fbt/error.h"
#include "fbt/prepare.h"
#include "fbt/train_config.h"
#include "fbt/trainer.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

TEST(PassSchedule, ProportionsOverTenThousandDraws) {
  PassSchedule s;  // default: K=1 until 0.75, then K=2 (0.88) / K=3 (0.12)
  std::mt19937_64 rng(1);
  const int64_t total = 10000;
  std::map<int64_t, int64_t> early, late;
  for (int64_t step = 0; step < total; ++step) {
    const int64_t k = s.draw(step, total, rng);
    (step < 7500 ? early : late)[k]++;
  }
  EXPECT_EQ(early[1], 7500);
  // Binomial(2500, 0.12): sd = sqrt(2500·0.12·0.88) ≈ 16; allow 4 sd.
  EXPECT_NEAR(late[3], 300, 65);
  EXPECT_EQ(late[2] + late[3], 2500);
  // Overall 75/22/3 gives 1·0.75 + 2·0.22 + 3·0.03 = 1.28 passes per step (paper: 1.28×).
  EXPECT_NEAR(s.expected_passes(), 1.28, 1e-12);
}

TEST(PassSchedule, RejectsBadPhases) {
  EXPECT_THROW(PassSchedule::from_json(nlohmann::json::parse(R"([{"until_fraction":1,"passes_probabilities":{"1":0.5}}])"), "s"), Error);
  EXPECT_THROW(PassSchedule::from_json(nlohmann::json::parse(R"([{"until_fraction":0.5,"passes_probabilities":{"1":1}}])"), "s"), Error);
  EXPECT_THROW(PassSchedule::from_json(nlohmann::json::parse(R"([{"until_fraction":1,"passes_probabilities":{"0":1}}])"), "s"), Error);
}

TEST(TrainConfig, WarmupThenCosine) {
  TrainConfig c;
  c.steps = 110;
  c.warmup_steps = 10;
  c.lr = 1.0;
  c.min_lr_fraction = 0.1;
  EXPECT_DOUBLE_EQ(c.lr_at(0), 0.1);
  EXPECT_DOUBLE_EQ(c.lr_at(9), 1.0);
  EXPECT_DOUBLE_EQ(c.lr_at(10), 1.0);
  EXPECT_NEAR(c.lr_at(60), 0.1 + 0.9 * 0.5, 1e-12);  // halfway: cos(π/2) = 0
  EXPECT_NEAR(c.lr_at(110), 0.1, 1e-12);
}

TEST(RunConfig, SetOverridesAndErrors) {
  auto rc = RunConfig::load("debug");
  rc.set("model.d_model=128");
  rc.set("lr=0.003");
  rc.set("model.fusion=glu_plus_token");
  rc.set("train.pass_schedule=[{\"until_fraction\":1,\"passes_probabilities\":{\"2\":1}}]");
  EXPECT_EQ(rc.model.d_model, 128);
  EXPECT_DOUBLE_EQ(rc.train.lr, 0.003);
  EXPECT_EQ(rc.model.fusion, Fusion::GluPlusToken);
  EXPECT_EQ(rc.train.pass_schedule.phases[0].passes_probabilities.at(2), 1.0);
  auto message = [&](const std::string& s) {
    try {
      rc.set(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("model.d_model=abc").find("d_model"), std::string::npos);
  EXPECT_NE(message("train.steps=1.5").find("integer"), std::string::npos);
  EXPECT_NE(message("model.nope=1").find("unknown key 'nope'"), std::string::npos);
  EXPECT_NE(message("nokey").find("key=value"), std::string::npos);
}

struct TrainRun : ::testing::Test {
  testing::TempDir tmp;
  fs::path dir = tmp.path;

  /// Byte-level TinyShakespeare (the shared copy), prepared once per test.
  std::string prepare_shakespeare() {
    PrepareOptions p;
    p.inputs = {std::string(FBT_SHARED_DATA) + "/tinyshakespeare/input.txt"};
    p.out_dir = (dir / "data").string();
    p.tokenizer = "byte";
    std::ostringstream log;
    prepare_dataset(p, log);
    return p.out_dir;
  }
};

TEST_F(TrainRun, ResumeReproducesTheUninterruptedLossSequence) {
  const auto data = prepare_shakespeare();
  TrainOptions o;
  o.config = "debug";
  o.data_dir = data;
  // K=1..3 from the start so jitter, mixin and pass draws all have to resume exactly.
  o.sets = {"train.pass_schedule=[{\"until_fraction\":1,\"passes_probabilities\":{\"1\":0.4,\"2\":0.4,\"3\":0.2}}]",
            "train.batch_size=4", "train.eval_every=0", "train.eval_tokens=2048"};
  std::ostringstream log;
  o.out_dir = (dir / "run").string();
  o.steps = 12;
  o.sets.push_back("train.checkpoint_every=6");
  const auto full = run_training(o, log).losses;
  ASSERT_EQ(full.size(), 12u);
  // Go back to the step-6 checkpoint and resume in a fresh model/optimiser/loader.
  std::ofstream(dir / "run" / "latest") << "step-0000006\n";
  fs::remove_all(dir / "run" / "step-0000012");
  TrainOptions r;
  r.data_dir = data;
  r.out_dir = o.out_dir;
  r.resume = true;
  const auto second = run_training(r, log).losses;
  ASSERT_EQ(second.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(second[i], full[6 + i]) << "step " << 7 + i;
}

TEST_F(TrainRun, RefusesToOverwriteADifferentRun) {
  const auto data = prepare_shakespeare();
  TrainOptions o;
  o.config = "debug";
  o.data_dir = data;
  o.out_dir = (dir / "run").string();
  o.steps = 2;
  o.sets = {"train.eval_tokens=1024"};
  std::ostringstream log;
  run_training(o, log);
  EXPECT_THROW(run_training(o, log), Error);
  o.force = true;
  EXPECT_NO_THROW(run_training(o, log));
}

// A learning rate that overflows the weights makes every later loss non-finite: those updates
// are skipped, logged, and after max_bad_steps in a row the run stops with a clear error
// (after writing a checkpoint of the last state for inspection).
TEST_F(TrainRun, NonFiniteLossesStopTheRun) {
  const auto data = prepare_shakespeare();
  TrainOptions o;
  o.config = "debug";
  o.data_dir = data;
  o.out_dir = (dir / "run").string();
  o.steps = 50;
  o.sets = {"train.lr=1e30", "train.warmup_steps=0", "train.grad_clip=0", "train.max_bad_steps=3",
            "train.eval_every=0", "train.checkpoint_every=0"};
  std::ostringstream log;
  try {
    run_training(o, log);
    FAIL() << "no error; log:\n" << log.str();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 consecutive non-finite steps"), std::string::npos) << e.what();
  }
  std::ifstream metrics(dir / "run" / "metrics.jsonl");
  int skipped = 0;
  for (std::string line; std::getline(metrics, line);) skipped += line.find("\"skipped\"") != std::string::npos;
  EXPECT_EQ(skipped, 3);
}

// 200 steps of the debug model on byte-level TinyShakespeare. Threshold derived in the test:
// the validation loss must fall below the unigram entropy of the validation bytes, i.e. the
// model must have learned context (a uniform guess is ln 259 ≈ 5.56 nats; unigram ≈ 3.3).
TEST_F(TrainRun, DebugModelLearnsTinyShakespeare) {
  const auto data = prepare_shakespeare();
  std::ifstream f(std::string(FBT_SHARED_DATA) + "/tinyshakespeare/input.txt", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(f)), {});
  std::map<unsigned char, double> counts;
  for (unsigned char ch : text) counts[ch] += 1;
  double unigram = 0;
  for (const auto& [ch, n] : counts) unigram -= n / text.size() * std::log(n / text.size());
  TrainOptions o;
  o.config = "debug";
  o.data_dir = data;
  o.out_dir = (dir / "run").string();
  o.steps = 200;
  o.sets = {"train.lr=0.003", "train.batch_size=16", "train.eval_tokens=16384"};
  std::ostringstream log;
  const auto result = run_training(o, log);
  std::cout << "unigram entropy " << unigram << " nats; val standard " << result.val_standard
            << ", fused(1) " << result.val_fused1 << "\n";
  EXPECT_LT(result.val_standard, unigram);
  EXPECT_TRUE(fs::is_regular_file(dir / "run" / "step-0000200" / "model.safetensors"));
}

}  // namespace
}  // namespace fbt
