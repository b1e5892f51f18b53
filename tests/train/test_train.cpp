// Training: pass-schedule proportions, LR schedule, config overrides, exact resume, and a
// 200-step debug run on TinyShakespeare that must beat the unigram entropy (issue #3 tests).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fbt/data/prepare.h"
#include "fbt/io/checkpoint.h"
#include "fbt/io/run_dir.h"
#include "fbt/train/train_config.h"
#include "fbt/train/trainer.h"
#include "fbt/util/error.h"
#include "expect_error.h"
#include "metrics_lines.h"
#include "temp_dir.h"
#include "shared_data.h"

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
  EXPECT_THROW(
      PassSchedule::from_json(nlohmann::json::parse(R"([{"until_fraction":1,"passes_probabilities":{"1":0.5}}])"), "s"),
      Error);
  EXPECT_THROW(
      PassSchedule::from_json(nlohmann::json::parse(R"([{"until_fraction":0.5,"passes_probabilities":{"1":1}}])"), "s"),
      Error);
  EXPECT_THROW(
      PassSchedule::from_json(nlohmann::json::parse(R"([{"until_fraction":1,"passes_probabilities":{"0":1}}])"), "s"),
      Error);
}

// WSD (SPEC §6) by hand: 100 steps, warmup 10, cooldown 25% = 25 steps from step 75.
TEST(TrainConfig, WsdFactorsAndTheCooldownSwitch) {
  TrainConfig c;
  c.steps = 100;
  c.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(c.lr_factor(0), 0.1);   // (0 + 1) / 10
  EXPECT_DOUBLE_EQ(c.lr_factor(9), 1.0);   // end of warmup
  EXPECT_DOUBLE_EQ(c.lr_factor(50), 1.0);  // stable
  EXPECT_DOUBLE_EQ(c.lr_factor(74), 1.0);
  EXPECT_DOUBLE_EQ(c.lr_factor(75), 1.0);  // cooldown start: p = 0
  EXPECT_NEAR(c.lr_factor(80), 1 - 5.0 / 25, 1e-12);
  EXPECT_NEAR(c.lr_factor(99), 1 - 24.0 / 25, 1e-12);  // last step
  EXPECT_NEAR(c.lr_factor(100), 0.0, 1e-12);           // would-be next step: zero
  EXPECT_FALSE(c.in_cooldown(74));                     // z-loss and AdamC switch on exactly at step 75
  EXPECT_TRUE(c.in_cooldown(75));
  EXPECT_TRUE(c.in_cooldown(99));
  c.cooldown_shape = CooldownShape::OneMinusSqrt;
  EXPECT_NEAR(c.lr_factor(80), 1 - std::sqrt(5.0 / 25), 1e-12);
  EXPECT_NEAR(c.lr_factor(99), 1 - std::sqrt(24.0 / 25), 1e-12);
  c.cooldown_fraction = 0;
  EXPECT_DOUBLE_EQ(c.lr_factor(99), 1.0);
  EXPECT_FALSE(c.in_cooldown(99));
}

TEST(TrainConfig, CosineAblationAndAccumulation) {
  TrainConfig c;
  c.schedule = LrSchedule::Cosine;
  c.steps = 110;
  c.warmup_steps = 10;
  c.min_lr_fraction = 0.1;
  EXPECT_DOUBLE_EQ(c.lr_factor(0), 0.1);
  EXPECT_DOUBLE_EQ(c.lr_factor(10), 1.0);
  EXPECT_NEAR(c.lr_factor(60), 0.1 + 0.9 * 0.5, 1e-12);  // halfway: cos(π/2) = 0
  EXPECT_NEAR(c.lr_factor(110), 0.1, 1e-12);
  EXPECT_FALSE(c.in_cooldown(109));  // no z-loss / AdamC outside WSD
  c.batch_size = 4;
  EXPECT_EQ(c.accumulation(64), 1);
  EXPECT_EQ(c.accumulation(64, 3), 3);  // no batch_tokens: one micro-batch per data-parallel process
  c.batch_tokens = 4 * 64 * 3;
  EXPECT_EQ(c.accumulation(64), 3);
  c.batch_tokens = 1000;
  EXPECT_THROW(c.accumulation(64), Error);
}

// Every numeric setting has a range; an error names the setting as --set writes it (issue: lr
// 1e39 failed inside torch, a JSON 2^64-1 wrapped to -1, seed -1 wrapped to 2^64-1).
TEST(RunConfig, NumbersOutOfRangeNameTheSetting) {
  auto message = [](const std::string& assignment) {
    auto rc = RunConfig::load("debug");
    try {
      rc.set(assignment);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("train.lr=1e39").find("train.lr must be in (0, 1e+06] (got 1e+39)"), std::string::npos);
  EXPECT_NE(message("train.steps=0").find("train.steps must be in [1, 1099511627776]"), std::string::npos);
  EXPECT_NE(message("train.steps=18446744073709551615").find("'steps': expected an integer in [-2^63"),
            std::string::npos);
  EXPECT_NE(message("train.seed=-1").find("'seed': expected an integer in [0, 2^64-1]"), std::string::npos);
  EXPECT_NE(message("train.batch_size=100000000").find("train.batch_size must be in [1, 16777216]"), std::string::npos);
  EXPECT_NE(message("train.beta1=1").find("train.beta1 must be in [0, 1)"), std::string::npos);
  EXPECT_NE(message("train.later_weight=-1").find("train.later_weight"), std::string::npos);
  EXPECT_NE(message("train.adam_eps=0").find("train.adam_eps must be in (0, 1]"), std::string::npos);
  EXPECT_NE(message("model.d_model=0").find("model.d_model must be in [1, 65536] (got 0)"), std::string::npos);
  EXPECT_NE(message("model.rope_theta=-1").find("model.rope_theta"), std::string::npos);
  EXPECT_NE(message("model.init_std=1e300").find("model.init_std"), std::string::npos);
  EXPECT_EQ(message("train.seed=18446744073709551615"), "no error");  // the largest seed is fine
  EXPECT_EQ(message("train.lr=1e6"), "no error");

  testing::TempDir tmp;
  const auto file = tmp.path / "c.json";
  std::ofstream(file) << R"({"model": "debug", "train": {"steps": 18446744073709551615}})";
  try {
    RunConfig::load(file.string());
    ADD_FAILURE() << "accepted steps = 2^64 - 1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("field 'steps'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  }
}

// The CPU preflight: 2 x 4 x V bytes of logits per token and 12 bytes per parameter are lower
// bounds; past the machine's memory the run is refused naming what sizes the larger part.
TEST(TrainConfig, TrainingMemoryPreflightNamesTheSettings) {
  auto rc = RunConfig::load("debug");  // V = 259, 118,144 parameters (1.4 MB of weights + state)
  rc.train.batch_size = 1000;          // 1000 x 64 x 259 x 8 = 132.6 MB of logits
  EXPECT_NO_THROW(check_training_memory(rc, 64, 200'000'000));
  try {
    check_training_memory(rc, 64, 100'000'000);
    ADD_FAILURE() << "132.6 MB of logits fit in 100 MB";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.batch_size=1000"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0.1 GB for the logits"), std::string::npos) << e.what();
  }
  rc.train.batch_size = 1;
  rc.model.d_model = 4096;  // ≈ 2·4096² per layer + fusion: over 100 MB of weights and state
  try {
    check_training_memory(rc, 64, 100'000'000);
    ADD_FAILURE() << "a 4096-wide model fit in 100 MB";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.d_model=4096"), std::string::npos) << e.what();
  }
}

TEST(TrainConfig, OneBillionPresetCarriesThePaperRecipe) {
  const auto rc = RunConfig::load("1b");
  const auto& t = rc.train;
  EXPECT_EQ(rc.model.context, 8192);
  EXPECT_EQ(t.seq_len, 8192);
  EXPECT_EQ(t.batch_tokens, 294912);
  EXPECT_EQ(t.accumulation(8192), 9);
  EXPECT_EQ(t.optimizer, OptimizerKind::NorMuon);
  EXPECT_DOUBLE_EQ(t.normuon_lr, 1e-2);
  EXPECT_DOUBLE_EQ(t.normuon_weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(t.lr, 5e-4);
  EXPECT_EQ(t.schedule, LrSchedule::WSD);
  EXPECT_EQ(t.warmup_steps, 200);
  EXPECT_DOUBLE_EQ(t.cooldown_fraction, 0.25);
  EXPECT_DOUBLE_EQ(t.z_loss, 1e-5);
  EXPECT_DOUBLE_EQ(t.jitter, 0.02);
  EXPECT_DOUBLE_EQ(t.grad_clip, 0.0);
  EXPECT_NEAR(double(t.steps) * double(t.batch_tokens), 100e9, 0.001 * 100e9);
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

  void SetUp() override { FBT_SKIP_WITHOUT_SHARED_DATA("tinyshakespeare/input.txt"); }

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

  /// Options of a `debug`-preset run DIR/name of `steps` steps on TinyShakespeare.
  TrainOptions debug_run(const std::string& name, int64_t steps, std::vector<std::string> sets = {}) {
    if (data_.empty()) data_ = prepare_shakespeare();
    TrainOptions o;
    o.config = "debug";
    o.data_dir = data_;
    o.out_dir = (dir / name).string();
    o.steps = steps;
    o.sets = std::move(sets);
    return o;
  }

  /// Options of a warm start DIR/name of `steps` steps from the run `src`, on its data.
  TrainOptions warm_run(const TrainOptions& src, const std::string& name, int64_t steps,
                        std::vector<std::string> sets) {
    TrainOptions w;
    w.data_dir = src.data_dir;
    w.out_dir = (dir / name).string();
    w.init_from = src.out_dir;
    w.steps = steps;
    w.sets = std::move(sets);
    return w;
  }

 private:
  std::string data_;
};

TEST_F(TrainRun, ResumeReproducesTheUninterruptedLossSequence) {
  // K=1..3 from the start so jitter, mixin and pass draws all have to resume exactly; the last
  // 3 steps are the WSD cooldown, so z-loss and AdamC are on the resumed path too.
  auto o =
      debug_run("run", 12,
                {"train.pass_schedule=[{\"until_fraction\":1,\"passes_probabilities\":"
                 "{\"1\":0.4,\"2\":0.4,\"3\":0.2}}]",
                 "train.batch_size=4", "train.eval_every=0", "train.eval_tokens=2048", "train.checkpoint_every=6"});
  std::ostringstream log;
  const auto full = run_training(o, log).losses;
  ASSERT_EQ(full.size(), 12u);
  // Go back to the step-6 checkpoint and resume in a fresh model/optimiser/loader.
  std::ofstream(dir / "run" / "latest") << "step-0000006\n";
  fs::remove_all(dir / "run" / "step-0000012");
  TrainOptions r;
  r.data_dir = o.data_dir;
  r.out_dir = o.out_dir;
  r.resume = true;
  const auto second = run_training(r, log).losses;
  ASSERT_EQ(second.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(second[i], full[6 + i]) << "step " << 7 + i;
}

using testing::step_lines;

const char* kSinglePass = "train.pass_schedule=[{\"until_fraction\":1,\"passes_probabilities\":{\"1\":1}}]";

// Gradient accumulation: 2 micro-batches of 4 sequences draw the same 8 windows as one batch
// of 8 (the loader reads windows in order), so the loss sequences agree up to fp32 summation
// order; the step counts tokens of the whole accumulated batch.
TEST_F(TrainRun, AccumulationEqualsOneLargeBatch) {
  std::vector<std::vector<double>> runs;
  for (const char* micro : {"train.batch_size=8", "train.batch_size=4"}) {
    auto o = debug_run(std::string("run") + micro[17], 5,
                       {kSinglePass, micro, "train.seq_len=64", "train.batch_tokens=512", "train.warmup_steps=2",
                        "train.eval_every=0", "train.eval_tokens=1024", "train.checkpoint_every=0"});
    std::ostringstream log;
    runs.push_back(run_training(o, log).losses);
    EXPECT_EQ(step_lines(o.out_dir).back().at("tokens").get<int64_t>(), 5 * 512);
  }
  ASSERT_EQ(runs[0].size(), 5u);
  ASSERT_EQ(runs[1].size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(runs[0][i], runs[1][i], 1e-4 * runs[0][i]) << "step " << i + 1;
  EXPECT_GT(runs[0][0] - runs[0][4], 0.05);  // and it trains
}

// WSD cooldown over the last 25% of 8 steps = steps 7 and 8: z-loss and AdamC on exactly there.
TEST_F(TrainRun, CooldownSwitchesZLossOnAtItsStart) {
  auto o = debug_run("run", 8,
                     {"train.warmup_steps=2", "train.batch_size=2", "train.seq_len=32", "train.eval_every=0",
                      "train.eval_tokens=512", "train.checkpoint_every=0"});
  std::ostringstream log;
  run_training(o, log);
  const auto lines = step_lines(o.out_dir);
  ASSERT_EQ(lines.size(), 8u);
  for (const auto& l : lines) {
    const int64_t step = l.at("step");
    EXPECT_EQ(l.at("cooldown").get<bool>(), step >= 7) << l;
    EXPECT_EQ(l.contains("z_loss"), step >= 7) << l;
  }
  EXPECT_DOUBLE_EQ(lines[0].at("lr_scale").get<double>(), 0.5);  // warmup 1/2
  EXPECT_DOUBLE_EQ(lines[6].at("lr_scale").get<double>(), 1.0);  // cooldown start
  EXPECT_DOUBLE_EQ(lines[7].at("lr_scale").get<double>(), 0.5);  // 1 − 1/2
  EXPECT_DOUBLE_EQ(lines[0].at("wd_scale").get<double>(), 1.0);  // AdamC (wd × lr_t/lr_peak): not in warmup
  EXPECT_DOUBLE_EQ(lines[7].at("wd_scale").get<double>(), 0.5);
  EXPECT_GT(lines[7].at("z_loss").get<double>(), 0.0);
  EXPECT_NE(log.str().find("optimiser groups"), std::string::npos);
  EXPECT_NE(log.str().find("1.28x"), std::string::npos);
}

// The paper's optimiser against the AdamW ablation on the same data, schedule (WSD, 30 warmup
// steps), batches and K = 1: mean training loss over the last 50 of 300 steps. Both give the
// embedding/head and gains the same Adam lr (3e-3), so only the hidden matrices' update rule
// differs. (With the paper's 1B-scale Adam lr 5e-4 the 64-wide debug model's embedding learns
// too slowly and the NorMuon recipe loses, 2.196 vs 2.053; see docs/LOG.md 2026-12-01.)
TEST_F(TrainRun, NorMuonBeatsAdamWOnTinyShakespeare) {
  std::map<std::string, double> tail_loss;
  for (const char* optimizer : {"normuon", "adamw"}) {
    auto o = debug_run(optimizer, 300,
                       {kSinglePass, std::string("train.optimizer=") + optimizer, "train.lr=0.003",
                        "train.warmup_steps=30", "train.batch_size=16", "train.seq_len=64", "train.eval_every=0",
                        "train.eval_tokens=1024", "train.checkpoint_every=0"});
    std::ostringstream log;
    const auto losses = run_training(o, log).losses;
    ASSERT_EQ(losses.size(), 300u);
    double sum = 0;
    for (size_t i = 250; i < 300; ++i) sum += losses[i];
    tail_loss[optimizer] = sum / 50;
  }
  std::cout << "train loss, mean of steps 251-300: NorMuon " << tail_loss["normuon"] << ", AdamW " << tail_loss["adamw"]
            << " nats/token\n";
  EXPECT_LT(tail_loss["normuon"], tail_loss["adamw"]);
}

// Issue 23: the fusion weights sit idle until feedback starts, as in the first author's
// reproduction (its own optimiser group, idle while training is one-pass). Ours needs no group:
// a K = 1 step leaves the fusion without a gradient, and neither optimiser moves (nor decays) a
// parameter without one. Steps 1-2 run K = 1, steps 3-4 K = 2, weight decay on.
TEST_F(TrainRun, FusionWeightsStayIdleUntilTheFirstFeedbackStep) {
  for (const char* optimizer : {"normuon", "adamw"}) {
    auto o = debug_run(
        std::string("idle-") + optimizer, 4,
        {std::string("train.optimizer=") + optimizer, "train.weight_decay=0.1", "train.normuon_weight_decay=0.1",
         "train.warmup_steps=0", "train.eval_every=0", "train.eval_tokens=1024", "train.checkpoint_every=1",
         "train.pass_schedule=[{\"until_fraction\":0.5,\"passes_probabilities\":{\"1\":1}},"
         "{\"until_fraction\":1,\"passes_probabilities\":{\"2\":1}}]"});
    std::ostringstream log;
    run_training(o, log);
    CheckpointInfo info;
    auto step = [&](int s) {
      return load_model((fs::path(o.out_dir) / ("step-000000" + std::to_string(s)) / "model.safetensors").string(),
                        &info)
          ->named_parameters();
    };
    const auto after2 = step(2), after4 = step(4);
    torch::manual_seed(1337);
    FBT fresh(info.config);  // the initial weights of a run with the seed
    auto init = fresh->named_parameters();
    for (const char* name : {"fusion.w_u.weight", "fusion.w_g.weight"}) {
      EXPECT_TRUE(torch::equal(after2[name], init[name])) << optimizer << " " << name << " moved during K = 1";
      EXPECT_GT((after4[name] - init[name]).abs().max().item<double>(), 1e-5) << optimizer << " " << name;
    }
    EXPECT_GT((after2["blocks.0.mlp.w_up.weight"] - init["blocks.0.mlp.w_up.weight"]).abs().max().item<double>(), 1e-5);
  }
}

// --resume continues the stored run: another --config is refused, and so is a total of steps the
// run has already reached (it would rewrite run.json without training).
TEST_F(TrainRun, ResumeRefusesAnotherConfigAndAReachedTotal) {
  auto o = debug_run("run", 4, {"train.eval_tokens=1024", "train.warmup_steps=1"});
  std::ostringstream log;
  run_training(o, log);
  TrainOptions r;
  r.data_dir = o.data_dir;
  r.out_dir = o.out_dir;
  r.resume = true;
  r.config = "small";
  EXPECT_THROW(run_training(r, log), Error);
  r.config.clear();
  r.steps = 4;
  try {
    run_training(r, log);
    FAIL() << "resumed to a total already reached";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already at step 4"), std::string::npos) << e.what();
  }
  std::ifstream record(dir / "run" / "run.json");
  EXPECT_FALSE(nlohmann::json::parse(record).contains("resumes"));  // the record is untouched
}

// A warm start (--init-from) begins from the checkpoint's weights with a fresh optimiser: with a
// learning rate of 1e-12 one step leaves every weight where the source run left it (a model that
// was not loaded would hold the seed's initial weights, which the source's 3 NorMuon steps moved
// by O(1e-2)); the optimiser's step counters restart at 1; run.json names the checkpoint.
TEST_F(TrainRun, WarmStartBeginsFromTheCheckpointWithAFreshOptimiser) {
  auto src =
      debug_run("source", 3, {kSinglePass, "train.eval_tokens=1024", "train.eval_every=0", "train.warmup_steps=0"});
  std::ostringstream log;
  run_training(src, log);
  auto w = warm_run(src, "warm", 1,
                    {"train.lr=1e-12", "train.fusion_lr=1e-12", "train.batch_size=2", "train.eval_tokens=1024",
                     "train.warmup_steps=0"});
  run_training(w, log);
  CheckpointInfo info;
  auto source = load_model(resolve_checkpoint(src.out_dir));
  auto warm = load_model((dir / "warm" / "step-0000001" / "model.safetensors").string(), &info);
  torch::manual_seed(1337);
  FBT fresh(info.config);  // the initial weights a run with the same seed starts from
  const auto source_params = source->named_parameters(), fresh_params = fresh->named_parameters();
  double moved = 0;
  for (const auto& p : warm->named_parameters()) {
    const auto& s = source_params[p.key()];
    EXPECT_LT((p.value() - s).abs().max().item<double>(), 1e-6) << p.key();
    moved = std::max(moved, (fresh_params[p.key()] - s).abs().max().item<double>());
  }
  EXPECT_GT(moved, 1e-3);  // the source's training moved its weights away from the seed's
  const auto optimizer = load_tensors((dir / "warm" / "step-0000001" / "optimizer.safetensors").string());
  int64_t counters = 0;
  for (const auto& [name, t] : optimizer.tensors)
    if (name.size() > 5 && name.substr(name.size() - 5) == ".step") {
      EXPECT_EQ(t.item<int64_t>(), 1) << name;
      ++counters;
    }
  EXPECT_GT(counters, 0);
  std::ifstream record(dir / "warm" / "run.json");
  const auto j = nlohmann::json::parse(record);
  EXPECT_EQ(j.at("init_from").at("checkpoint").get<std::string>(),
            fs::absolute(resolve_checkpoint(src.out_dir)).lexically_normal().string());
  EXPECT_EQ(j.at("init_from").at("step").get<int64_t>(), 3);
  EXPECT_EQ(j.at("config").at("train").at("optimizer").get<std::string>(), "adamw");  // warm_start's
  EXPECT_EQ(j.at("config").at("train").at("mixin_prob").get<double>(), 0.0);
}

// A warm start's bad inputs are errors naming what to fix, before anything is written.
TEST_F(TrainRun, WarmStartRefusesResumeConfigAndOtherShapes) {
  auto src = debug_run("source", 1, {"train.eval_tokens=1024", "train.eval_every=0"});
  std::ostringstream log;
  run_training(src, log);
  const auto expect_error = [&](const TrainOptions& o, const std::string& needle) {
    testing::expect_error([&] { run_training(o, log); }, {needle});
    EXPECT_FALSE(fs::exists(dir / "warm")) << needle;
  };
  const auto w = warm_run(src, "warm", 1, {});
  auto o = w;
  o.resume = true;
  expect_error(o, "--init-from starts a new run");
  o = w;
  o.config = "debug";
  expect_error(o, "--config is not allowed");
  o = w;
  o.sets = {"model.d_ff=96"};
  expect_error(o, "has shape");
  o = w;
  o.sets = {"model.vocab_size=300"};
  expect_error(o, "differs from the --init-from checkpoint's 300");
  o = w;
  o.init_from = (dir / "nothing").string();
  expect_error(o, (dir / "nothing").string());
}

// Long-context extension (issue 18): a warm start at a longer context (and another RoPE θ) trains
// on windows past the old context; the extended model's logits there are finite, and position 120
// depends on a token 115 positions back (attention reaches across the old 64-token limit).
TEST_F(TrainRun, WarmStartExtendsTheContext) {
  auto src = debug_run("short", 2, {kSinglePass, "train.eval_tokens=1024", "train.eval_every=0"});
  std::ostringstream log;
  run_training(src, log);
  auto w = warm_run(src, "long", 2,
                    {"model.context=128", "model.rope_theta=20000", "train.seq_len=128", "train.batch_size=2",
                     "train.pass_schedule=[{\"until_fraction\":1,\"passes_probabilities\":{\"3\":1}}]",
                     "train.eval_tokens=1024", "train.warmup_steps=0"});
  const auto r = run_training(w, log);
  ASSERT_EQ(r.losses.size(), 2u);
  EXPECT_TRUE(std::isfinite(r.losses[0]) && std::isfinite(r.losses[1]));
  EXPECT_TRUE(std::isfinite(r.val_standard) && std::isfinite(r.val_fused1));  // 128-token windows
  CheckpointInfo info;
  auto model = load_model(resolve_checkpoint(w.out_dir), &info);
  EXPECT_EQ(info.config.context, 128);
  EXPECT_EQ(info.config.rope_theta, 20000);
  model->eval();
  torch::NoGradGuard no_grad;
  auto tokens = torch::randint(0, 256, {1, 128}, torch::kInt64);
  auto logits = model->forward(tokens);  // [1,128,V]
  EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
  auto changed = tokens.clone();
  changed[0][5] = (tokens[0][5].item<int64_t>() + 1) % 256;
  const auto moved = (model->forward(changed)[0][120] - logits[0][120]).abs().max().item<double>();
  EXPECT_GT(moved, 1e-4);
}

TEST_F(TrainRun, RefusesToOverwriteADifferentRun) {
  auto o = debug_run("run", 2, {"train.eval_tokens=1024"});
  std::ostringstream log;
  run_training(o, log);
  EXPECT_THROW(run_training(o, log), Error);
  o.force = true;
  EXPECT_NO_THROW(run_training(o, log));
}

// A learning rate that overflows the weights makes every later loss non-finite: those updates
// are skipped, logged, and after max_bad_steps in a row the run stops with a clear error (and
// no checkpoint of the state that led there: TrainRobustCli.NonFiniteStepsNeverBecomeLatest).
TEST_F(TrainRun, NonFiniteLossesStopTheRun) {
  auto o = debug_run("run", 50,
                     {"train.lr=1e6", "train.normuon_lr=1e6", "train.warmup_steps=0", "train.grad_clip=0",
                      "train.max_bad_steps=3", "train.eval_every=0", "train.checkpoint_every=0"});
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
  std::ifstream f(std::string(FBT_SHARED_DATA) + "/tinyshakespeare/input.txt", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(f)), {});
  std::map<unsigned char, double> counts;
  for (unsigned char ch : text) counts[ch] += 1;
  double unigram = 0;
  for (const auto& [ch, n] : counts) unigram -= n / text.size() * std::log(n / text.size());
  auto o = debug_run("run", 200,
                     {"train.lr=0.003", "train.warmup_steps=20", "train.batch_size=16", "train.eval_tokens=16384"});
  std::ostringstream log;
  const auto result = run_training(o, log);
  std::cout << "unigram entropy " << unigram << " nats; val standard " << result.val_standard << ", fused(1) "
            << result.val_fused1 << "\n";
  EXPECT_LT(result.val_standard, unigram);
  EXPECT_TRUE(fs::is_regular_file(dir / "run" / "step-0000200" / "model.safetensors"));
}

}  // namespace
}  // namespace fbt
