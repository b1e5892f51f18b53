// ModelScorer: batched teacher-forced log-likelihoods after 0 (standard) or k fused passes.
#include "fbt/eval/scorer.h"

#include <algorithm>
#include <numeric>

#include "fbt/model/passes.h"
#include "fbt/util/error.h"

namespace fbt {

ModelScorer::ModelScorer(FBT model, const Decoding& decoding, int64_t batch)
    : model_(std::move(model)), decoding_(decoding), batch_(batch) {
  if (decoding.mode == DecodeMode::Soft) throw Error("the scorer runs the standard or a fused mode, not soft");
  if (const auto p = decoding.problem(); !p.empty()) throw Error("--fused-passes " + p);
  if (batch < 1) throw Error("--batch must be >= 1 (got " + std::to_string(batch) + ")");
}

std::vector<ScoreResult> ModelScorer::score(const std::vector<ScoreRequest>& requests) {
  const int64_t T = model_->config().context;
  for (const auto& r : requests) {
    if (r.context.empty() || r.continuation.empty())
      throw Error("a scoring request has an empty context or continuation");
    if (static_cast<int64_t>(r.continuation.size()) > T)
      throw Error("a continuation of " + std::to_string(r.continuation.size()) + " tokens exceeds the model context " +
                  std::to_string(T));
  }
  // Longest first, so that each batch pads little.
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto length = [&](size_t i) { return requests[i].context.size() + requests[i].continuation.size(); };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return length(a) > length(b); });

  torch::NoGradGuard no_grad;
  const bool was_training = model_->is_training();
  model_->eval();
  const auto device = model_->parameters().front().device();
  PassOptions options;
  options.passes = decoding_.prefill_passes();
  options.keep_logits = true;

  std::vector<ScoreResult> results(requests.size());
  for (size_t first = 0; first < order.size(); first += static_cast<size_t>(batch_)) {
    const int64_t B = std::min<int64_t>(batch_, static_cast<int64_t>(order.size() - first));
    // Row b holds S[0, L) of S = the last ≤ T+1 tokens of context + continuation; position p
    // predicts S[p+1], so the continuation's C tokens are the targets of positions L-C .. L-1.
    std::vector<std::vector<int64_t>> rows(static_cast<size_t>(B));
    int64_t W = 0;
    for (int64_t b = 0; b < B; ++b) {
      const auto& r = requests[order[first + b]];
      auto& s = rows[b];
      s = r.context;
      s.insert(s.end(), r.continuation.begin(), r.continuation.end());
      if (static_cast<int64_t>(s.size()) > T + 1) s.erase(s.begin(), s.end() - (T + 1));
      W = std::max<int64_t>(W, static_cast<int64_t>(s.size()) - 1);
    }
    auto tokens = torch::zeros({B, W}, torch::kLong);      // [B,W], right-padded with id 0
    auto targets = torch::full({B, W}, -1, torch::kLong);  // [B,W], -1 off the continuation
    auto tok = tokens.accessor<int64_t, 2>();
    auto tgt = targets.accessor<int64_t, 2>();
    for (int64_t b = 0; b < B; ++b) {
      const auto& s = rows[b];
      const int64_t L = static_cast<int64_t>(s.size()) - 1;
      const int64_t C = static_cast<int64_t>(requests[order[first + b]].continuation.size());
      for (int64_t p = 0; p < L; ++p) tok[b][p] = s[p];
      for (int64_t p = L - C; p < L; ++p) tgt[b][p] = s[p + 1];
    }
    tokens = tokens.to(device);
    targets = targets.to(device);
    const auto logits = forward_passes(model_, tokens, {}, options).logits.back().to(torch::kFloat);  // [B,W,V]
    const auto scored = targets >= 0;                                                                 // [B,W]
    const auto safe = targets.clamp_min(0);
    const auto token_ll = torch::log_softmax(logits, -1).gather(-1, safe.unsqueeze(-1)).squeeze(-1);  // [B,W]
    const auto loglik = torch::where(scored, token_ll, torch::zeros_like(token_ll)).to(torch::kDouble).sum(1).cpu();
    const auto greedy = (logits.argmax(-1) == safe).logical_or(scored.logical_not()).all(1).cpu();  // [B]
    for (int64_t b = 0; b < B; ++b) results[order[first + b]] = {loglik[b].item<double>(), greedy[b].item<bool>()};
  }
  model_->train(was_training);
  return results;
}

}  // namespace fbt
