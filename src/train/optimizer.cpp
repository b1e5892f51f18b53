// Parameter groups and the run's optimiser (NorMuon + Adam, or AdamW), SPEC §6.
#include "fbt/train/optimizer.h"

#include <iomanip>
#include <sstream>

#include "fbt/train/optimizer_state.h"
#include "fbt/util/error.h"

namespace fbt {

std::vector<ParamGroup> group_parameters(FBT& model, const TrainConfig& c) {
  std::vector<ParamGroup> groups;
  if (c.optimizer == OptimizerKind::NorMuon) {
    groups.push_back({"normuon",
                      "2-D hidden weights: attention q/k/v/o and head gates, MLP, fusion W_U/W_G",
                      {},
                      c.normuon_lr,
                      c.normuon_weight_decay});
    groups.push_back({"adam", "embedding, LM head, RMSNorm gains and biases", {}, c.lr, 0.0});
    for (const auto& p : model->named_parameters()) {
      const bool vocab = p.key() == "embedding.weight" || p.key() == "lm_head.weight";  // [V,D]
      groups[p.value().dim() == 2 && !vocab ? 0 : 1].params.emplace_back(p.key(), p.value());
    }
  } else {
    groups.push_back(
        {"adamw_decay", "every parameter with >= 2 dims (incl. tied embedding/head)", {}, c.lr, c.weight_decay});
    groups.push_back({"adamw_no_decay", "1-D parameters (RMSNorm gains)", {}, c.lr, 0.0});
    for (const auto& p : model->named_parameters())
      groups[p.value().dim() >= 2 ? 0 : 1].params.emplace_back(p.key(), p.value());
  }
  if (c.fusion_lr > 0) {  // the fusion and the input norm leave the groups above for their own
    ParamGroup fusion{"fusion", "fusion W_U/W_G and the input-norm gain (train.fusion_lr)", {}, c.fusion_lr, 0.0};
    for (auto& g : groups) {
      auto& ps = g.params;
      for (auto it = ps.begin(); it != ps.end();) {
        const bool own = it->first.rfind("fusion.", 0) == 0 || it->first == "input_norm.weight";
        if (!own)
          ++it;
        else {
          fusion.params.push_back(std::move(*it));
          it = ps.erase(it);
        }
      }
    }
    groups.push_back(std::move(fusion));
  }
  std::vector<ParamGroup> nonempty;
  for (auto& g : groups)
    if (!g.params.empty()) nonempty.push_back(std::move(g));
  return nonempty;
}

TrainingOptimizer::TrainingOptimizer(FBT& model, const TrainConfig& c)
    : model_(model), groups_(group_parameters(model, c)) {
  std::vector<torch::optim::OptimizerParamGroup> adam_groups;
  for (const auto& g : groups_) {
    if (g.name == "normuon") {
      NorMuonOptions o;
      o.lr = g.lr;
      o.weight_decay = g.weight_decay;
      o.momentum = c.normuon_momentum;
      o.beta2 = c.normuon_beta2;
      o.ns_steps = c.ns_steps;
      normuon_ = std::make_unique<NorMuon>(g.params, o);
      continue;
    }
    std::vector<torch::Tensor> tensors;
    for (const auto& [name, p] : g.params) tensors.push_back(p);
    auto o = torch::optim::AdamWOptions(g.lr).betas({c.beta1, c.beta2}).eps(c.adam_eps).weight_decay(g.weight_decay);
    adam_groups.emplace_back(tensors, std::make_unique<torch::optim::AdamWOptions>(o));
  }
  if (!adam_groups.empty()) adam_ = std::make_unique<torch::optim::AdamW>(std::move(adam_groups));
}

void TrainingOptimizer::step(double lr_factor, double wd_factor) {
  size_t adam_index = 0;
  for (const auto& g : groups_) {
    if (g.name == "normuon") {
      normuon_->options().lr = g.lr * lr_factor;
      normuon_->options().weight_decay = g.weight_decay * wd_factor;
    } else {
      auto& o = static_cast<torch::optim::AdamWOptions&>(adam_->param_groups()[adam_index++].options());
      o.lr(g.lr * lr_factor);
      o.weight_decay(g.weight_decay * wd_factor);
    }
  }
  if (normuon_) normuon_->step();
  if (adam_) adam_->step();
}

void TrainingOptimizer::set_orthogonalizer(NorMuon::Orthogonalizer orthogonalize) {
  if (normuon_) normuon_->set_orthogonalizer(std::move(orthogonalize));
}

std::string TrainingOptimizer::describe() const {
  std::ostringstream s;
  s << "optimiser groups:\n";
  for (const auto& g : groups_) {
    int64_t count = 0;
    std::map<std::string, int64_t> shapes;  // "[m, n]" -> tensors of that shape
    for (const auto& [name, p] : g.params) {
      count += p.numel();
      std::ostringstream shape;
      shape << p.sizes();
      ++shapes[shape.str()];
    }
    s << "  " << std::left << std::setw(15) << g.name << std::right << std::setw(12) << count << " params in "
      << g.params.size() << " tensors  lr " << g.lr << "  wd " << g.weight_decay << "  (" << g.rule << ")\n    shapes:";
    for (const auto& [shape, n] : shapes) s << " " << n << "x" << shape;
    s << "\n";
  }
  return s.str();
}

NamedTensors TrainingOptimizer::state() {
  NamedTensors out;
  if (adam_) out = adamw_state(*adam_, model_);
  if (normuon_)
    for (auto& t : normuon_->state()) out.push_back(std::move(t));
  return out;
}

void TrainingOptimizer::load_state(const NamedTensors& tensors, const std::string& path) {
  if (adam_) load_adamw_state(*adam_, model_, tensors, path);
  if (normuon_) normuon_->load_state(tensors, path);
}

}  // namespace fbt
