// `fbt eval-probe`: per-layer linear-probe accuracy on a synthetic task, standard vs one-step
// recurrent prefill (SPEC §8, paper §4.4 and App. F).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fbt/data/synth.h"
#include "fbt/data/tokenizer.h"
#include "fbt/eval/linear_probe.h"
#include "fbt/model/model.h"

namespace fbt {

/// Probe accuracy of one prefill mode at one layer.
struct ProbeLayerResult {
  std::string mode;   ///< "standard" or "recurrent"
  int64_t layer = 0;  ///< 0 = stack input (embedding after the input norm), l = after block l
  ProbeScore score;
};

/// Encodes each example's text with `tokenizer` (no BOS, as `fbt eval`), records the residual
/// stream at its last token (the final colon) for layers 0..L under standard and one-step
/// recurrent prefill (probe_states, one example per forward), and cross-validates a probe per
/// mode and layer (cross_validate_probe with the examples' groups; labels indexed in
/// synth_labels). Returns standard layers 0..L, then recurrent layers 0..L. `on_progress(done,
/// total)` is called after each example if set. Throws fbt::Error, before any forward pass, for
/// bad options (ProbeOptions::validate) and fewer distinct groups than folds; naming `origin` and
/// the record when examples mix tasks, a text is empty or longer than the model context; and as
/// cross_validate_probe.
std::vector<ProbeLayerResult> evaluate_probe(FBT& model, const Tokenizer& tokenizer,
                                             const std::vector<SynthExample>& examples, const std::string& origin,
                                             const ProbeOptions& options,
                                             const std::function<void(int64_t, int64_t)>& on_progress = {});

}  // namespace fbt
