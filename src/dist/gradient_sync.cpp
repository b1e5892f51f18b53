// Bucketed, hook-launched gradient all-reduce (see gradient_sync.h).
#include "fbt/dist/gradient_sync.h"

#include <chrono>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "fbt/util/error.h"

namespace fbt {

GradientSync::GradientSync(Communicator& comm, std::vector<torch::Tensor> params, int64_t bucket_bytes, bool overlap)
    : comm_(comm), params_(std::move(params)), bucket_of_(params_.size()) {
  for (const auto& p : params_)
    if (p.scalar_type() != params_[0].scalar_type() || p.device() != params_[0].device())
      throw Error("data-parallel training: all parameters must share one dtype and device");
  int64_t filled = 0;  // bytes in the last bucket
  for (size_t k = params_.size(); k-- > 0;) {
    const int64_t bytes = params_[k].numel() * int64_t(params_[k].element_size());
    if (buckets_.empty() || (filled > 0 && filled + bytes > bucket_bytes)) {
      buckets_.emplace_back();
      filled = 0;
    }
    auto& b = buckets_.back();
    bucket_of_[k] = buckets_.size() - 1;
    b.offsets.push_back(b.params.empty() ? 0 : b.offsets.back() + params_[b.params.back()].numel());
    b.params.push_back(k);
    filled += bytes;
  }
  for (auto& b : buckets_)
    b.flat = torch::empty({b.offsets.back() + params_[b.params.back()].numel()}, params_[0].options());
  if (!overlap) return;
  for (size_t k = 0; k < params_.size(); ++k) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[k]);
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_ready(k);
          return outputs;
        })));
    accumulators_.push_back(std::move(acc));
  }
}

GradientSync::~GradientSync() {
  for (size_t k = 0; k < accumulators_.size(); ++k) accumulators_[k]->del_post_hook(hook_keys_[k]);
}

void GradientSync::arm() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& b : buckets_) b.pending = int64_t(b.params.size());
  next_launch_ = 0;
  armed_ = true;
}

void GradientSync::on_ready(size_t param) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;
  --buckets_[bucket_of_[param]].pending;
  launch_ready_prefix();
}

void GradientSync::launch_ready_prefix() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(buckets_[next_launch_++]);
}

void GradientSync::launch(Bucket& b) {
  torch::NoGradGuard no_grad;
  b.had_grad.assign(b.params.size(), false);
  for (size_t j = 0; j < b.params.size(); ++j) {
    const auto& p = params_[b.params[j]];
    auto slice = b.flat.narrow(0, b.offsets[j], p.numel());
    b.had_grad[j] = p.grad().defined();
    if (b.had_grad[j])
      slice.copy_(p.grad().reshape(-1));
    else
      slice.zero_();
  }
  b.work = comm_.allreduce_sum_async(b.flat);
}

double GradientSync::finish() {
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = false;
    while (next_launch_ < buckets_.size()) launch(buckets_[next_launch_++]);
  }
  torch::NoGradGuard no_grad;
  for (auto& b : buckets_) {
    b.work->wait();
    b.work.reset();
    for (size_t j = 0; j < b.params.size(); ++j) {
      if (!b.had_grad[j]) continue;
      auto& g = params_[b.params[j]].mutable_grad();
      g.copy_(b.flat.narrow(0, b.offsets[j], g.numel()).view_as(g));
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace fbt
