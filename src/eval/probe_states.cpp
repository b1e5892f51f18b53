// Per-layer residual streams under standard and one-step recurrent prefill (for probes).
#include "fbt/eval/probe_states.h"

#include <torch/torch.h>

#include "fbt/model/passes.h"
#include "fbt/util/error.h"

namespace fbt {

ProbeStates probe_states(FBT& model, const torch::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  if (T > model->config().context)
    throw Error("sequence of " + std::to_string(T) + " tokens exceeds the model context " +
                std::to_string(model->config().context));
  torch::NoGradGuard no_grad;
  const auto layout = Layout::contiguous(T, tokens.device());
  auto e_n = model->plain_input(model->embed(tokens));  // [B,T,D]
  std::vector<torch::Tensor> standard, recurrent;
  auto plain = model->plain_positions(tokens);  // [B,T]
  plain.narrow(1, 0, T - 1).fill_(true);        // only the last position may be fused
  run_passes(2, [&](int64_t k, const torch::Tensor& before) {
    if (k == 1) return model->feedback_state(model->stack(e_n, layout, nullptr, &standard));  // [B,T,D]
    model->stack(model->feedback_input(before, e_n, plain.unsqueeze(-1)), layout, nullptr, &recurrent);
    return torch::Tensor();
  });
  return {torch::stack(standard), torch::stack(recurrent)};  // [L+1,B,T,D]
}

}  // namespace fbt
