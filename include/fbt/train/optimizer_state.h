// Optimiser state <-> named tensors, so resumes restore it bit for bit (safetensors files).
#pragma once
#include <torch/optim/adamw.h>

#include "fbt/io/safetensors.h"
#include "fbt/model/model.h"

namespace fbt {

/// AdamW state per parameter, named "<param>.exp_avg", "<param>.exp_avg_sq", "<param>.step"
/// (int64 scalar). Parameters without state (no step taken yet) are omitted.
NamedTensors adamw_state(torch::optim::AdamW& optimizer, FBT& model);

/// Restores what adamw_state saved into a freshly built optimiser over the same model.
/// Throws fbt::Error naming `path` if a tensor is missing or has the wrong shape.
void load_adamw_state(torch::optim::AdamW& optimizer, FBT& model, const NamedTensors& tensors, const std::string& path);

}  // namespace fbt
