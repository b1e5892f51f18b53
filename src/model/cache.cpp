// KVCache and Layout: slot bookkeeping for cached decoding with left-padded batches.
#include "fbt/model/cache.h"

#include <algorithm>
#include <cstring>

#include "fbt/util/error.h"

namespace fbt {

Layout Layout::contiguous(int64_t T, const torch::Device& device) {
  return {torch::arange(T, torch::dtype(torch::kLong).device(device)).unsqueeze(0), {}};
}

Layout Layout::left_padded(const torch::Tensor& valid) {
  // Real tokens count 0,1,2,... from the first real one; pads get position 0 (never attended).
  auto positions = (valid.to(torch::kLong).cumsum(1) - 1).clamp_min(0);  // [B,T]
  return {positions, valid};
}

KVCache::KVCache(const ModelConfig& config, int64_t batch, int64_t capacity, const torch::TensorOptions& options) {
  const auto dev = options.device();
  for (int64_t l = 0; l < config.n_layers; ++l) {
    k.push_back(torch::zeros({batch, config.n_kv_heads, capacity, config.head_dim()}, options));
    v.push_back(torch::zeros_like(k.back()));
  }
  slot_pos = torch::zeros({batch, capacity}, torch::dtype(torch::kLong).device(dev));
  slot_valid = torch::zeros({batch, capacity}, torch::dtype(torch::kBool).device(dev));
  h_prev_ = torch::zeros({batch, config.d_model}, options);
  last_token_ = torch::full({batch}, -1, torch::dtype(torch::kLong).device(dev));
  next_pos_ = torch::zeros({batch}, torch::dtype(torch::kLong).device(dev));
}

void KVCache::check_room(int64_t T) const {
  if (length + T > capacity())
    throw Error("KV cache full: " + std::to_string(length) + " + " + std::to_string(T) +
                " tokens exceed its capacity of " + std::to_string(capacity()) +
                " (prompt plus new tokens longer than the model context?)");
}

int64_t KVCache::reserve(const Layout& layout) {
  const int64_t T = layout.positions.size(1);
  if (write_slot.defined()) {
    if (T != 1 || layout.valid.defined())
      throw Error("fixed-shape KV cache: one real token per row and step (got " + std::to_string(T) + ")");
    slot_pos.index_copy_(1, write_slot, layout.positions.expand({batch(), 1}));
    slot_valid.index_fill_(1, write_slot, true);
    return -1;
  }
  check_room(T);
  const int64_t first = length;
  const auto& positions = layout.positions;
  if (slot_pos.is_cpu() && positions.is_cpu() && positions.scalar_type() == torch::kLong && positions.is_contiguous() &&
      (positions.size(0) == 1 || positions.size(0) == batch()) && !layout.valid.defined()) {
    // A CPU decode step's few values in plain loops: each ATen op would cost more in dispatch.
    const int64_t* from = positions.data_ptr<int64_t>();
    const int64_t row_stride = positions.size(0) == 1 ? 0 : T;
    int64_t* pos = slot_pos.data_ptr<int64_t>() + first;
    bool* valid = slot_valid.data_ptr<bool>() + first;
    for (int64_t b = 0; b < batch(); ++b) {
      std::copy_n(from + b * row_stride, T, pos + b * capacity());
      std::fill_n(valid + b * capacity(), T, true);
    }
  } else {
    slot_pos.narrow(1, first, T).copy_(positions.expand({batch(), T}));
    if (layout.valid.defined())
      slot_valid.narrow(1, first, T).copy_(layout.valid);
    else
      slot_valid.narrow(1, first, T).fill_(true);
  }
  length += T;
  return first;
}

void KVCache::clear() {
  length = 0;
  slot_valid.fill_(false);
}

void KVCache::check_carried(const torch::Tensor& h, const torch::Tensor& tokens) const {
  if (h.sizes() != h_prev_.sizes() || tokens.numel() != batch())
    throw Error("KV cache of batch " + std::to_string(batch()) + ": the carried state must be [" +
                std::to_string(batch()) + ", " + std::to_string(h_prev_.size(1)) + "] with one token per row (got " +
                c10::str(h.sizes()) + " and " + std::to_string(tokens.numel()) + " tokens)");
}

void KVCache::advance(const torch::Tensor& h, const torch::Tensor& tokens, const torch::Tensor& next) {
  check_carried(h, tokens);
  if (next.numel() != batch())
    throw Error("KV cache: " + std::to_string(next.numel()) + " next positions for " + std::to_string(batch()) +
                " rows");
  h_prev_.copy_(h);
  last_token_.copy_(tokens.reshape({-1}));
  next_pos_.copy_(next.reshape({-1}));
}

void KVCache::advance_step(const torch::Tensor& h, const torch::Tensor& tokens) {
  check_carried(h, tokens);
  if (h_prev_.is_cpu() && h.is_cpu() && h.scalar_type() == h_prev_.scalar_type() && h.is_contiguous() &&
      tokens.is_cpu() && tokens.scalar_type() == torch::kLong && tokens.is_contiguous()) {
    // As reserve: plain copies for a CPU cache (the tensors keep their addresses either way).
    std::memmove(h_prev_.data_ptr(), h.data_ptr(), h.nbytes());
    std::copy_n(tokens.data_ptr<int64_t>(), batch(), last_token_.data_ptr<int64_t>());
    int64_t* next = next_pos_.data_ptr<int64_t>();
    for (int64_t b = 0; b < batch(); ++b) ++next[b];
    return;
  }
  h_prev_.copy_(h);
  last_token_.copy_(tokens.reshape({-1}));
  next_pos_.add_(1);
}

KVCache KVCache::clone() const {
  KVCache c = *this;
  for (auto& t : c.k) t = t.clone();
  for (auto& t : c.v) t = t.clone();
  for (auto* t : {&c.slot_pos, &c.slot_valid, &c.h_prev_, &c.last_token_, &c.next_pos_}) *t = t->clone();
  if (c.write_slot.defined()) c.write_slot = c.write_slot.clone();
  return c;
}

}  // namespace fbt
