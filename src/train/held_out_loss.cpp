// Held-out loss: nats/token and bits/byte after 0..K fused prefill passes (and further rows).
#include "fbt/train/held_out_loss.h"

#include <cmath>
#include <limits>

#include <torch/nn/functional/loss.h>

#include "fbt/model/passes.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

/// UTF-8 bytes of the text that tokens [start, start+n) of `shard` spell (start >= 1): the
/// decoded length of tokens [start-1, start+n) minus that of token start-1 alone, so a decoder
/// that treats the first token specially (a leading space mark) affects only the context token.
int64_t decoded_bytes(const TokenShard& shard, int64_t start, int64_t n, const Tokenizer& tokenizer) {
  std::vector<int64_t> ids(static_cast<size_t>(n) + 1);
  shard.read(start - 1, n + 1, ids.data());  // [context token, the n tokens]
  return static_cast<int64_t>(tokenizer.decode(ids).size()) -
         static_cast<int64_t>(tokenizer.decode({ids.front()}).size());
}

/// UTF-8 bytes of the targets `loader` scores: the target tokens of each of its windows.
int64_t target_bytes(const SequentialLoader& loader, const TokenShard& shard, int64_t T, const Tokenizer& tokenizer) {
  int64_t bytes = 0;
  for (int64_t w = 0; w < loader.num_windows(); ++w)
    bytes += decoded_bytes(shard, loader.window_start(w) + 1, T, tokenizer);
  return bytes;
}

/// Summed cross-entropy in nats of logits [B,T,V] against targets [B,T].
double summed_nats(const torch::Tensor& logits, const torch::Tensor& targets) {
  namespace F = torch::nn::functional;
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat), targets.reshape({-1}),
                          F::CrossEntropyFuncOptions().reduction(torch::kSum))
      .item<double>();
}

/// Checks the common arguments of loss evaluation; throws fbt::Error naming the flag.
void check_eval_args(const FBT& model, const TokenShard& shard, const LossEvalOptions& o) {
  if (o.batch < 1) throw Error("--batch must be >= 1 (got " + std::to_string(o.batch) + ")");
  if (o.context < 0 || o.context > model->config().context)
    throw Error("--context " + std::to_string(o.context) + ": the window must lie in [1, model.context = " +
                std::to_string(model->config().context) + "] (0: the model context)");
  const int64_t V = model->config().vocab_size;
  if (shard.vocab_size() != V)
    throw Error("token shard '" + shard.path() + "' has vocab " + std::to_string(shard.vocab_size()) +
                " but the model has vocab_size " + std::to_string(V));
}

/// Eval mode and no grad for a scope; restores the model's training flag.
struct EvalScope {
  FBT& model;
  bool was_training;
  torch::NoGradGuard no_grad;
  explicit EvalScope(FBT& m) : model(m), was_training(m->is_training()) { model->eval(); }
  ~EvalScope() { model->train(was_training); }
};

/// Summed nats -> bits per byte of `bytes` target bytes (NaN for 0 bytes).
double bits_per_byte(double nats, int64_t bytes) {
  return bytes > 0 ? nats / std::log(2.0) / static_cast<double>(bytes) : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

std::vector<LossResult> evaluate_loss(FBT& model, const TokenShard& shard, const Tokenizer& tokenizer,
                                      const LossEvalOptions& o) {
  if (o.passes < 0) throw Error("--passes must be >= 0 (got " + std::to_string(o.passes) + ")");
  check_eval_args(model, shard, o);
  const int64_t T = o.context > 0 ? o.context : model->config().context;
  EvalScope scope(model);
  const auto device = model->parameters().front().device();
  const int64_t n_modes = o.passes + 1 + static_cast<int64_t>(o.rows.size());
  std::vector<double> nats(static_cast<size_t>(n_modes), 0.0);  // summed over all targets

  SequentialLoader loader(shard, o.batch, T, o.max_tokens);
  PassOptions pass_options;
  pass_options.passes = o.passes + 1;
  while (auto batch = loader.next()) {
    auto inputs = batch->first.to(device), targets = batch->second.to(device);  // [b,T] each
    const auto out = forward_passes(model, inputs, targets, pass_options);
    const double count = static_cast<double>(targets.numel());
    for (int64_t p = 0; p <= o.passes; ++p) nats[p] += out.losses[p].item<double>() * count;
    for (size_t r = 0; r < o.rows.size(); ++r) nats[o.passes + 1 + r] += summed_nats(o.rows[r].logits(inputs), targets);
  }

  const int64_t tokens = loader.num_windows() * T, bytes = target_bytes(loader, shard, T, tokenizer);
  std::vector<LossResult> results;
  for (int64_t m = 0; m < n_modes; ++m) {
    LossResult r;
    r.name = m <= o.passes ? "passes=" + std::to_string(m) : o.rows[m - o.passes - 1].name;
    r.nats_per_token = nats[m] / static_cast<double>(tokens);
    r.bits_per_byte = bits_per_byte(nats[m], bytes);
    r.tokens = tokens;
    results.push_back(r);
  }
  return results;
}

std::vector<double> evaluate_conversation_loss(FBT& model, const SftData& data, int64_t batch, int64_t seq,
                                               int64_t pad_id, int64_t passes, int64_t max_tokens) {
  if (batch < 1) throw Error("--batch must be >= 1 (got " + std::to_string(batch) + ")");
  EvalScope scope(model);
  const auto device = model->parameters().front().device();
  PassOptions pass_options;
  pass_options.passes = passes + 1;
  std::vector<double> nats(static_cast<size_t>(passes + 1), 0.0);
  int64_t tokens = 0, scored = 0;
  for (int64_t first = 0; first < data.size() && (max_tokens < 0 || tokens < max_tokens); first += batch) {
    std::vector<int64_t> indices;
    for (int64_t i = first; i < std::min(data.size(), first + batch); ++i) indices.push_back(i);
    const auto mb = data.batch(indices, seq, pad_id);
    tokens += mb.tokens;
    if (mb.scored == 0) continue;
    const auto out = forward_passes(model, mb.inputs.to(device), mb.targets.to(device), pass_options);
    for (int64_t p = 0; p <= passes; ++p) nats[p] += out.losses[p].item<double>() * static_cast<double>(mb.scored);
    scored += mb.scored;
  }
  if (scored == 0) throw Error("the validation conversations hold no scored (assistant) token within seq_len");
  for (auto& n : nats) n /= static_cast<double>(scored);
  return nats;
}

std::vector<ContractionPoint> contraction_curve(FBT& model, const TokenShard& shard, const Tokenizer& tokenizer,
                                                int64_t max_passes, const LossEvalOptions& o) {
  if (max_passes < 0) throw Error("--max-passes must be >= 0 (got " + std::to_string(max_passes) + ")");
  check_eval_args(model, shard, o);
  const int64_t T = o.context > 0 ? o.context : model->config().context;
  EvalScope scope(model);
  const auto device = model->parameters().front().device();
  std::vector<double> nats(max_passes + 1, 0.0), change(max_passes + 1, 0.0);  // sums over targets/positions

  SequentialLoader loader(shard, o.batch, T, o.max_tokens);
  const auto layout = Layout::contiguous(T, device);
  while (auto batch = loader.next()) {
    auto inputs = batch->first.to(device), targets = batch->second.to(device);   // [b,T] each
    auto e_n = model->plain_input(model->embed(inputs));                         // [b,T,D]
    auto plain = model->plain_positions(inputs);                                 // [b,T]
    torch::Tensor previous;                                                      // h^(k−1) [b,T,D]
    run_passes(max_passes + 1, [&](int64_t pass, const torch::Tensor& before) {  // pass = k + 1
      const auto x = model->stack(pass == 1 ? e_n : model->feedback_input(before, e_n, plain.unsqueeze(-1)), layout);
      nats[pass - 1] += summed_nats(model->head(x), targets);
      auto state = model->feedback_state(x);  // h^(k) [b,T,D]
      if (pass > 1)
        change[pass - 1] +=
            ((state - previous).norm(2, -1) / previous.norm(2, -1).clamp_min(1e-12)).sum().item<double>();
      return previous = state;
    });
  }
  const int64_t tokens = loader.num_windows() * T;
  const double bpb_per_nat = bits_per_byte(1.0, target_bytes(loader, shard, T, tokenizer));  // bits/byte of 1 nat
  std::vector<ContractionPoint> curve;
  for (int64_t k = 0; k <= max_passes; ++k)
    curve.push_back({k, nats[k] / double(tokens), nats[k] * bpb_per_nat,
                     k == 0 ? std::numeric_limits<double>::quiet_NaN() : change[k] / double(tokens)});
  return curve;
}

}  // namespace fbt
