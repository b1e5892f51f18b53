// The code that runs a model's decoding steps, chosen once: the dedicated CPU step (CpuDecoder) or
// libtorch's generic prefill / decode_step (decode.h). generate and the serving engine call only
// this interface, so neither carries the choice at every call.
#pragma once
#include <memory>
#include <vector>

#include <torch/types.h>

#include "fbt/infer/cpu_decoder.h"
#include "fbt/infer/decoding.h"
#include "fbt/model/cache.h"
#include "fbt/model/model.h"

namespace fbt {

/// Prefill and decode steps of one model (SPEC §7). Every call computes what decode.h's prefill /
/// decode_step define; the CPU backend with its own kernels (cpu_decoder.h: the same numbers up to
/// fp32 rounding, or quantised weights).
class DecodeBackend {
 public:
  virtual ~DecodeBackend() = default;
  /// prefill(model, tokens, valid, decoding, cache) (decode.h): tokens [B,T] left-padded where
  /// valid [B,T] is false, into `cache`, as prefill passes through run_passes (the plain pass, and
  /// for Fused(k) k fused passes, the earlier ones on a scratch cache; a Fused prefill needs an
  /// empty `cache`). Returns the logits `logits` asks for: the next-token logits [B,V] by default,
  /// every position's [B,T,V] for teacher-forced scoring. Throws fbt::Error for an invalid
  /// `decoding` (Decoding::problem), a Fused prefill into a cache that holds slots, or as prefill_pass.
  torch::Tensor prefill(const torch::Tensor& tokens, const torch::Tensor& valid, const Decoding& decoding,
                        KVCache& cache, PassLogits logits = PassLogits::Last);
  /// decode_step(model, tokens, mode, cache) (decode.h): tokens [B]; returns logits [B,V].
  virtual torch::Tensor step(const torch::Tensor& tokens, DecodeMode mode, KVCache& cache) = 0;
  /// One step for B sequences that each own a cache of batch 1 (continuous batching): tokens [B],
  /// modes[b] and caches[b] of row b; returns logits [B,V].
  virtual torch::Tensor step(const torch::Tensor& tokens, const std::vector<DecodeMode>& modes,
                             const std::vector<KVCache*>& caches) = 0;
  /// One prefill pass, continuing `cache` (CpuDecoder::prefill_pass's definition, which prefill and
  /// PromptPrefill's chunked passes use): tokens [B,T] left-padded where valid [B,T] is false,
  /// positions counted on from cache.next_pos() (0 in an empty cache), each position's input fused
  /// as `feedback` says (nullptr: all plain); sets the carried state; fills `states` [B,T,D] with
  /// every position's feedback state where given; returns the logits `logits` asks for.
  virtual torch::Tensor prefill_pass(const torch::Tensor& tokens, const torch::Tensor& valid, KVCache& cache,
                                     const CpuDecoder::PassFeedback* feedback, torch::Tensor* states,
                                     PassLogits logits) = 0;
  /// A new empty cache for this backend: batch B, `capacity` slots (the device and dtype its steps use).
  virtual KVCache new_cache(int64_t batch, int64_t capacity) = 0;
  /// The model this backend decodes (its config, plain positions).
  virtual FBT& model() = 0;
  /// The CpuDecoder behind this backend, or nullptr for the generic one.
  virtual CpuDecoder* cpu() { return nullptr; }
};

/// The backend running `decoder` (shared: its weights may be a quantised run's).
std::shared_ptr<DecodeBackend> cpu_backend(std::shared_ptr<CpuDecoder> decoder);

/// libtorch's generic prefill and decode_step on `model` (any device and dtype); the batched step
/// runs its sequences one at a time (the generic step is not batch-invariant across cache lengths).
std::shared_ptr<DecodeBackend> torch_backend(FBT model);

/// The generic backend with its single-cache decode steps replayed from CUDA graphs (GraphDecoder,
/// paper App. D; `use_graph` false: the same fixed-shape step run eagerly, on any device, which the
/// CPU tests compare). A step's logits are the decoder's static buffer, overwritten by the next
/// step on that cache and mode. The continuous-batching step is the generic one. Throws fbt::Error
/// at the first step when `use_graph` is set and the cache is not on CUDA (GraphDecoder).
std::shared_ptr<DecodeBackend> graph_backend(FBT model, bool use_graph);

/// A CpuDecoder with `options` where CpuDecoder::supports(model) or the options ask for int8 /
/// int4 weights (whose constructor throws fbt::Error naming --weights where the model does not
/// allow them), else the generic backend.
std::shared_ptr<DecodeBackend> make_decode_backend(FBT& model, const CpuDecoderOptions& options = {});

}  // namespace fbt
