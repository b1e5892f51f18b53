// DecodeBackend::prefill on a CpuDecoder a test owns (the CPU decoder's prefill is the backend's).
#pragma once
#include <memory>

#include <torch/types.h>

#include "fbt/infer/decode_backend.h"

namespace fbt::testing {

/// DecodeBackend::prefill of cpu_backend(decoder) with Decoding{Standard or Fused, fused_passes}
/// (a negative count reaches prefill's own check); tokens [B,T], valid [B,T]; returns [B,V].
inline torch::Tensor cpu_prefill(CpuDecoder& decoder, const torch::Tensor& tokens, const torch::Tensor& valid,
                                 KVCache& cache, int64_t fused_passes = 0) {
  const auto backend = cpu_backend(std::shared_ptr<CpuDecoder>(&decoder, [](CpuDecoder*) {}));  // not owned
  const Decoding decoding{fused_passes == 0 ? DecodeMode::Standard : DecodeMode::Fused, fused_passes};
  return backend->prefill(tokens, valid, decoding, cache);
}

}  // namespace fbt::testing
