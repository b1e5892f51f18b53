// K-pass forward: fusion gradients, detach, document boundaries, mixin, checkpointing (issue #2, tests 5–6);
// the model-level ones run on testing::test_device() ($FBT_TEST_DEVICE, default cpu).
#include <gtest/gtest.h>

#include <cmath>

#include "fbt/model/passes.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {
using testing::make_test_model;
using testing::max_abs_diff;
using testing::test_device;

// Test 5a: finite-difference check of the fusion RMSNorm_in((W_U h) ⊙ σ(W_G e_n)) in float64,
// for both blocks (the Llama block's plain input is e itself; e_n is formed inside fused_input).
TEST(Passes, FusionGradientMatchesFiniteDifferences) {
  for (auto [fusion, block] :
       {std::pair{Fusion::Glu, BlockKind::Fbt}, std::pair{Fusion::GluPlusToken, BlockKind::Fbt},
        std::pair{Fusion::Glu, BlockKind::Llama}, std::pair{Fusion::GluPlusToken, BlockKind::Llama}}) {
    auto c = ModelConfig::preset("debug");
    c.fusion = fusion;
    c.block = block;
    auto model = make_test_model(c);
    model->to(torch::kDouble);
    torch::manual_seed(5);
    auto h = torch::randn({3, c.d_model}, torch::kDouble).requires_grad_(true);
    auto e = torch::randn({3, c.d_model}, torch::kDouble).requires_grad_(true);
    auto w = torch::randn({3, c.d_model}, torch::kDouble);  // random projection of the output
    auto f = [&] { return (model->fused_input(h, model->plain_input(e)) * w).sum(); };
    auto grads = torch::autograd::grad({f()}, {h, e});
    auto w_g = model->named_parameters()["fusion.w_g.weight"];
    auto w_u = model->named_parameters()["fusion.w_u.weight"];
    auto pgrads = torch::autograd::grad({f()}, {w_g, w_u});
    const double eps = 1e-6;
    torch::NoGradGuard no_grad;
    auto check = [&](torch::Tensor x, const torch::Tensor& analytic, const char* name) {
      for (int64_t i = 0; i < 6; ++i) {
        const int64_t idx = (i * 37) % x.numel();
        auto flat = x.view({-1});
        const double orig = flat[idx].item<double>();
        flat[idx] = orig + eps;
        const double up = f().item<double>();
        flat[idx] = orig - eps;
        const double down = f().item<double>();
        flat[idx] = orig;
        EXPECT_NEAR(analytic.view({-1})[idx].item<double>(), (up - down) / (2 * eps), 1e-6) << name << " " << idx;
      }
    };
    check(h, grads[0], "h");
    check(e, grads[1], "e");
    check(w_g, pgrads[0], "W_G");
    check(w_u, pgrads[1], "W_U");
  }
}

// Test 5b: a pass-2 loss reaches pass-1 states without detach, and not with it.
TEST(Passes, DetachCutsGradientBetweenPasses) {
  auto c = ModelConfig::preset("debug");
  auto model = make_test_model(c, 7, test_device());
  torch::manual_seed(6);
  auto tokens = torch::randint(0, c.vocab_size, {2, 12}, torch::kLong).to(test_device());
  auto targets = torch::randint(0, c.vocab_size, {2, 12}, torch::kLong).to(test_device());
  for (bool detach : {false, true}) {
    PassOptions o;
    o.passes = 2;
    o.detach = detach;
    o.keep_states = true;
    auto out = forward_passes(model, tokens, targets, o);
    auto g = torch::autograd::grad({out.losses[1]}, {out.states[0]}, {}, true, false, /*allow_unused=*/true)[0];
    if (detach)
      EXPECT_TRUE(!g.defined() || g.abs().max().item<double>() == 0.0);
    else
      EXPECT_GT(g.abs().max().item<double>(), 1e-6);
  }
}

// Test 6: the position after a document separator takes the plain input in every pass. The
// state at position j reaches the next pass only through the input of position j+1, so the
// later-pass losses have exactly zero gradient with respect to it iff j+1 is plain.
TEST(Passes, PositionAfterSeparatorIsPlainInEveryPass) {
  auto c = ModelConfig::preset("debug");
  const int64_t sep = 3, j = 5, T = 12, K = 4;
  torch::manual_seed(8);
  auto tokens = torch::randint(4, c.vocab_size, {1, T}, torch::kLong).to(test_device());
  tokens[0][j] = sep;
  auto targets = torch::randint(0, c.vocab_size, {1, T}, torch::kLong).to(test_device());
  for (int64_t separator : {sep, int64_t(-1)}) {
    c.doc_separator_id = separator;
    auto model = make_test_model(c, 7, test_device());
    PassOptions o;
    o.passes = K;
    o.keep_states = true;
    auto out = forward_passes(model, tokens, targets, o);
    for (int64_t k = 2; k <= K; ++k) {
      auto g = torch::autograd::grad({out.losses[k - 1]}, {out.states[k - 2]}, {}, true)[0];  // [1,T,D]
      const double at_sep = g[0][j].abs().max().item<double>();
      const double before = g[0][j - 1].abs().max().item<double>();
      EXPECT_GT(before, 1e-7) << "pass " << k;
      if (separator >= 0)
        EXPECT_EQ(at_sep, 0.0) << "pass " << k;
      else
        EXPECT_GT(at_sep, 1e-7) << "pass " << k;  // control: without a separator it is fused
      // Position T-1's state never feeds anything.
      EXPECT_EQ(g[0][T - 1].abs().max().item<double>(), 0.0);
    }
  }
}

// Total loss is L1 + λ·mean(L2..LK) and pass 1 equals the standard forward.
TEST(Passes, TotalLossCombinesPasses) {
  auto c = ModelConfig::preset("debug");
  auto model = make_test_model(c, 7, test_device());
  torch::manual_seed(9);
  auto tokens = torch::randint(0, c.vocab_size, {2, 16}, torch::kLong).to(test_device());
  auto targets = torch::randint(0, c.vocab_size, {2, 16}, torch::kLong).to(test_device());
  PassOptions o;
  o.passes = 3;
  o.later_weight = 0.5;
  auto out = forward_passes(model, tokens, targets, o);
  ASSERT_EQ(out.losses.size(), 3u);
  const double l1 = out.losses[0].item<double>(), l2 = out.losses[1].item<double>(), l3 = out.losses[2].item<double>();
  EXPECT_NEAR(out.loss.item<double>(), l1 + 0.5 * (l2 + l3) / 2, 1e-5);
  // Pass 1 is standard teacher forcing: cross-entropy of the plain forward, computed by hand.
  auto logp = torch::log_softmax(model->forward(tokens), -1);
  auto nll = -logp.gather(-1, targets.unsqueeze(-1)).mean().item<double>();
  EXPECT_NEAR(l1, nll, 1e-5);
}

// z-loss (SPEC §6): every pass's loss gains z · mean over scored positions of logsumexp², the
// logsumexp computed here from the returned logits; ignored targets (-1) are not scored.
TEST(Passes, ZLossAddsTheMeanSquaredLogsumexpToEveryPass) {
  auto c = ModelConfig::preset("debug");
  auto model = make_test_model(c);
  torch::manual_seed(10);
  auto tokens = torch::randint(0, c.vocab_size, {2, 12}, torch::kLong);
  auto targets = torch::randint(0, c.vocab_size, {2, 12}, torch::kLong);
  targets[1][5] = -1;
  PassOptions o;
  o.passes = 2;
  o.keep_logits = true;
  const auto plain = forward_passes(model, tokens, targets, o);
  o.z_loss = 0.01;
  const auto with_z = forward_passes(model, tokens, targets, o);
  ASSERT_EQ(with_z.z_losses.size(), 2u);
  auto scored = targets.ge(0);
  for (int k = 0; k < 2; ++k) {
    auto lse = torch::logsumexp(plain.logits[k].to(torch::kDouble), -1);  // [B,T]
    const double expected = 0.01 * lse.square().masked_select(scored).mean().item<double>();
    EXPECT_NEAR(with_z.z_losses[k].item<double>(), expected, 1e-6 * expected);
    EXPECT_NEAR(with_z.losses[k].item<double>(), plain.losses[k].item<double>(), 1e-6);  // CE unchanged
  }
  // (CE1 + z1) + λ·mean(CE2 + z2) with λ = 1 and one later pass.
  const double z = with_z.z_losses[0].item<double>() + with_z.z_losses[1].item<double>();
  EXPECT_NEAR(with_z.loss.item<double>(), plain.loss.item<double>() + z, 1e-5);
}

// Prefix mixin: with probability 1 and a fixed prefix covering the sequence, later passes are
// standard; jitter changes later passes only.
TEST(Passes, MixinAndJitter) {
  auto c = ModelConfig::preset("debug");
  auto model = make_test_model(c);
  torch::manual_seed(10);
  const int64_t T = 16;
  auto tokens = torch::randint(0, c.vocab_size, {2, T}, torch::kLong);
  torch::NoGradGuard no_grad;
  PassOptions o;
  o.passes = 2;
  o.keep_logits = true;
  o.plain_prefix = torch::full({2}, T, torch::kLong);
  auto out = forward_passes(model, tokens, {}, o);
  EXPECT_EQ(max_abs_diff(out.logits[0], out.logits[1]), 0.0);  // plain inputs are bitwise identical

  PassOptions j;
  j.passes = 2;
  j.keep_logits = true;
  auto clean = forward_passes(model, tokens, {}, j);
  j.jitter = 0.02;
  auto noisy = forward_passes(model, tokens, {}, j);
  EXPECT_EQ(max_abs_diff(clean.logits[0], noisy.logits[0]), 0.0);
  EXPECT_GT(max_abs_diff(clean.logits[1], noisy.logits[1]), 1e-6);

  // Random mixin with probability 1: p ~ U{0..T-1} per row; over many draws some rows get
  // later passes that differ from the all-fused pass 2 and, on average, about half the
  // positions are plain. Check the draw distribution through the generator directly.
  PassOptions m;
  m.passes = 2;
  m.keep_logits = true;
  m.mixin_prob = 1.0;
  m.generator = at::make_generator<at::CPUGeneratorImpl>(123);
  auto mixed = forward_passes(model, tokens, {}, m);
  // Position 0 is plain in both; position 1 is plain only if p > 1. At least the logits at
  // position 0 agree exactly with the all-fused run.
  EXPECT_EQ(max_abs_diff(mixed.logits[1].select(1, 0), clean.logits[1].select(1, 0)), 0.0);
}

// Issue 23: one prefix draw per sequence (train.mixin_draw = per_sequence) keeps the same plain
// prefix in every pass, so the run equals the one given that prefix outright (SPEC §5's
// exactness for t < p + k − 1 then holds in training); per_pass draws anew for pass 3.
TEST(Passes, PerSequenceMixinKeepsOnePrefixForAllPasses) {
  auto c = ModelConfig::preset("debug");
  auto model = make_test_model(c);
  const int64_t B = 4, T = 16;
  torch::manual_seed(11);
  auto tokens = torch::randint(0, c.vocab_size, {B, T}, torch::kLong);
  torch::NoGradGuard no_grad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(123);
  const auto p = torch::randint(0, T, {B}, generator, torch::kLong);  // the mixin's first draw
  ASSERT_GT(p.max().item<int64_t>(), 1);
  PassOptions fixed;
  fixed.passes = 3;
  fixed.keep_logits = true;
  fixed.plain_prefix = p;
  const auto expected = forward_passes(model, tokens, {}, fixed).logits;
  for (bool per_sequence : {true, false}) {
    PassOptions m;
    m.passes = 3;
    m.keep_logits = true;
    m.mixin_prob = 1.0;
    m.mixin_per_sequence = per_sequence;
    m.generator = at::make_generator<at::CPUGeneratorImpl>(123);
    const auto mixed = forward_passes(model, tokens, {}, m).logits;
    EXPECT_EQ(max_abs_diff(mixed[1], expected[1]), 0.0);  // pass 2: the first draw either way
    if (per_sequence)
      EXPECT_EQ(max_abs_diff(mixed[2], expected[2]), 0.0);
    else
      EXPECT_GT(max_abs_diff(mixed[2], expected[2]), 1e-4);  // pass 3 drew other prefixes
  }
}

/// RMSNorm_in by hand: x / sqrt(mean(x²) + eps) · gain. x [...,D].
torch::Tensor input_rms_norm(FBT& model, const torch::Tensor& x) {
  const auto gain = model->named_parameters()["input_norm.weight"];
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + model->config().norm_eps) * gain;
}

// Issue 23, model.input_norm = listing3 (the paper's Listing 3): pass 1 (= the standard forward)
// takes the raw embedding; a feedback pass normalises every row, so a plain row of pass 2 is
// RMSNorm_in(e) and a fused row RMSNorm_in((W_U h) ⊙ σ(W_G RMSNorm_in(e))), both by hand. With
// our every_pass norm the plain rows are the same in every pass (MixinAndJitter); here they differ.
TEST(Passes, Listing3InputNormRawInPassOneNormalisedInFeedbackPasses) {
  auto c = ModelConfig::preset("debug");
  c.input_norm = InputNorm::Listing3;
  auto model = make_test_model(c);
  const int64_t T = 12;
  torch::manual_seed(12);
  auto tokens = torch::randint(0, c.vocab_size, {2, T}, torch::kLong);
  torch::NoGradGuard no_grad;
  const auto e = model->embed(tokens);  // [2,T,D]
  EXPECT_TRUE(torch::equal(model->plain_input(e), e));
  PassOptions o;
  o.passes = 2;
  o.keep_logits = true;
  o.plain_prefix = torch::full({2}, T, torch::kLong);  // every row plain in both passes
  const auto logits = forward_passes(model, tokens, {}, o).logits;
  const auto layout = Layout::contiguous(T, tokens.device());
  EXPECT_EQ(max_abs_diff(logits[0], model->forward(tokens)), 0.0);
  EXPECT_EQ(max_abs_diff(logits[0], model->head(model->stack(e, layout))), 0.0);
  EXPECT_LT(max_abs_diff(logits[1], model->head(model->stack(input_rms_norm(model, e), layout))), 1e-4);
  EXPECT_GT(max_abs_diff(logits[0], logits[1]), 1e-3);

  auto h = torch::randn({3, c.d_model}), x = torch::randn({3, c.d_model});
  const auto params = model->named_parameters();
  const auto g = torch::matmul(h, params["fusion.w_u.weight"].t()) *
                 torch::sigmoid(torch::matmul(input_rms_norm(model, x), params["fusion.w_g.weight"].t()));
  const auto plain = torch::tensor({true, false, true}).view({3, 1});
  const auto expected = torch::where(plain, input_rms_norm(model, x), input_rms_norm(model, g));
  EXPECT_LT(max_abs_diff(model->feedback_input(h, x, plain), expected), 1e-5);
  c.input_norm = InputNorm::EveryPass;  // ours: plain rows RMSNorm_in(e) already, kept as they are
  auto ours = make_test_model(c);
  const auto e_n = ours->plain_input(x);
  EXPECT_LT(max_abs_diff(e_n, input_rms_norm(ours, x)), 1e-5);
  EXPECT_TRUE(torch::equal(ours->feedback_input(h, e_n, plain).select(0, 0), e_n.select(0, 0)));
}

// Issue 23, model.fusion_init: identity (ours: W_U = I, W_G ~ N(0, σ_G)) or uniform (the first
// author's: both U(−√(3/D), √(3/D)), std 1/√D).
TEST(Passes, FusionInitIdentityOrUniform) {
  auto c = ModelConfig::preset("debug");
  const double D = c.d_model;
  auto init = [](const ModelConfig& config) {  // the constructor's weights (make_test_model perturbs W_U, W_G)
    torch::manual_seed(7);
    return FBT(config)->named_parameters();
  };
  auto identity = init(c);
  EXPECT_TRUE(torch::equal(identity["fusion.w_u.weight"], torch::eye(c.d_model)));
  EXPECT_NEAR(identity["fusion.w_g.weight"].std().item<double>(), c.fusion_gate_init_std, 0.1 * c.fusion_gate_init_std);
  c.fusion_init = FusionInit::Uniform;
  auto uniform = init(c);
  for (const char* name : {"fusion.w_u.weight", "fusion.w_g.weight"}) {
    const auto w = uniform[name];
    EXPECT_LE(w.abs().max().item<double>(), std::sqrt(3 / D)) << name;
    EXPECT_NEAR(w.std().item<double>(), 1 / std::sqrt(D), 0.05 / std::sqrt(D)) << name;
    EXPECT_NEAR(w.mean().item<double>(), 0.0, 0.05 / std::sqrt(D)) << name;
  }
  EXPECT_TRUE(torch::equal(uniform["blocks.0.attn.wq.weight"], identity["blocks.0.attn.wq.weight"]))
      << "only the fusion's init changes";
}

// Activation checkpointing gives the same loss and parameter gradients.
TEST(Passes, CheckpointingMatchesPlainBackward) {
  auto c = ModelConfig::preset("debug");
  torch::manual_seed(11);
  auto tokens = torch::randint(0, c.vocab_size, {2, 16}, torch::kLong).to(test_device());
  auto targets = torch::randint(0, c.vocab_size, {2, 16}, torch::kLong).to(test_device());
  std::vector<std::vector<torch::Tensor>> grads;
  std::vector<double> losses;
  for (bool ckpt : {false, true}) {
    auto model = make_test_model(c, 7, test_device());
    model->train();
    PassOptions o;
    o.passes = 3;
    o.checkpoint = ckpt;
    auto out = forward_passes(model, tokens, targets, o);
    out.loss.backward();
    losses.push_back(out.loss.item<double>());
    std::vector<torch::Tensor> g;
    for (auto& p : model->parameters()) g.push_back(p.grad().clone());
    grads.push_back(g);
  }
  EXPECT_NEAR(losses[0], losses[1], 1e-6);
  for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_LT(max_abs_diff(grads[0][i], grads[1][i]), 1e-5) << i;
}

// run_passes by hand: with the toy pass h_k[t] = x[t] + 0.5·before[t], pass k's state at t is
// Σ_{j<k} 0.5^j·x[t−j] (terms before position 0 are zero); a sequence run in three spans with the
// carry gives exactly the whole-sequence states; a carry of the wrong length is refused.
TEST(RunPasses, ToyRecurrenceByHandAndSpansWithTheCarry) {
  const int64_t K = 3, T = 7;
  const auto x = torch::arange(1, T + 1, torch::kDouble).view({1, T, 1}) * torch::tensor({1.0, -2.0}, torch::kDouble);
  auto run = [&](int64_t t0, int64_t m, std::vector<torch::Tensor>* carry) {
    std::vector<torch::Tensor> states;
    run_passes(
        K,
        [&](int64_t k, const torch::Tensor& before) {
          auto h = x.narrow(1, t0, m).clone();
          if (k > 1) h += 0.5 * before;
          states.push_back(h);
          return h;
        },
        carry);
    return states;  // per pass [1,m,2]
  };
  const auto whole = run(0, T, nullptr);
  for (int64_t k = 1; k <= K; ++k)
    for (int64_t t = 0; t < T; ++t) {
      double expected = 0;
      for (int64_t j = 0; j < k && t - j >= 0; ++j) expected += std::pow(0.5, j) * double(t - j + 1);
      EXPECT_DOUBLE_EQ(whole[k - 1][0][t][0].item<double>(), expected) << "pass " << k << " position " << t;
      EXPECT_DOUBLE_EQ(whole[k - 1][0][t][1].item<double>(), -2 * expected);
    }
  std::vector<torch::Tensor> carry;
  std::vector<std::vector<torch::Tensor>> spans{run(0, 2, &carry), run(2, 4, &carry), run(6, 1, &carry)};
  for (int64_t k = 0; k < K; ++k)
    EXPECT_TRUE(torch::equal(torch::cat({spans[0][k], spans[1][k], spans[2][k]}, 1), whole[k])) << "pass " << k + 1;
  ASSERT_EQ(carry.size(), size_t(K - 1));
  EXPECT_TRUE(torch::equal(carry[0], whole[0].narrow(1, T - 1, 1)));
  std::vector<torch::Tensor> wrong(4);
  EXPECT_THROW(run_passes(
                   K,
                   [](int64_t, const torch::Tensor&) {
                     return torch::zeros({1, 1, 1});
                   },
                   &wrong),
               Error);
  EXPECT_THROW(run_passes(0, [](int64_t, const torch::Tensor&) { return torch::Tensor(); }), Error);
}

}  // namespace
}  // namespace fbt
