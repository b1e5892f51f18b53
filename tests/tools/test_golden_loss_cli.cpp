// The golden-loss run (as llm.c's test_gpt2 and torchtitan's loss-convergence checks do): `fbt
// train --config debug` for 10 steps on a corpus the test writes itself, one thread, and every
// step's losses (one per pass: the default schedule turns K=2/3 on at step 8) and gradient norm
// against tests/golden/debug_10_steps.json. Any change to the model, the K-pass objective, the
// optimiser, the LR schedule, the data order or the tokenizer moves them; rounding differences
// between libtorch builds stay far inside the tolerance.
// A deliberate change regenerates the file: FBT_UPDATE_GOLDEN=1 ctest -R GoldenLoss (then review
// the diff and say why in the commit).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_test_helpers.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

/// 3,000 lines "a + b = c" with a, b in [0, 100) from mt19937_64 (its sequence is fixed by the
/// C++ standard; the modulo, unlike std::uniform_int_distribution, is the same on every library).
std::string arithmetic_corpus() {
  std::mt19937_64 rng(20261205);
  std::ostringstream text;
  for (int i = 0; i < 3000; ++i) {
    const uint64_t a = rng() % 100, b = rng() % 100;
    text << a << " + " << b << " = " << a + b << "\n";
  }
  return text.str();
}

/// Relative tolerance of a pinned value: libtorch 1.13 and 2.x (different BLAS and kernels)
/// agree to ~1e-5 over 10 steps; a changed recipe moves the losses by far more than 1e-3.
constexpr double kRelTol = 2e-4;

TEST(GoldenLoss, DebugPresetTenStepsMatchThePinnedLosses) {
  testing::TempDir tmp;
  testing::write_file(tmp.path / "corpus.txt", arithmetic_corpus());
  const auto data = (tmp.path / "data").string(), run = (tmp.path / "run").string();
  auto r = testing::run_cli(
      tmp.path, "prepare --input " + (tmp.path / "corpus.txt").string() + " --out " + data + " --tokenizer byte");
  ASSERT_EQ(r.rc, 0) << r.err;
  r = testing::run_cli(tmp.path, "train --config debug --data " + data + " --out " + run +
                                     " --steps 10 --threads 1 --set train.eval_every=0 --set train.checkpoint_every=0");
  ASSERT_EQ(r.rc, 0) << r.err;

  nlohmann::json steps = nlohmann::json::array();
  std::istringstream lines(testing::slurp(fs::path(run) / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("losses")) continue;  // validation lines
    steps.push_back({{"step", j.at("step")}, {"losses", j.at("losses")}, {"grad_norm", j.at("grad_norm")}});
  }
  ASSERT_EQ(steps.size(), 10u) << testing::slurp(fs::path(run) / "metrics.jsonl");

  const fs::path golden = fs::path(FBT_SOURCE_DIR) / "tests" / "golden" / "debug_10_steps.json";
  if (std::getenv("FBT_UPDATE_GOLDEN") != nullptr) {
    testing::write_file(golden, nlohmann::json{{"command",
                                                "fbt train --config debug --steps 10 --threads 1 "
                                                "(tests/tools/test_golden_loss_cli.cpp)"},
                                               {"steps", steps}}
                                        .dump(2) +
                                    "\n");
    GTEST_SKIP() << "wrote " << golden;
  }
  const auto pinned = nlohmann::json::parse(testing::slurp(golden)).at("steps");
  ASSERT_EQ(pinned.size(), steps.size());
  auto near = [](double got, double want) { return std::abs(got - want) <= kRelTol * std::abs(want); };
  for (size_t s = 0; s < steps.size(); ++s) {
    const auto &got = steps[s], &want = pinned[s];
    ASSERT_EQ(got.at("losses").size(), want.at("losses").size()) << "passes of step " << s + 1;
    for (size_t p = 0; p < got.at("losses").size(); ++p)
      EXPECT_TRUE(near(got["losses"][p].get<double>(), want["losses"][p].get<double>()))
          << "step " << s + 1 << " pass " << p + 1 << ": " << got["losses"][p] << " vs pinned " << want["losses"][p];
    EXPECT_TRUE(near(got["grad_norm"].get<double>(), want["grad_norm"].get<double>()))
        << "step " << s + 1 << " grad_norm: " << got["grad_norm"] << " vs pinned " << want["grad_norm"];
  }
}

}  // namespace
}  // namespace fbt
