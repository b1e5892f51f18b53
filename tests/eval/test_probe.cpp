// Linear probes: the fitter on separable and shuffled toy sets, grouped folds, the per-layer
// residual hook (standard vs one-step recurrent prefill) and `fbt eval-probe` end to end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "cli_test_helpers.h"
#include "fbt/eval/linear_probe.h"
#include "fbt/eval/probe_states.h"
#include "fbt/model/passes.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;
using testing::make_test_model;
using testing::max_abs_diff;

std::vector<std::string> cycle_groups(int64_t n, int64_t groups) {
  std::vector<std::string> g;
  for (int64_t i = 0; i < n; ++i) g.push_back("g" + std::to_string(i % groups));
  return g;
}

TEST(Probe, SeparableToySetIsLearnedPerfectly) {
  torch::manual_seed(0);
  const int64_t N = 120, D = 6, C = 3;
  auto y = torch::arange(N, torch::kLong) % C;                                                  // [N]
  auto x = torch::randn({N, D}) + 6.0 * torch::one_hot(y, C).to(torch::kFloat).repeat({1, 2});  // [N,D]
  ProbeOptions o;
  const auto s = cross_validate_probe(x, y, C, cycle_groups(N, 8), o);
  EXPECT_EQ(s.accuracy, 1.0);
  EXPECT_NEAR(s.majority, 1.0 / 3, 0.15);
  EXPECT_EQ((fit_probe(x, y, C, o).predict(x) == y).all().item<bool>(), true);
}

TEST(Probe, ShuffledLabelsScoreNearChance) {
  // Features carry the label, but the labels are then shuffled: held-out accuracy must be ~50%.
  // With N = 800 held-out predictions the binomial std of the pooled accuracy is
  // sqrt(0.25/800) ≈ 0.018; we allow 4 std (0.07).
  torch::manual_seed(1);
  const int64_t N = 800, D = 8;
  auto y = torch::arange(N, torch::kLong) % 2;
  auto x = torch::randn({N, D}) + 3.0 * y.to(torch::kFloat).unsqueeze(1);
  const auto shuffled = y.index_select(0, torch::randperm(N, torch::kLong));
  const auto s = cross_validate_probe(x, shuffled, 2, cycle_groups(N, 16), ProbeOptions{});
  EXPECT_NEAR(s.accuracy, 0.5, 0.07);
  EXPECT_GT(cross_validate_probe(x, y, 2, cycle_groups(N, 16), ProbeOptions{}).accuracy, 0.95);  // unshuffled
}

TEST(Probe, GroupedFoldsNeverSplitAGroup) {
  std::vector<std::string> groups;
  for (int i = 0; i < 300; ++i)
    groups.push_back("g" + std::to_string((i * 7919) % 13 + (i % 3 == 0 ? 0 : 13 * (i % 2))));
  const auto fold = grouped_folds(groups, 4, 5);
  ASSERT_EQ(fold.size(), groups.size());
  std::map<std::string, int64_t> fold_of;
  std::vector<int64_t> size(4, 0);
  for (size_t i = 0; i < groups.size(); ++i) {
    ASSERT_GE(fold[i], 0);
    ASSERT_LT(fold[i], 4);
    if (fold_of.count(groups[i])) {
      EXPECT_EQ(fold_of[groups[i]], fold[i]) << groups[i];
    }
    fold_of[groups[i]] = fold[i];
    ++size[fold[i]];
  }
  for (int64_t s : size) EXPECT_GT(s, 0);
  EXPECT_EQ(fold, grouped_folds(groups, 4, 5));  // deterministic
  EXPECT_THROW(grouped_folds(cycle_groups(10, 3), 4, 0), Error);
}

TEST(Probe, FitterRejectsBadInput) {
  EXPECT_THROW(fit_probe(torch::zeros({4, 2}), torch::tensor({0, 1, 2, 0}, torch::kLong), 2, {}), Error);
  EXPECT_THROW(fit_probe(torch::zeros({4, 2}), torch::zeros({3}, torch::kLong), 2, {}), Error);
}

struct ProbeStatesTest : ::testing::Test {
  FBT model = make_test_model();
  torch::Tensor tokens = torch::randint(0, 256, {2, 12}, torch::kLong);  // [B,T], no separators
  int64_t L = model->config().n_layers, T = 12;
};

TEST_F(ProbeStatesTest, StandardLayersAreTheStackAndTheForward) {
  torch::NoGradGuard no_grad;
  const auto s = probe_states(model, tokens);
  ASSERT_EQ(s.standard.sizes(), (std::vector<int64_t>{L + 1, 2, T, model->config().d_model}));
  const auto u = model->plain_input(model->embed(tokens));
  EXPECT_EQ(max_abs_diff(s.standard[0], u), 0.0);  // layer 0 = the plain input
  EXPECT_EQ(max_abs_diff(s.standard[L], model->stack(u, Layout::contiguous(T, tokens.device()))), 0.0);
  EXPECT_LT(max_abs_diff(model->head(s.standard[L]), model->forward(tokens)), 1e-5);
}

TEST_F(ProbeStatesTest, RecurrentDiffersOnlyAtTheLastPosition) {
  torch::NoGradGuard no_grad;
  const auto s = probe_states(model, tokens);
  const auto before_s = s.standard.narrow(2, 0, T - 1), before_r = s.recurrent.narrow(2, 0, T - 1);
  EXPECT_LT(max_abs_diff(before_s, before_r), 1e-6);
  for (int64_t l = 0; l <= L; ++l)
    EXPECT_GT(max_abs_diff(s.standard[l].select(1, T - 1), s.recurrent[l].select(1, T - 1)), 1e-3) << "layer " << l;
  // Layer 0 at the last position is the fused input from the standard prefill's top state at T-2.
  const auto e_n = model->plain_input(model->embed(tokens));
  const auto h = model->feedback_state(s.standard[L].select(1, T - 2));
  EXPECT_LT(max_abs_diff(s.recurrent[0].select(1, T - 1), model->fused_input(h, e_n.select(1, T - 1))), 1e-6);
  // The top equals pass 2 of forward_passes with a plain prefix of T-1 positions.
  PassOptions o;
  o.passes = 2;
  o.keep_logits = true;
  o.plain_prefix = torch::full({2}, T - 1, torch::kLong);
  const auto passes = forward_passes(model, tokens, {}, o);
  EXPECT_LT(max_abs_diff(model->head(s.recurrent[L]), passes.logits[1]), 1e-5);
}

TEST_F(ProbeStatesTest, LongInputIsAnError) {
  EXPECT_THROW(probe_states(model, torch::zeros({1, model->config().context + 1}, torch::kLong)), Error);
}

struct EvalProbeCli : ::testing::Test {
  fs::path dir = fs::temp_directory_path() / ("fbt_probecli_" + std::to_string(::getpid()));
  void SetUp() override {
    fs::remove_all(dir);
    testing::make_run_dir(dir / "run", ByteTokenizer::kVocab);
  }
  void TearDown() override { fs::remove_all(dir); }
  testing::CliRun fbt_cli(const std::string& args) const { return testing::run_cli(dir, args); }
};

TEST_F(EvalProbeCli, SynthThenProbeWritesTableAndJson) {
  const auto f = (dir / "memory.jsonl").string(), out = (dir / "r.json").string();
  auto r = fbt_cli("synth --task memory --n 24 --distractors 0 --seed 3 --out " + f);
  ASSERT_EQ(r.rc, 0) << r.err;
  r = fbt_cli("eval-probe " + f + " --checkpoint " + (dir / "run").string() + " --out " + out);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("| memory | 0 |"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(testing::slurp(out));
  const int64_t L = ModelConfig::preset("debug").n_layers;
  ASSERT_EQ(j.at("results").size(), static_cast<size_t>(2 * (L + 1) + 1));
  const auto& row = j.at("results")[L + 1];
  EXPECT_EQ(row.at("mode"), "recurrent");
  EXPECT_EQ(row.at("layer"), 0);
  EXPECT_EQ(row.at("n"), 24);
  EXPECT_GE(row.at("value").get<double>(), 0.0);
  EXPECT_TRUE(j.contains("config"));

  // Texts longer than the context are an error naming the record.
  fbt_cli("synth --task memory --n 4 --distractors 3 --out " + f);
  r = fbt_cli("eval-probe " + f + " --checkpoint " + (dir / "run").string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("record 1:"), std::string::npos) << r.err;
}

// Options that cannot give a trained probe are errors naming the flag, before the checkpoint is
// loaded (a missing --checkpoint would otherwise be reported first); too many folds for the
// file's groups is an error before any forward pass, not after feature extraction.
TEST_F(EvalProbeCli, BadProbeOptionsFailBeforeAnyWork) {
  const auto f = (dir / "memory.jsonl").string();
  ASSERT_EQ(fbt_cli("synth --task memory --n 8 --distractors 0 --seed 3 --out " + f).rc, 0);
  for (const std::string bad : {"--max-iter 0", "--max-iter -1", "--l2 -1", "--l2 nan", "--folds 1"}) {
    const auto r = fbt_cli("eval-probe " + f + " --checkpoint " + (dir / "nowhere").string() + " " + bad);
    EXPECT_EQ(r.rc, 1) << bad;
    const std::string flag = bad.substr(0, bad.find(' '));
    EXPECT_NE(r.err.find("error: " + flag + ": expected "), std::string::npos) << bad << ": " << r.err;  // CLI range
  }
  const auto r = fbt_cli("eval-probe " + f + " --checkpoint " + (dir / "run").string() + " --folds 9");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("cannot fill --folds 9"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("examples"), std::string::npos) << "features were extracted first: " << r.err;
}

}  // namespace
}  // namespace fbt
