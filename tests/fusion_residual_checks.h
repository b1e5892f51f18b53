// Shared checks of the residual fusion (issue 38 item 1; SPEC §11 "Residual fusion"): with W_U = 0
// every decoding mode and every training pass gives the standard logits bit for bit. Used by
// tests/model/test_fusion_residual.cpp (random models of every block kind) and
// tests/io/test_fusion_residual_import.cpp (the HF/GGUF fixtures and SmolLM2).
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fbt/infer/cpu_decoder.h"
#include "fbt/infer/decode.h"
#include "fbt/model/model.h"
#include "fbt/model/passes.h"
#include "cpu_prefill.h"

namespace fbt::testing {

/// Tokens [B,T] drawn in [0, V) with the document separator (when the model has one) at row 1,
/// position T/2, so that a document start inside a row is checked too.
inline torch::Tensor residual_check_tokens(const ModelConfig& c, int64_t B, int64_t T, uint64_t seed) {
  torch::manual_seed(seed);
  auto tokens = torch::randint(0, c.vocab_size, {B, T}, torch::kLong);
  if (c.doc_separator_id >= 0 && B > 1) tokens[1][T / 2] = c.doc_separator_id;
  return tokens;
}

/// Valid flags [B,T] for left-padded prompts: row 0 has two leading pads (when T > 3).
inline torch::Tensor residual_check_valid(int64_t B, int64_t T) {
  auto valid = torch::ones({B, T}, torch::kBool);
  if (T > 3) valid[0].narrow(0, 0, 2).fill_(false);
  return valid;
}

/// A decode run: logits [B, T-P+1, V] after the P-token prompt (prefill) and every later token
/// of `tokens` (teacher-forced decode steps), and the final feedback state h_prev [B,D].
using DecodeRun = std::pair<torch::Tensor, torch::Tensor>;

/// run(mode, k) for Soft, Fused(1) and Fused(2) equals run(Standard, 0), logits and h_prev, with
/// torch::equal.
inline void expect_decode_runs_equal_standard(const std::function<DecodeRun(DecodeMode, int64_t)>& run,
                                              const std::string& where) {
  const auto standard = run(DecodeMode::Standard, 0);
  for (auto [mode, k] : {std::pair{DecodeMode::Soft, int64_t{0}}, {DecodeMode::Fused, 1}, {DecodeMode::Fused, 2}}) {
    const auto got = run(mode, k);
    EXPECT_TRUE(torch::equal(got.first, standard.first))
        << where << ": " << Decoding::make(mode, k).label() << " logits";
    EXPECT_TRUE(torch::equal(got.second, standard.second))
        << where << ": " << Decoding::make(mode, k).label() << " h_prev";
  }
}

/// The generic Torch path (decode.cpp, passes.cpp) on tokens [B,T]: training passes 2..3 equal
/// pass 1; the sequential soft recurrence equals the same recurrence with every position plain;
/// Soft, Fused(1) and Fused(2) prefill + decode equal Standard (logits and h_prev), all with
/// torch::equal. `where` names the model in failures.
inline void expect_generic_modes_equal_standard(FBT& model, const torch::Tensor& tokens, const std::string& where) {
  torch::NoGradGuard no_grad;
  const int64_t B = tokens.size(0), T = tokens.size(1), P = T / 2;
  PassOptions o;
  o.passes = 3;
  o.keep_logits = true;
  const auto passes = forward_passes(model, tokens, torch::Tensor(), o);
  for (int64_t k = 1; k < 3; ++k)
    EXPECT_TRUE(torch::equal(passes.logits[k], passes.logits[0])) << where << ": training pass " << k + 1;

  const auto all_plain = torch::full({B}, T, torch::kLong);
  EXPECT_TRUE(torch::equal(sequential_logits(model, tokens), sequential_logits(model, tokens, all_plain)))
      << where << ": sequential soft recurrence";

  const auto prompt = tokens.narrow(1, 0, P);
  const auto valid = residual_check_valid(B, P);
  auto run = [&](DecodeMode mode, int64_t k) -> DecodeRun {
    KVCache cache(model->config(), B, T, model->parameters().front().options());
    std::vector<torch::Tensor> logits{prefill(model, prompt, valid, Decoding::make(mode, k), cache)};
    for (int64_t t = P; t < T; ++t) logits.push_back(decode_step(model, tokens.select(1, t).contiguous(), mode, cache));
    return {torch::stack(logits, 1), cache.h_prev().clone()};
  };
  expect_decode_runs_equal_standard(run, where);
}

/// The same through CpuDecoder (fp32): its Soft, Fused(1) and Fused(2) prefill + steps equal its
/// own Standard ones bit for bit. The model must satisfy CpuDecoder::supports.
inline void expect_cpu_decoder_modes_equal_standard(FBT& model, const torch::Tensor& tokens, const std::string& where) {
  torch::NoGradGuard no_grad;
  const int64_t B = tokens.size(0), T = tokens.size(1), P = T / 2;
  CpuDecoder decoder(model);
  const auto prompt = tokens.narrow(1, 0, P);
  const auto valid = residual_check_valid(B, P);
  auto run = [&](DecodeMode mode, int64_t k) -> DecodeRun {
    KVCache cache(model->config(), B, T, torch::dtype(torch::kFloat));
    std::vector<torch::Tensor> logits{testing::cpu_prefill(decoder, prompt, valid, cache, k)};
    const auto step_mode = mode == DecodeMode::Standard ? DecodeMode::Standard : DecodeMode::Soft;
    for (int64_t t = P; t < T; ++t) logits.push_back(decoder.step(tokens.select(1, t).contiguous(), step_mode, cache));
    return {torch::stack(logits, 1), cache.h_prev().clone()};
  };
  expect_decode_runs_equal_standard(run, where + ": CpuDecoder");
}

/// Both checks (CpuDecoder where it supports the model), after checking that W_U is 0.
inline void expect_every_mode_equals_standard(FBT& model, const torch::Tensor& tokens, const std::string& where) {
  ASSERT_EQ(model->config().fusion, Fusion::Residual) << where;
  const auto w_u = model->named_parameters()["fusion.w_u.weight"];
  ASSERT_TRUE(torch::equal(w_u, torch::zeros_like(w_u))) << where << ": W_U must start at 0";
  expect_generic_modes_equal_standard(model, tokens, where);
  if (CpuDecoder::supports(model)) expect_cpu_decoder_modes_equal_standard(model, tokens, where);
}

}  // namespace fbt::testing
