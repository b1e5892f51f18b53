// KVCache and Layout: slot bookkeeping for cached decoding with left-padded batches.
#include "fbt/model/cache.h"

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

KVCache::KVCache(const ModelConfig& config, int64_t batch, int64_t capacity,
                 const torch::TensorOptions& options) {
  const auto dev = options.device();
  for (int64_t l = 0; l < config.n_layers; ++l) {
    k.push_back(torch::zeros({batch, config.n_kv_heads, capacity, config.head_dim()}, options));
    v.push_back(torch::zeros_like(k.back()));
  }
  slot_pos = torch::zeros({batch, capacity}, torch::dtype(torch::kLong).device(dev));
  slot_valid = torch::zeros({batch, capacity}, torch::dtype(torch::kBool).device(dev));
  h_prev = torch::zeros({batch, config.d_model}, options);
  last_token = torch::full({batch}, -1, torch::dtype(torch::kLong).device(dev));
  next_pos = torch::zeros({batch}, torch::dtype(torch::kLong).device(dev));
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
  slot_pos.narrow(1, first, T).copy_(layout.positions.expand({batch(), T}));
  if (layout.valid.defined())
    slot_valid.narrow(1, first, T).copy_(layout.valid);
  else
    slot_valid.narrow(1, first, T).fill_(true);
  length += T;
  return first;
}

void KVCache::clear() {
  length = 0;
  slot_valid.fill_(false);
}

}  // namespace fbt
