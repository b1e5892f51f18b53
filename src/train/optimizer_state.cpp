// AdamW state as named tensors; keys of Optimizer::state() differ between libtorch 1.13 and 2.x.
#include "fbt/train/optimizer_state.h"

#include <map>
#include <sstream>
#include <type_traits>

#include "fbt/util/error.h"

namespace fbt {
namespace {

/// The optimiser's state-map key of parameter p: in 1.13 the TensorImpl address as text
/// (c10::guts::to_string, which streams the pointer; gone in 2.x), in 2.x the address itself.
template <class Map>
typename Map::key_type state_key(const torch::Tensor& p) {
  if constexpr (std::is_same_v<typename Map::key_type, std::string>) {
    std::ostringstream key;
    key << static_cast<const void*>(p.unsafeGetTensorImpl());
    return key.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

}  // namespace

NamedTensors adamw_state(torch::optim::AdamW& optimizer, FBT& model) {
  using Map = std::decay_t<decltype(optimizer.state())>;
  NamedTensors out;
  for (const auto& p : model->named_parameters()) {
    auto it = optimizer.state().find(state_key<Map>(p.value()));
    if (it == optimizer.state().end()) continue;
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    out.emplace_back(p.key() + ".exp_avg", s.exp_avg());
    out.emplace_back(p.key() + ".exp_avg_sq", s.exp_avg_sq());
    out.emplace_back(p.key() + ".step", torch::tensor(s.step(), torch::kLong));
  }
  return out;
}

void load_adamw_state(torch::optim::AdamW& optimizer, FBT& model, const NamedTensors& tensors,
                      const std::string& path) {
  using Map = std::decay_t<decltype(optimizer.state())>;
  std::map<std::string, torch::Tensor> byname(tensors.begin(), tensors.end());
  for (const auto& p : model->named_parameters()) {
    if (!byname.count(p.key() + ".step")) continue;  // no step taken for this parameter
    auto get = [&](const std::string& suffix) {
      auto it = byname.find(p.key() + suffix);
      if (it == byname.end()) throw Error(path + ": missing optimiser tensor '" + p.key() + suffix + "'");
      if (suffix != ".step" && it->second.sizes() != p.value().sizes())
        throw Error(path + ": optimiser tensor '" + p.key() + suffix + "' has the wrong shape");
      return it->second.to(p.value().device());
    };
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(get(".step").item<int64_t>());
    s->exp_avg(get(".exp_avg"));
    s->exp_avg_sq(get(".exp_avg_sq"));
    optimizer.state()[state_key<Map>(p.value())] = std::move(s);
  }
}

}  // namespace fbt
