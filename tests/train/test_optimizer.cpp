// NorMuon, Adam and the parameter groups (SPEC §6), checked against values computed
// independently in the test (SVD + the scalar Newton–Schulz polynomial, closed-form Adam).
#include <cmath>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fbt/train/normuon.h"
#include "fbt/train/optimizer.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {

// Newton–Schulz acts on singular values only: for X = U S Vᵀ, a X + (b XXᵀ + c (XXᵀ)²) X =
// U (a S + b S³ + c S⁵) Vᵀ. So NS5(G) = U p⁵(S / ‖G‖_F) Vᵀ with p(s) = a s + b s³ + c s⁵.
double ns_polynomial(double s, int steps) {
  for (int i = 0; i < steps; ++i) s = 3.4445 * s - 4.7750 * s * s * s + 2.0315 * std::pow(s, 5);
  return s;
}

/// The orthogonalised matrix computed via SVD in double: U p⁵(S/‖G‖_F) Vᵀ.
torch::Tensor ns_via_svd(const torch::Tensor& G) {
  auto g = G.to(torch::kDouble);
  auto [U, S, Vh] = at::linalg_svd(g, /*full_matrices=*/false);
  auto s = (S / g.norm()).contiguous();
  for (int64_t i = 0; i < s.numel(); ++i) s[i] = ns_polynomial(s[i].item<double>(), 5);
  return torch::mm(U * s.unsqueeze(0), Vh);
}

TEST(NewtonSchulz, MatchesTheSingularValuePolynomialAndReachesTheBand) {
  torch::manual_seed(0);
  for (auto shape : std::vector<std::pair<int64_t, int64_t>>{{4, 3}, {3, 4}, {16, 16}, {8, 32}, {32, 8}, {64, 256}}) {
    auto G = torch::randn({shape.first, shape.second});
    auto O = newton_schulz5(G);
    ASSERT_EQ(O.sizes(), G.sizes());
    EXPECT_LT(testing::max_abs_diff(O, ns_via_svd(G)), 2e-4) << shape.first << "x" << shape.second;
    // Well-conditioned (aspect ratio 4) inputs land in the band the quintic is tuned for.
    if (std::max(shape.first, shape.second) >= 4 * std::min(shape.first, shape.second)) {
      auto sv = at::linalg_svdvals(O.to(torch::kDouble));
      EXPECT_GT(sv.min().item<double>(), 0.68) << shape.first << "x" << shape.second;
      EXPECT_LT(sv.max().item<double>(), 1.21) << shape.first << "x" << shape.second;
    }
  }
  EXPECT_THROW(newton_schulz5(torch::randn({2, 3, 4})), Error);
}

// Two NorMuon steps on a 4×3 matrix, each line of SPEC §6 written out in double.
TEST(NorMuon, TwoStepsOnA4x3MatrixEqualTheFormulas) {
  torch::manual_seed(1);
  auto W = torch::randn({4, 3});
  const auto W0 = W.clone().to(torch::kDouble);
  const std::vector<torch::Tensor> grads{torch::randn({4, 3}), torch::randn({4, 3})};
  NorMuonOptions o;  // lr 1e-2, wd 0.01, β1 0.95, β2 0.95, eps 1e-10
  o.lr = 0.05;       // large enough that the update is far above fp32 noise
  NorMuon opt({{"w", W}}, o);

  auto Wd = W0.clone();
  auto M = torch::zeros({4, 3}, torch::kDouble), v = torch::zeros({4, 1}, torch::kDouble);
  for (const auto& g32 : grads) {
    W.mutable_grad() = g32.clone();
    opt.step();
    auto G = g32.to(torch::kDouble);
    M = 0.95 * M + 0.05 * G;
    auto U = 0.05 * G + 0.95 * M;
    auto O = ns_via_svd(U);
    v = 0.95 * v + 0.05 * (O * O).mean(1, true);
    auto O_hat = O / (v.sqrt() + 1e-10);
    O_hat = O_hat * (O.norm() / O_hat.norm());
    O_hat = O_hat * std::sqrt(4.0 / 3.0);
    Wd = Wd * (1 - 0.05 * 0.01) - 0.05 * O_hat;
    EXPECT_LT(testing::max_abs_diff(W, Wd), 2e-5);
  }
  EXPECT_GT(testing::max_abs_diff(W, W0), 0.05);  // it did move
  // State round trip: a fresh optimiser with the saved state takes the same third step.
  auto W2 = W.detach().clone();
  NorMuon restored({{"w", W2}}, o);
  restored.load_state(opt.state(), "state");
  const auto g3 = torch::randn({4, 3});
  W.mutable_grad() = g3.clone();
  W2.mutable_grad() = g3.clone();
  opt.step();
  restored.step();
  EXPECT_TRUE(torch::equal(W, W2));
  EXPECT_THROW(NorMuon({{"gain", torch::ones({3})}}, o), Error);
}

// Adam on scalars (each element of a 1-D gain is one): step t uses
//   m_t = β1 m + (1−β1) g,  v_t = β2 v + (1−β2) g²,  p ← p − lr · (m_t/(1−β1^t)) / (sqrt(v_t/(1−β2^t)) + eps).
TEST(TrainingOptimizer, AdamStepEqualsTheClosedFormForScalars) {
  auto model = testing::make_test_model();
  TrainConfig c;  // normuon recipe: gains in "adam", lr 5e-4, betas (0.9, 0.95), eps 1e-10, no wd
  TrainingOptimizer opt(model, c);
  torch::Tensor gain, w_u;
  for (auto& p : model->named_parameters()) {
    if (p.key() == "final_norm.weight") gain = p.value();
    if (p.key() == "fusion.w_u.weight") w_u = p.value();
  }
  const double p0 = gain[0].item<double>(), g1 = 0.3, g2 = -0.7;
  const auto w_u0 = w_u.detach().clone();
  gain.mutable_grad() = torch::full_like(gain, g1);
  opt.step(/*lr_factor=*/0.5, /*wd_factor=*/1.0);
  const double lr = 5e-4 * 0.5;
  const double p1 = p0 - lr * g1 / (std::abs(g1) + 1e-10);  // first step: m̂ = g, v̂ = g²
  EXPECT_NEAR(gain[0].item<double>(), p1, 1e-7);
  EXPECT_TRUE(torch::equal(w_u, w_u0));  // no gradient, no update (not even weight decay)
  gain.mutable_grad() = torch::full_like(gain, g2);
  opt.step(0.5, 1.0);
  const double m = 0.9 * 0.1 * g1 + 0.1 * g2, v = 0.95 * 0.05 * g1 * g1 + 0.05 * g2 * g2;
  const double p2 = p1 - lr * (m / (1 - 0.9 * 0.9)) / (std::sqrt(v / (1 - 0.95 * 0.95)) + 1e-10);
  EXPECT_NEAR(gain[0].item<double>(), p2, 1e-7);
}

TEST(TrainingOptimizer, EveryParameterInExactlyOneGroupAndMatricesGoToNorMuon) {
  auto model = testing::make_test_model();
  for (auto kind : {OptimizerKind::NorMuon, OptimizerKind::AdamW}) {
    TrainConfig c;
    c.optimizer = kind;
    const auto groups = group_parameters(model, c);
    std::map<std::string, std::string> group_of;
    for (const auto& g : groups)
      for (const auto& [name, p] : g.params) EXPECT_TRUE(group_of.emplace(name, g.name).second) << name << " twice";
    for (const auto& p : model->named_parameters()) {
      ASSERT_TRUE(group_of.count(p.key())) << p.key() << " in no group";
      const auto& g = group_of[p.key()];
      if (kind == OptimizerKind::NorMuon)
        EXPECT_EQ(g, p.value().dim() == 2 && p.key() != "embedding.weight" ? "normuon" : "adam") << p.key();
      else
        EXPECT_EQ(g, p.value().dim() >= 2 ? "adamw_decay" : "adamw_no_decay") << p.key();
    }
    EXPECT_EQ(group_of.size(), model->named_parameters().size());
  }
  TrainConfig c;
  const auto groups = group_parameters(model, c);
  std::set<std::string> in_normuon;
  for (const auto& [name, p] : groups.at(0).params) in_normuon.insert(name);
  for (const char* name : {"fusion.w_u.weight", "fusion.w_g.weight", "blocks.0.attn.wq.weight",
                           "blocks.0.attn.gate.weight", "blocks.0.mlp.w_down.weight"})
    EXPECT_TRUE(in_normuon.count(name)) << name;
  EXPECT_FALSE(in_normuon.count("embedding.weight"));
  TrainingOptimizer opt(model, c);
  EXPECT_NE(opt.describe().find("normuon"), std::string::npos);
}

// The Llama block family (issue 17): an untied head is a vocabulary matrix like the embedding
// (Adam, as in Muon practice), attention biases are 1-D (Adam).
TEST(Optimizer, UntiedHeadAndBiasesGoToAdam) {
  auto config = ModelConfig::preset("debug");
  config.block = BlockKind::Llama;
  config.tie_embeddings = false;
  config.attention_bias = true;
  FBT model(config);
  std::map<std::string, std::string> group_of;
  for (const auto& g : group_parameters(model, TrainConfig{}))
    for (const auto& [name, p] : g.params) group_of[name] = g.name;
  EXPECT_EQ(group_of.size(), model->named_parameters().size());
  EXPECT_EQ(group_of.at("lm_head.weight"), "adam");
  EXPECT_EQ(group_of.at("blocks.0.attn.wq.bias"), "adam");
  EXPECT_EQ(group_of.at("blocks.0.attn.wq.weight"), "normuon");
  EXPECT_FALSE(group_of.count("blocks.0.attn.gate.weight"));  // no head gates
}

}  // namespace
}  // namespace fbt
