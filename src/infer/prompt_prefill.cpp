// PromptPrefill: prefill() of decode.cpp a chunk at a time, with each pass's feedback state carried.
#include "fbt/infer/prompt_prefill.h"

#include "fbt/model/passes.h"
#include "fbt/util/error.h"

namespace fbt {

PromptPrefill::PromptPrefill(FBT model, std::vector<int64_t> prompt, const Decoding& decoding, int64_t capacity,
                             std::shared_ptr<DecodeBackend> backend)
    : model_(std::move(model)),
      prompt_(std::move(prompt)),
      capacity_(capacity),
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

  auto tokens = torch::tensor(std::vector<int64_t>(prompt_.begin() + start, prompt_.begin() + start + m), torch::kLong)
                    .view({1, m})
                    .to(param.device());  // [1,m]
  const auto valid = torch::ones({1, m}, torch::dtype(torch::kBool).device(param.device()));
  const auto plain = plain_.narrow(1, start, m);  // [1,m]
  torch::Tensor logits;                           // [1,V] after the prompt's last chunk
  // Pass j+1 continues its own cache from its next_pos; the carry holds each pass's state at the
  // position before the chunk (a chunk boundary is not a document start).
  run_passes(
      passes_,
      [&](int64_t k, const torch::Tensor& before) {
        const CpuDecoder::PassFeedback feedback{before, plain};
        const bool last = k == passes_;  // the output layer only after the last pass of the last chunk
        torch::Tensor state;             // [1,m,D]
        logits =
            backend_->prefill_pass(tokens, valid, caches_[k - 1], k > 1 ? &feedback : nullptr, last ? nullptr : &state,
                                   last && start + m == n ? PassLogits::Last : PassLogits::None);
        return state;
      },
      &carry_);
  next_ += m;
  if (!done()) return {};
  caches_.erase(caches_.begin(), caches_.end() - 1);  // the earlier passes' caches are done with
  carry_.clear();
  return logits;
}

}  // namespace fbt
