// Mixed precision for training: a scope with bf16 autocast (SPEC §6: bf16 matmuls, fp32 master
// weights and loss).
#pragma once
#include <torch/types.h>

#include "fbt/util/json_fields.h"

namespace fbt {

/// Matmul precision: auto = bf16 autocast on CUDA, fp32 on the CPU; fp32; bf16 = autocast on any
/// device. Master weights, optimiser state and the loss stay fp32 in every case.
enum class Precision { Auto, FP32, BF16 };
template <>
const EnumNames<Precision>& enum_names<Precision>();

/// True if `precision` means bf16 autocast on `device`: Auto on CUDA, BF16 anywhere, never FP32.
bool uses_bf16_autocast(Precision precision, const torch::Device& device);

/// For its lifetime, runs eligible ops (matmuls, linear layers) on `device` in bfloat16 under
/// libtorch's autocast when uses_bf16_autocast(precision, device); parameters stay fp32 and
/// fp32-listed ops (log_softmax, cross-entropy, logsumexp) stay fp32. Restores the previous
/// autocast state and dtype, and clears autocast's weight-cast cache, on exit. Works with
/// libtorch 1.13's per-backend calls and the per-device-type calls of 2.4+.
class AutocastScope {
 public:
  AutocastScope(Precision precision, const torch::Device& device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false, was_enabled_ = false;
  torch::DeviceType type_;
  at::ScalarType old_dtype_;
};

}  // namespace fbt
