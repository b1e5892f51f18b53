// The decoding rows of `fbt eval-loss` (train/held_out_loss.h scores them beside the passes): the
// exact sequential soft recurrence and teacher-forced decoding through the CPU decode step.
#pragma once
#include <memory>
#include <vector>

#include "fbt/infer/cpu_decoder.h"
#include "fbt/model/model.h"
#include "fbt/train/held_out_loss.h"

namespace fbt {

/// Row "sequential": sequential_logits (infer/decode.h), the exact soft recurrence, T cached steps
/// per window (SPEC §4). `model` must outlive the row.
LossRow sequential_row(FBT& model);

/// Rows "decode standard" and "decode soft": each window's tokens fed one step at a time to
/// `decoder` from an empty cache, the first step plain, then Standard or Soft (the separator's
/// rule applies inside the step). In fp32 they equal passes=0 and "sequential" up to rounding, so
/// with int8 weights their change is the quantisation's cost. `model` must outlive the rows.
std::vector<LossRow> decode_rows(FBT& model, std::shared_ptr<CpuDecoder> decoder);

}  // namespace fbt
