// The two decoding backends: CpuDecoder and libtorch's generic steps (see decode_backend.h).
#include "fbt/infer/decode_backend.h"

#include <array>

#include "fbt/infer/decode.h"
#include "fbt/infer/graph_decoder.h"
#include "fbt/model/passes.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

class CpuBackend : public DecodeBackend {
 public:
  explicit CpuBackend(std::shared_ptr<CpuDecoder> decoder) : decoder_(std::move(decoder)) {}
  torch::Tensor step(const torch::Tensor& tokens, DecodeMode mode, KVCache& cache) override {
    return decoder_->step(tokens, mode, cache);
  }
  torch::Tensor step(const torch::Tensor& tokens, const std::vector<DecodeMode>& modes,
                     const std::vector<KVCache*>& caches) override {
    return decoder_->step(tokens, modes, caches);
  }
  torch::Tensor prefill_pass(const torch::Tensor& tokens, const torch::Tensor& valid, KVCache& cache,
                             const CpuDecoder::PassFeedback* feedback, torch::Tensor* states,
                             PassLogits logits) override {
    return decoder_->prefill_pass(tokens, valid, cache, feedback, states, logits);
  }
  KVCache new_cache(int64_t batch, int64_t capacity) override {
    return KVCache(decoder_->model()->config(), batch, capacity, torch::kFloat);
  }
  FBT& model() override { return decoder_->model(); }
  CpuDecoder* cpu() override { return decoder_.get(); }

 private:
  std::shared_ptr<CpuDecoder> decoder_;
};

class TorchBackend : public DecodeBackend {
 public:
  explicit TorchBackend(FBT model) : model_(std::move(model)) {}
  torch::Tensor step(const torch::Tensor& tokens, DecodeMode mode, KVCache& cache) override {
    return decode_step(model_, tokens.to(model_->parameters().front().device()), mode, cache);
  }
  torch::Tensor step(const torch::Tensor& tokens, const std::vector<DecodeMode>& modes,
                     const std::vector<KVCache*>& caches) override {
    const auto device = model_->parameters().front().device();
    const auto ids = tokens.to(torch::kCPU, torch::kLong).contiguous();
    std::vector<torch::Tensor> each;
    for (size_t b = 0; b < caches.size(); ++b)
      each.push_back(decode_step(model_, ids.narrow(0, int64_t(b), 1).to(device), modes[b], *caches[b]));
    return torch::cat(each, 0);
  }
  torch::Tensor prefill_pass(const torch::Tensor& tokens_in, const torch::Tensor& valid_in, KVCache& cache,
                             const CpuDecoder::PassFeedback* feedback, torch::Tensor* states,
                             PassLogits logits) override {
    const auto device = model_->parameters().front().device();
    const auto tokens = tokens_in.to(device), valid = valid_in.to(device, torch::kBool);
    const int64_t B = tokens.size(0), T = tokens.size(1);
    auto layout = Layout::left_padded(valid);
    const auto start = cache.length == 0 ? torch::zeros({B}, tokens.options()) : cache.next_pos().clone();  // [B]
    layout.positions += start.view({B, 1});
    auto e_n = model_->plain_input(model_->embed(tokens));  // [B,T,D]
    if (feedback)
      e_n = model_->feedback_input(feedback->h_before.to(e_n.device(), e_n.scalar_type()), e_n,
                                   feedback->plain.to(device, torch::kBool).unsqueeze(-1));
    const auto x = model_->stack(e_n, layout, &cache);  // [B,T,D]
    const auto state = model_->feedback_state(x);
    if (states) *states = state;
    cache.advance(state.select(1, T - 1), tokens.select(1, T - 1), start + valid.sum(1));
    if (logits == PassLogits::All) return model_->head(x);                                    // [B,T,V]
    if (logits == PassLogits::Last) return model_->head(x.narrow(1, T - 1, 1)).select(1, 0);  // [B,V]
    return {};
  }
  KVCache new_cache(int64_t batch, int64_t capacity) override {
    return KVCache(model_->config(), batch, capacity, model_->parameters().front().options());
  }
  FBT& model() override { return model_; }

 private:
  FBT model_;
};

/// The generic backend whose single-cache decode steps run through a GraphDecoder bound to that
/// cache and mode (made at the cache's first step in that mode; a cache whose storage changed, a new
/// cache at a dead one's address, gets a new one). The batched step of the engine stays the generic
/// one: its per-sequence caches would each need their own captured graph.
class GraphBackend : public TorchBackend {
 public:
  GraphBackend(FBT model, bool use_graph) : TorchBackend(std::move(model)), use_graph_(use_graph) {}
  using TorchBackend::step;
  torch::Tensor step(const torch::Tensor& tokens, DecodeMode mode, KVCache& cache) override {
    auto& bound = decoders_[static_cast<size_t>(mode)];
    const void* storage = cache.k.front().data_ptr();
    if (!bound.decoder || bound.cache != &cache || bound.storage != storage) {
      bound.decoder.reset();  // before the new one: a captured graph holds device memory
      bound.decoder = std::make_unique<GraphDecoder>(model(), mode, cache, use_graph_);
      bound.cache = &cache;
      bound.storage = storage;
    }
    return bound.decoder->step(tokens.to(cache.slot_pos.device()));
  }

 private:
  struct Bound {
    std::unique_ptr<GraphDecoder> decoder;
    const KVCache* cache = nullptr;
    const void* storage = nullptr;  ///< the cache's first key tensor when bound
  };
  bool use_graph_;
  std::array<Bound, 3> decoders_;  ///< per DecodeMode
};

}  // namespace

torch::Tensor DecodeBackend::prefill(const torch::Tensor& tokens, const torch::Tensor& valid, const Decoding& decoding,
                                     KVCache& cache, PassLogits logits) {
  if (const auto p = decoding.problem(); !p.empty()) throw Error("prefill: fused_passes " + p);
  const int64_t passes = decoding.prefill_passes();
  if (passes == 1) return prefill_pass(tokens, valid, cache, nullptr, nullptr, logits);
  if (cache.length != 0)
    throw Error("prefill: Fused prefill rebuilds the KV cache from position 0; the cache holds " +
                std::to_string(cache.length) + " slots");
  if (tokens.dim() != 2 || valid.sizes() != tokens.sizes() || tokens.numel() == 0)
    throw Error("prefill: tokens and valid must both be [B, T] with B, T >= 1");
  KVCache scratch = new_cache(tokens.size(0), tokens.size(1));         // the passes before the last
  const auto plain = prefill_plain_positions(model(), tokens, valid);  // [B,T]
  torch::Tensor out;
  run_passes(passes, [&](int64_t k, const torch::Tensor& before) {
    const CpuDecoder::PassFeedback feedback{before, plain};
    const bool last = k == passes;
    if (k > 1 && !last) scratch.clear();
    torch::Tensor states;  // [B,T,D]
    out = prefill_pass(tokens, valid, last ? cache : scratch, k > 1 ? &feedback : nullptr, last ? nullptr : &states,
                       last ? logits : PassLogits::None);
    return states;
  });
  return out;
}

std::shared_ptr<DecodeBackend> cpu_backend(std::shared_ptr<CpuDecoder> decoder) {
  return std::make_shared<CpuBackend>(std::move(decoder));
}

std::shared_ptr<DecodeBackend> torch_backend(FBT model) { return std::make_shared<TorchBackend>(std::move(model)); }

std::shared_ptr<DecodeBackend> graph_backend(FBT model, bool use_graph) {
  return std::make_shared<GraphBackend>(std::move(model), use_graph);
}

std::shared_ptr<DecodeBackend> make_decode_backend(FBT& model, const CpuDecoderOptions& options) {
  if (CpuDecoder::supports(model) || options.weights != DecodeWeights::Fp32)
    return cpu_backend(std::make_shared<CpuDecoder>(model, options));
  return torch_backend(model);
}

}  // namespace fbt
