// The decoding rows of `fbt eval-loss`: sequential soft recurrence and teacher-forced decoding.
#include "fbt/eval/loss.h"

#include "fbt/infer/decode.h"
#include "fbt/model/cache.h"

namespace fbt {
namespace {

/// Logits [B,T,V] of teacher-forced decoding of inputs [B,T] (CPU) through `decoder` from an
/// empty cache: position 0 plain, then `mode` (the separator's rule applies inside the step).
torch::Tensor decoded_logits(FBT& model, CpuDecoder& decoder, const torch::Tensor& inputs, DecodeMode mode) {
  const int64_t B = inputs.size(0), T = inputs.size(1);
  KVCache cache(model->config(), B, T, torch::dtype(torch::kFloat));
  std::vector<torch::Tensor> logits;
  for (int64_t t = 0; t < T; ++t)
    logits.push_back(decoder.step(inputs.select(1, t).contiguous(), t == 0 ? DecodeMode::Standard : mode, cache));
  return torch::stack(logits, 1);
}

}  // namespace

LossRow sequential_row(FBT& model) {
  return {"sequential", [&model](const torch::Tensor& inputs) { return sequential_logits(model, inputs); }};
}

std::vector<LossRow> decode_rows(FBT& model, std::shared_ptr<CpuDecoder> decoder) {
  std::vector<LossRow> rows;
  for (const auto& [name, mode] :
       {std::pair{"decode standard", DecodeMode::Standard}, {"decode soft", DecodeMode::Soft}})
    rows.push_back({name, [&model, decoder, mode = mode](const torch::Tensor& inputs) {
                      return decoded_logits(model, *decoder, inputs.cpu(), mode).to(inputs.device());
                    }});
  return rows;
}

}  // namespace fbt
