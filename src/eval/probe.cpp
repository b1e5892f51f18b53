// Per-layer probe accuracy on synthetic state tracking: standard vs one-step recurrent prefill.
#include "fbt/eval/probe.h"

#include <algorithm>
#include <set>

#include <torch/torch.h>

#include "fbt/eval/probe_states.h"
#include "fbt/util/error.h"

namespace fbt {

std::vector<ProbeLayerResult> evaluate_probe(FBT& model, const Tokenizer& tokenizer,
                                             const std::vector<SynthExample>& examples, const std::string& origin,
                                             const ProbeOptions& options,
                                             const std::function<void(int64_t, int64_t)>& on_progress) {
  options.validate();
  if (examples.empty()) throw Error(origin + ": no examples");
  const std::string task = examples[0].task;
  const auto& labels = synth_labels(task);
  const auto device = model->parameters()[0].device();
  const int64_t N = examples.size();
  // Every record and the fold count are checked before the first forward pass.
  std::vector<std::vector<int64_t>> ids(N);
  std::vector<int64_t> y;
  std::vector<std::string> groups;
  for (int64_t i = 0; i < N; ++i) {
    const auto& e = examples[i];
    const std::string where = origin + ": record " + std::to_string(i + 1);
    if (e.task != task) throw Error(where + ": task " + e.task + " after " + task + " (one task per file)");
    ids[i] = tokenizer.encode(e.text);
    if (ids[i].empty()) throw Error(where + ": empty text");
    if (static_cast<int64_t>(ids[i].size()) > model->config().context)
      throw Error(where + ": " + std::to_string(ids[i].size()) + " tokens exceed the model context " +
                  std::to_string(model->config().context) + " (generate with fewer --distractors)");
    y.push_back(std::find(labels.begin(), labels.end(), e.label) - labels.begin());
    groups.push_back(e.group);
  }
  const auto distinct = std::set<std::string>(groups.begin(), groups.end()).size();
  if (static_cast<int64_t>(distinct) < options.folds)
    throw Error(origin + ": " + std::to_string(distinct) + " distinct groups cannot fill --folds " +
                std::to_string(options.folds) + " without splitting a group");
  std::vector<torch::Tensor> standard, recurrent;  // per example [L+1,D]
  for (int64_t i = 0; i < N; ++i) {
    const auto states = probe_states(model, torch::tensor(ids[i], torch::kLong).unsqueeze(0).to(device));
    standard.push_back(states.standard.select(1, 0).select(1, -1).to(torch::kCPU));    // [L+1,D]
    recurrent.push_back(states.recurrent.select(1, 0).select(1, -1).to(torch::kCPU));  // [L+1,D]
    if (on_progress) on_progress(i + 1, N);
  }
  const auto labels_t = torch::tensor(y, torch::kLong);
  std::vector<ProbeLayerResult> out;
  for (const auto& [mode, rows] : {std::pair{"standard", &standard}, std::pair{"recurrent", &recurrent}}) {
    const auto features = torch::stack(*rows, 1);  // [L+1,N,D]
    for (int64_t l = 0; l < features.size(0); ++l)
      out.push_back({mode, l, cross_validate_probe(features[l], labels_t, labels.size(), groups, options)});
  }
  return out;
}

}  // namespace fbt
