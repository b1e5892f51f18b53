// PromptPrefill: prefill() of decode.cpp a chunk at a time, with each pass's feedback state carried.
#include "fbt/infer/prompt_prefill.h"

#include "fbt/util/error.h"

namespace fbt {

PromptPrefill::PromptPrefill(FBT model, std::vector<int64_t> prompt, DecodeMode mode, int64_t fused_passes,
                             int64_t capacity, CpuDecoder* cpu)
    : model_(std::move(model)), prompt_(std::move(prompt)), capacity_(capacity), cpu_(cpu) {
  const int64_t n = prompt_.size(), context = model_->config().context;
  if (n == 0) throw Error("the prompt is empty");
  if (capacity < n || capacity > context)
    throw Error("prefill capacity " + std::to_string(capacity) + " must lie in [prompt length " + std::to_string(n) +
                ", model context " + std::to_string(context) + "]");
  if (mode == DecodeMode::Fused && fused_passes < 1)
    throw Error("fused decoding needs --fused-passes >= 1 (got " + std::to_string(fused_passes) + ")");
  passes_ = mode == DecodeMode::Fused ? 1 + fused_passes : 1;
  const auto device = model_->parameters().front().device();
  plain_ = model_->plain_positions(torch::tensor(prompt_, torch::kLong).view({1, n}).to(device));  // [1,n]
}

torch::Tensor PromptPrefill::run(int64_t chunk) {
  if (chunk < 1) throw Error("prefill chunk must be >= 1 (got " + std::to_string(chunk) + ")");
  if (done()) throw Error("PromptPrefill::run: the prompt is already prefilled");
  const int64_t n = prompt_.size(), start = next_, m = std::min(chunk, n - start);
  const auto param = model_->parameters().front();
  if (caches_.empty())
    for (int64_t j = 0; j < passes_; ++j)
      caches_.emplace_back(model_->config(), 1, j + 1 == passes_ ? capacity_ : n, param.options());

  auto tokens = torch::tensor(std::vector<int64_t>(prompt_.begin() + start, prompt_.begin() + start + m),
                              torch::kLong).view({1, m}).to(param.device());  // [1,m]
  if (cpu_ && passes_ == 1) {  // one plain pass, continuing the cache (positions from its next_pos)
    auto logits = cpu_->prefill(tokens, torch::ones({1, m}, torch::kBool), caches_[0]);
    next_ += m;
    return done() ? logits : torch::Tensor();
  }
  const Layout layout{torch::arange(start, start + m, tokens.options()).view({1, m}), {}};
  auto e_n = model_->plain_input(model_->embed(tokens));  // [1,m,D]
  auto x = model_->stack(e_n, layout, &caches_[0]);      // pass 0: plain
  carry_.resize(passes_ - 1);
  for (int64_t j = 1; j < passes_; ++j) {
    auto state = model_->feedback_state(x);  // pass j−1's states at the chunk's positions [1,m,D]
    // The state at t−1 for every t of the chunk: the carry at the chunk's first position.
    auto before = start == 0 ? torch::zeros_like(state.narrow(1, 0, 1)) : carry_[j - 1];  // [1,1,D]
    auto shifted = torch::cat({before, state.narrow(1, 0, m - 1)}, 1);                     // [1,m,D]
    carry_[j - 1] = state.narrow(1, m - 1, 1);
    auto plain = plain_.narrow(1, start, m).unsqueeze(-1);  // [1,m,1]
    x = model_->stack(model_->feedback_input(shifted, e_n, plain), layout, &caches_[j]);
  }
  next_ += m;
  if (!done()) return {};

  auto last = x.narrow(1, m - 1, 1);  // [1,1,D]
  KVCache& cache = caches_.back();
  cache.h_prev.copy_(model_->feedback_state(last).select(1, 0));
  cache.last_token.fill_(prompt_.back());
  cache.next_pos.fill_(n);
  caches_.erase(caches_.begin(), caches_.end() - 1);  // the earlier passes' caches are done with
  carry_.clear();
  return model_->head(last).select(1, 0);  // [1,V]
}

}  // namespace fbt
