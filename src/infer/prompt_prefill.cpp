// PromptPrefill: prefill() of decode.cpp a chunk at a time, with each pass's feedback state carried.
#include "fbt/infer/prompt_prefill.h"

#include "fbt/util/error.h"

namespace fbt {

PromptPrefill::PromptPrefill(FBT model, std::vector<int64_t> prompt, const Decoding& decoding, int64_t capacity,
                             std::shared_ptr<DecodeBackend> backend)
    : model_(std::move(model)), prompt_(std::move(prompt)), capacity_(capacity),
      backend_(backend ? std::move(backend) : torch_backend(model_)) {
  const int64_t n = prompt_.size(), context = model_->config().context;
  if (n == 0) throw Error("the prompt is empty");
  if (capacity < n || capacity > context)
    throw Error("prefill capacity " + std::to_string(capacity) + " must lie in [prompt length " + std::to_string(n) +
                ", model context " + std::to_string(context) + "]");
  if (const auto p = decoding.problem(); !p.empty()) throw Error("fused_passes " + p);
  passes_ = decoding.prefill_passes();
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
  const auto valid = torch::ones({1, m}, torch::dtype(torch::kBool).device(param.device()));
  torch::Tensor state, logits;  // a pass's states [1,m,D]; the logits after the prompt's last chunk
  carry_.resize(passes_ - 1);
  for (int64_t j = 0; j < passes_; ++j) {  // pass 0 plain, pass j ≥ 1 fused with pass j−1's states
    torch::Tensor shifted;  // [1,m,D]: the state at t−1 for every t of the chunk
    if (j > 0) {
      // At the chunk's first position it is the carry (zeros before position 0, which is plain).
      auto before = start == 0 ? torch::zeros_like(state.narrow(1, 0, 1)) : carry_[j - 1];  // [1,1,D]
      shifted = torch::cat({before, state.narrow(1, 0, m - 1)}, 1);
      carry_[j - 1] = state.narrow(1, m - 1, 1).clone();
    }
    // Each pass continues its own cache from its next_pos; the last pass's sets the decode state.
    const CpuDecoder::PassFeedback feedback{shifted, plain_.narrow(1, start, m)};
    const bool last = j + 1 == passes_;  // the output layer only after the last pass of the last chunk
    logits = backend_->prefill_pass(tokens, valid, caches_[j], j > 0 ? &feedback : nullptr, last ? nullptr : &state,
                                    last && start + m == n);
  }
  next_ += m;
  if (!done()) return {};
  caches_.erase(caches_.begin(), caches_.end() - 1);  // the earlier passes' caches are done with
  carry_.clear();
  return logits;
}

}  // namespace fbt
