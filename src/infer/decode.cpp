// Prefill and decode steps for Standard, Soft and Fused(k) decoding with a KV cache (SPEC §7).
#include "fbt/infer/decode.h"

#include "fbt/model/passes.h"
#include "fbt/util/error.h"

namespace fbt {

namespace {

/// Feeds one token per row through the cached stack. plain [B] bool picks the plain input,
/// otherwise the input is fused with cache.h_prev; an undefined `plain` means every row is
/// plain (Standard decoding, which then never computes the fusion). Returns the top residual
/// x [B,1,D].
torch::Tensor cached_step(FBT& model, const torch::Tensor& tokens, const torch::Tensor& plain, KVCache& cache) {
  auto tok = tokens.view({-1, 1});                                                              // [B,1]
  auto e_n = model->plain_input(model->embed(tok, /*check_ids=*/!cache.write_slot.defined()));  // [B,1,D]
  auto u = e_n;
  if (plain.defined()) u = model->feedback_input(cache.h_prev().unsqueeze(1), e_n, plain.view({-1, 1, 1}));
  Layout layout{cache.next_pos().view({-1, 1}), {}};
  auto x = model->stack(u, layout, &cache);  // [B,1,D]
  cache.advance_step(model->feedback_state(x).select(1, 0), tokens);
  return x;
}

}  // namespace

torch::Tensor prefill_plain_positions(FBT& model, const torch::Tensor& tokens, const torch::Tensor& valid) {
  return model->plain_positions(tokens).logical_or(Layout::left_padded(valid.to(torch::kBool)).positions == 0);
}

torch::Tensor prefill(FBT& model, const torch::Tensor& tokens, const torch::Tensor& valid, const Decoding& decoding,
                      KVCache& cache) {
  const int64_t T = tokens.size(1);
  if (const auto p = decoding.problem(); !p.empty()) throw Error("prefill: fused_passes " + p);
  const auto layout = Layout::left_padded(valid);
  auto e_n = model->plain_input(model->embed(tokens));                             // [B,T,D]
  const auto plain = prefill_plain_positions(model, tokens, valid).unsqueeze(-1);  // [B,T,1]
  const int64_t passes = decoding.prefill_passes();
  torch::Tensor x;  // the last pass's top residual [B,T,D], the only pass that fills the cache
  run_passes(passes, [&](int64_t k, const torch::Tensor& before) {
    x = model->stack(k == 1 ? e_n : model->feedback_input(before, e_n, plain), layout, k == passes ? &cache : nullptr);
    return k == passes ? torch::Tensor() : model->feedback_state(x);
  });
  auto last = x.narrow(1, T - 1, 1);  // [B,1,D]
  cache.advance(model->feedback_state(last).select(1, 0), tokens.select(1, T - 1),
                layout.positions.select(1, T - 1) + 1);
  return model->head(last).select(1, 0);  // [B,V]
}

torch::Tensor decode_step(FBT& model, const torch::Tensor& tokens, DecodeMode mode, KVCache& cache) {
  torch::Tensor plain;  // [B]; undefined: every row plain
  if (mode != DecodeMode::Standard) plain = cache.last_token() == model->config().doc_separator_id;
  return model->head(cached_step(model, tokens, plain, cache)).select(1, 0);  // [B,V]
}

torch::Tensor sequential_logits(FBT& model, const torch::Tensor& tokens, const torch::Tensor& plain_prefix) {
  torch::NoGradGuard no_grad;
  const int64_t B = tokens.size(0), T = tokens.size(1);
  auto param = model->parameters().front();
  KVCache cache(model->config(), B, T, param.options());
  auto plain = model->plain_positions(tokens);  // [B,T]
  if (plain_prefix.defined())
    plain.logical_or_(torch::arange(T, tokens.options()).unsqueeze(0) < plain_prefix.view({-1, 1}).to(tokens.device()));
  std::vector<torch::Tensor> logits;
  for (int64_t t = 0; t < T; ++t)
    logits.push_back(model->head(cached_step(model, tokens.select(1, t), plain.select(1, t), cache)));
  return torch::cat(logits, 1);  // [B,T,V]
}

}  // namespace fbt
