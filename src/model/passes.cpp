// The K-pass training forward: Jacobi iteration of the latent-feedback recurrence (SPEC §5).
#include "fbt/model/passes.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/functional/loss.h>

#include "fbt/util/error.h"

namespace fbt {
namespace {

/// Activation checkpointing of one pass: the forward keeps only its input u [B,T,D]; the
/// backward recomputes Stack(u) with grad enabled and back-propagates through it, which
/// accumulates parameter gradients into .grad directly (as PyTorch's reentrant checkpoint).
/// Use with loss.backward(), not with torch::autograd::grad on parameters.
struct CheckpointedStack : torch::autograd::Function<CheckpointedStack> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor u, FBTImpl* model) {
    ctx->save_for_backward({u});
    ctx->saved_data["model"] = reinterpret_cast<int64_t>(model);  // IValue holds no raw pointers
    return model->stack(u, Layout::contiguous(u.size(1), u.device()));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto* model = reinterpret_cast<FBTImpl*>(ctx->saved_data["model"].toInt());
    auto u = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::AutoGradMode enable(true);
    auto x = model->stack(u, Layout::contiguous(u.size(1), u.device()));
    torch::autograd::backward({x}, {grad_out[0]});
    return {u.grad(), torch::Tensor()};
  }
};

/// Bool [B,T]: t < p_b with p_b ~ Uniform{0..T-1} for rows drawn with probability `prob`
/// (SPEC §5 prefix mixin), or t < plain_prefix[b] when given.
torch::Tensor prefix_mask(const PassOptions& o, int64_t B, int64_t T, const torch::Device& dev) {
  auto t = torch::arange(T, torch::dtype(torch::kLong)).unsqueeze(0);  // [1,T]
  torch::Tensor prefix;                                                // [B]
  if (o.plain_prefix.defined()) {
    prefix = o.plain_prefix.to(torch::kCPU, torch::kLong);
  } else if (o.mixin_prob > 0) {
    auto p = torch::randint(0, T, {B}, o.generator, torch::dtype(torch::kLong));
    auto on = torch::rand({B}, o.generator) < o.mixin_prob;
    prefix = torch::where(on, p, torch::zeros_like(p));
  } else {
    return torch::zeros({B, T}, torch::dtype(torch::kBool).device(dev));
  }
  return (t < prefix.unsqueeze(1)).to(dev);
}

}  // namespace

void run_passes(int64_t passes, const PassStep& pass, std::vector<torch::Tensor>* carry) {
  if (passes < 1) throw Error("passes must be >= 1 (got " + std::to_string(passes) + ")");
  if (carry && !carry->empty() && int64_t(carry->size()) != passes - 1)
    throw Error("run_passes: a carry of " + std::to_string(carry->size()) + " states for " + std::to_string(passes) +
                " passes");
  if (carry) carry->resize(passes - 1);
  torch::Tensor before;  // [B,T,D]
  for (int64_t k = 1; k <= passes; ++k) {
    const auto state = pass(k, before);  // [B,T,D]
    if (k == passes) break;
    const int64_t T = state.size(1);
    auto first = carry && (*carry)[k - 1].defined() ? (*carry)[k - 1] : torch::zeros_like(state.narrow(1, 0, 1));
    if (carry) (*carry)[k - 1] = state.narrow(1, T - 1, 1).clone();  // the next span's first `before`
    before = torch::cat({first.to(state.scalar_type()), state.narrow(1, 0, T - 1)}, 1);
  }
}

PassOutput forward_passes(FBT& model, const torch::Tensor& tokens, const torch::Tensor& targets, const PassOptions& o) {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  if (o.passes < 1) throw Error("passes must be >= 1 (got " + std::to_string(o.passes) + ")");
  if (T > model->config().context)
    throw Error("sequence of " + std::to_string(T) + " tokens exceeds the model context " +
                std::to_string(model->config().context));
  const auto layout = Layout::contiguous(T, tokens.device());
  auto run_stack = [&](const torch::Tensor& u) {
    return o.checkpoint && u.requires_grad() ? CheckpointedStack::apply(u, model.get()) : model->stack(u, layout);
  };

  PassOutput out;
  auto e_n = model->plain_input(model->embed(tokens));  // [B,T,D]
  auto always_plain = model->plain_positions(tokens);   // [B,T]
  torch::Tensor plain;                                  // the plain positions of a feedback pass [B,T]
  run_passes(o.passes, [&](int64_t k, const torch::Tensor& before) {
    torch::Tensor u = e_n;  // pass 1: standard teacher forcing
    if (k > 1) {
      if (!plain.defined() || !o.mixin_per_sequence)
        plain = always_plain.logical_or(prefix_mask(o, B, T, tokens.device()));  // [B,T]
      u = model->feedback_input(before, e_n, plain.unsqueeze(-1));
    }
    const auto x = run_stack(u);  // [B,T,D]
    torch::Tensor state;          // [B,T,D]: this pass's feedback states
    if (k < o.passes || o.keep_states) state = model->feedback_state(x);
    if (o.keep_states) out.states.push_back(state);
    if (targets.defined() || o.keep_logits) {
      auto logits = model->head(x);  // [B,T,V]
      if (targets.defined()) {
        auto flat = logits.reshape({B * T, -1}).to(torch::kFloat);  // [B·T,V], loss in fp32
        auto flat_targets = targets.reshape({B * T});
        out.losses.push_back(torch::nn::functional::cross_entropy(
            flat, flat_targets, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-1)));
        if (o.z_loss > 0) {                       // z-loss (SPEC §6) on the scored positions
          auto lse = torch::logsumexp(flat, -1);  // [B·T]
          auto scored = flat_targets.ge(0).to(torch::kFloat);
          out.z_losses.push_back(o.z_loss * (lse.square() * scored).sum() / scored.sum().clamp_min(1));
        }
      }
      if (o.keep_logits) out.logits.push_back(logits);
    }
    if (k == o.passes) return torch::Tensor();
    // What the next pass is fed: the state, detached for the ablation, with its training noise.
    auto h = o.detach ? state.detach() : state;  // [B,T,D]
    if (o.jitter > 0)
      h = h +
          (torch::rand(h.sizes(), o.generator, torch::dtype(torch::kFloat)).to(h.device(), h.scalar_type()) * 2 - 1) *
              o.jitter;
    return h;
  });
  if (targets.defined()) {
    auto pass_loss = [&](int64_t k) { return o.z_loss > 0 ? out.losses[k] + out.z_losses[k] : out.losses[k]; };
    out.loss = pass_loss(0);
    if (o.passes > 1) {
      std::vector<torch::Tensor> later;
      for (int64_t k = 1; k < o.passes; ++k) later.push_back(pass_loss(k));
      out.loss = out.loss + o.later_weight * torch::stack(later).mean();
    }
  }
  return out;
}

}  // namespace fbt
