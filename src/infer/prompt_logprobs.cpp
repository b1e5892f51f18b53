// prompt_logprobs: teacher-forced per-token log-probabilities (and top-n alternatives) of a prompt
// in the standard, soft and fused(k) modes — the echo + logprobs of /v1/completions.
#include "fbt/infer/prompt_logprobs.h"

#include <algorithm>
#include <limits>
#include <string>

#include "fbt/util/error.h"

namespace fbt {

namespace {

/// Next-token logits [T,V] (float, CPU) of tokens [1,T] in `decoding` through `backend` (the
/// header's definitions): Standard and Fused(k) are the backend's prefill with every position's
/// logits; Soft prefills the first token and feeds the rest one decode step each.
torch::Tensor mode_logits(DecodeBackend& backend, const torch::Tensor& tokens, const Decoding& decoding) {
  const int64_t T = tokens.size(1);
  auto cache = backend.new_cache(1, T);
  if (decoding.mode != DecodeMode::Soft) {
    const auto valid = torch::ones({1, T}, torch::kBool);
    return backend.prefill(tokens, valid, decoding, cache, PassLogits::All)[0].to(torch::kCPU, torch::kFloat);
  }
  std::vector<torch::Tensor> rows{// [1,V] each
                                  backend.prefill_pass(tokens.narrow(1, 0, 1), torch::ones({1, 1}, torch::kBool), cache,
                                                       nullptr, nullptr, PassLogits::Last)};
  for (int64_t t = 1; t < T; ++t) rows.push_back(backend.step(tokens.select(1, t), DecodeMode::Soft, cache));
  return torch::cat(rows, 0).to(torch::kCPU, torch::kFloat);
}

/// The top_n entries of each row of lp [R,V] (float, CPU), best first, ties by lower id first.
/// topk gives each row's n-th largest value exactly; every entry at or above it (all ties at the
/// boundary included) is then ordered by (value descending, id ascending) and cut to top_n.
std::vector<std::vector<std::pair<int64_t, float>>> top_entries(const torch::Tensor& lp, int64_t top_n) {
  const int64_t R = lp.size(0);
  std::vector<std::vector<std::pair<int64_t, float>>> top(static_cast<size_t>(R));
  const auto threshold = std::get<0>(lp.topk(top_n, -1)).select(1, top_n - 1);  // [R]
  const auto at_least = lp >= threshold.unsqueeze(1);                           // [R,V]
  const auto where = at_least.nonzero();                                        // [M,2], row-major order
  const auto idx = where.accessor<int64_t, 2>();
  const auto val = lp.accessor<float, 2>();
  for (int64_t m = 0; m < where.size(0); ++m) top[idx[m][0]].emplace_back(idx[m][1], val[idx[m][0]][idx[m][1]]);
  for (auto& row : top) {
    // Ids arrive ascending, so a stable sort by value keeps ties in id order.
    std::stable_sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    row.resize(static_cast<size_t>(top_n));
  }
  return top;
}

}  // namespace

PromptLogprobs prompt_logprobs(FBT& model, const std::vector<int64_t>& tokens, const Decoding& decoding,
                               int64_t top_n) {
  return prompt_logprobs(*torch_backend(model), tokens, decoding, top_n);
}

PromptLogprobs prompt_logprobs(DecodeBackend& backend, const std::vector<int64_t>& tokens, const Decoding& decoding,
                               int64_t top_n) {
  const auto& config = backend.model()->config();
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (T == 0) throw Error("prompt_logprobs: the prompt has no tokens");
  if (T > config.context)
    throw Error("prompt_logprobs: the prompt has " + std::to_string(T) + " tokens, more than the model context " +
                std::to_string(config.context));
  for (int64_t t = 0; t < T; ++t) {
    if (tokens[t] < 0 || tokens[t] >= config.vocab_size)
      throw Error("prompt_logprobs: token " + std::to_string(tokens[t]) + " at position " + std::to_string(t) +
                  " is outside the vocabulary [0, " + std::to_string(config.vocab_size) + ")");
  }
  if (top_n < 0) throw Error("prompt_logprobs: top_n must be >= 0 (got " + std::to_string(top_n) + ")");
  if (top_n > config.vocab_size)
    throw Error("prompt_logprobs: top_n " + std::to_string(top_n) + " exceeds the vocabulary size " +
                std::to_string(config.vocab_size));
  if (const auto p = decoding.problem(); !p.empty()) throw Error("prompt_logprobs: fused_passes " + p);

  torch::NoGradGuard no_grad;
  const auto ids = torch::tensor(tokens, torch::kLong).view({1, T});  // [1,T]
  // Position t-1's distribution scores token t: lp[t-1] over [T-1, V].
  const auto lp = torch::log_softmax(mode_logits(backend, ids, decoding).narrow(0, 0, T - 1), -1);
  const auto next = torch::tensor(tokens, torch::kLong).narrow(0, 1, T - 1);    // [T-1]
  const auto chosen = lp.gather(1, next.unsqueeze(1)).squeeze(1).contiguous();  // [T-1]

  PromptLogprobs out;
  out.logprob.assign(1, std::numeric_limits<float>::quiet_NaN());
  out.logprob.insert(out.logprob.end(), chosen.data_ptr<float>(), chosen.data_ptr<float>() + (T - 1));
  out.top.resize(1);
  if (top_n > 0 && T > 1) {
    auto rest = top_entries(lp, top_n);
    out.top.insert(out.top.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
  } else {
    out.top.resize(static_cast<size_t>(T));
  }
  return out;
}

}  // namespace fbt
