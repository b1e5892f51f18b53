// Throughput measurements behind `fbt bench` (see include/fbt/bench/throughput.h for the definitions).
#include "fbt/bench/throughput.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <optional>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include "fbt/infer/decode_backend.h"
#include "fbt/model/precision.h"
#include "fbt/train/optimizer.h"
#include "fbt/model/passes.h"
#include "fbt/train/trainer.h"
#include "fbt/util/error.h"
#include "fbt/util/memory_stats.h"

namespace fbt {

Stats Stats::of(std::vector<double> values) {
  if (values.empty()) throw Error("no measurements to summarise (--reps must be >= 1)");
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  const double median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  return {median, values.front(), values.back()};
}

Stats Stats::inverse(double numerator) const { return {numerator / median, numerator / max, numerator / min}; }

namespace {

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
}

/// time_repeated with an untimed `setup` before every repetition.
std::vector<double> time_with_setup(const torch::Device& device, int64_t warmup, int64_t reps,
                                    const std::function<void()>& setup, const std::function<void()>& fn) {
  if (reps < 1) throw Error("--reps must be >= 1 (got " + std::to_string(reps) + ")");
  std::vector<double> seconds;
  for (int64_t r = 0; r < warmup + reps; ++r) {
    setup();
    synchronize(device);
    const auto start = std::chrono::steady_clock::now();
    fn();
    synchronize(device);
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    if (r >= warmup) seconds.push_back(elapsed.count());
  }
  return seconds;
}

BenchResult result_of(const std::vector<double>& seconds, double tokens, const torch::Device& device) {
  const auto s = Stats::of(seconds);
  return {s, s.inverse(tokens), peak_memory_bytes(device)};
}

torch::Device device_of(FBT& model) { return model->parameters().front().device(); }

torch::Tensor random_tokens(const ModelConfig& config, int64_t batch, int64_t length, uint64_t seed,
                            const torch::Device& device) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randint(config.vocab_size, {batch, length}, generator, torch::kLong).to(device);
}

}  // namespace

std::vector<double> time_repeated(const torch::Device& device, int64_t warmup, int64_t reps,
                                  const std::function<void()>& fn) {
  return time_with_setup(
      device, warmup, reps, [] {}, fn);
}

int64_t matmul_weights_per_token(const ModelConfig& c, bool fused) {
  const int64_t D = c.d_model, H = c.n_heads, Hkv = c.n_kv_heads, Dh = c.head_dim(), F = c.d_ff;
  const int64_t gate = c.block == BlockKind::Fbt ? D * H : 0;  // per-head output gate
  const int64_t per_layer = D * H * Dh + 2 * D * Hkv * Dh + H * Dh * D + gate + 3 * D * F;
  return c.n_layers * per_layer + c.vocab_size * D + (fused ? 2 * D * D : 0);
}

double training_flops_per_token(const ModelConfig& c, int64_t seq_len, int64_t passes) {
  double attention = 0;  // Σ_l D·T_l
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const int64_t window = c.layer_window(l);
    attention += double(c.d_model) * double(window > 0 ? std::min(window, seq_len) : seq_len);
  }
  double flops = 0;
  for (int64_t k = 1; k <= passes; ++k)
    flops += 6.0 * double(matmul_weights_per_token(c, /*fused=*/k > 1)) + 12.0 * attention;
  return flops;
}

double measure_matmul_peak(const torch::Device& device, torch::ScalarType dtype, int64_t n, int64_t reps) {
  torch::InferenceMode inference;
  auto opts = torch::dtype(dtype).device(device);
  auto a = torch::randn({n, n}, opts), b = torch::randn({n, n}, opts), c = torch::empty({n, n}, opts);
  const auto seconds = time_repeated(device, 1, reps, [&] { torch::mm_out(c, a, b); });
  return 2.0 * double(n) * double(n) * double(n) / Stats::of(seconds).min;
}

BenchResult bench_train_step(FBT& model, const TrainConfig& train, int64_t batch, int64_t seq, int64_t passes,
                             int64_t warmup, int64_t reps, uint64_t seed) {
  if (seq > model->config().context)
    throw Error("--train-seq " + std::to_string(seq) + " exceeds the model context " +
                std::to_string(model->config().context));
  const auto device = device_of(model);
  auto data = random_tokens(model->config(), batch, seq + 1, seed, device);
  auto x = data.narrow(1, 0, seq), y = data.narrow(1, 1, seq);
  model->train();
  TrainingOptimizer optimizer(model, train);
  PassOptions po = training_pass_options(train, passes, /*cooldown=*/false);
  if (device.is_cpu()) po.generator = at::make_generator<at::CPUGeneratorImpl>(seed + 1);
  reset_peak_memory(device);
  const auto seconds = time_repeated(device, warmup, reps, [&] {
    torch::Tensor loss;
    {
      AutocastScope amp(train.precision, device);
      loss = forward_passes(model, x, y, po).loss;
    }
    loss.backward();
    optimizer.step(1.0, 1.0);
    model->zero_grad();
  });
  return result_of(seconds, double(batch * seq), device);
}

BenchResult bench_prefill(FBT& model, const Decoding& decoding, int64_t batch, int64_t context, int64_t warmup,
                          int64_t reps, uint64_t seed, DecodeBackend& backend) {
  torch::InferenceMode inference;
  model->eval();
  const auto device = device_of(model);
  auto tokens = random_tokens(model->config(), batch, context, seed, device);
  auto valid = torch::ones({batch, context}, torch::dtype(torch::kBool).device(device));
  KVCache cache(model->config(), batch, context, model->parameters().front().options());
  reset_peak_memory(device);
  const auto seconds = time_with_setup(
      device, warmup, reps, [&] { cache.clear(); }, [&] { backend.prefill(tokens, valid, decoding, cache); });
  return result_of(seconds, double(batch * context), device);
}

DecodeComparison bench_decode_modes(FBT& model, BenchDecoder decoder, int64_t batch, int64_t context,
                                    int64_t new_tokens, int64_t warmup, int64_t reps, uint64_t seed,
                                    const CpuDecoderOptions& cpu_options) {
  if (context + new_tokens > model->config().context)
    throw Error("--contexts " + std::to_string(context) + " + --new-tokens " + std::to_string(new_tokens) +
                " exceeds the model context " + std::to_string(model->config().context));
  if (reps < 1) throw Error("--reps must be >= 1 (got " + std::to_string(reps) + ")");
  torch::InferenceMode inference;
  model->eval();
  const auto device = device_of(model);
  auto prompt = random_tokens(model->config(), batch, context, seed, device);
  auto valid = torch::ones({batch, context}, torch::dtype(torch::kBool).device(device));
  const auto options = model->parameters().front().options();
  // One cache per mode, so that the modes can alternate step by step; the soft one is made after
  // the memory measurement (which runs both modes on the first), except for CUDA graphs, which
  // are bound to their cache when made.
  std::array<std::optional<KVCache>, 2> caches;  // [standard, soft]
  caches[0].emplace(model->config(), batch, context + new_tokens, options);
  std::shared_ptr<CpuDecoder> fast;  // the Cpu step, for its weight bytes too
  if (decoder == BenchDecoder::Cpu) fast = std::make_shared<CpuDecoder>(model, cpu_options);
  const bool graph = decoder == BenchDecoder::Graph;
  const auto backend = graph  ? graph_backend(model, /*use_graph=*/true)
                       : fast ? cpu_backend(fast)
                              : torch_backend(model);
  if (graph) caches[1].emplace(model->config(), batch, context + new_tokens, options);
  const std::array<DecodeMode, 2> modes{DecodeMode::Standard, DecodeMode::Soft};
  // Prefill (untimed; by the decoder that decodes, as fbt generate) of `cache`; returns the first tokens [B].
  auto start = [&](KVCache& cache) {
    cache.clear();
    return backend->prefill(prompt, valid, Decoding{}, cache).argmax(-1);
  };
  // One greedy step of mode m on `cache`, from the last tokens [B]; returns the next ones [B].
  auto step = [&](size_t m, const torch::Tensor& last, KVCache& cache) {
    return backend->step(last, modes[m], cache).argmax(-1);
  };
  std::array<int64_t, 2> peak{}, anonymous{-1, -1};
  for (size_t m = 0; m < modes.size(); ++m) {  // untimed, one mode at a time: warms up and measures memory
    KVCache& cache = *caches[graph ? m : 0];
    reset_peak_memory(device);
    auto next = start(cache);
    for (int64_t i = 0; i < new_tokens; ++i) next = step(m, next, cache);
    synchronize(device);
    peak[m] = peak_memory_bytes(device);
    if (device.is_cpu()) anonymous[m] = anonymous_resident_bytes();
  }
  if (!caches[1]) caches[1].emplace(model->config(), batch, context + new_tokens, options);
  // Timed: the modes alternate step by step (which goes first alternates too), each on its own
  // cache, so the drift of a shared machine's speed, even within a run, cancels out of the soft
  // overhead, which is the median over a repetition's step pairs.
  std::array<std::vector<double>, 2> seconds;
  std::vector<double> overhead;
  for (int64_t r = 0; r < warmup + reps; ++r) {
    std::array<torch::Tensor, 2> next{start(*caches[0]), start(*caches[1])};
    std::array<double, 2> total{};
    std::vector<double> pair_overhead;
    for (int64_t i = 0; i < new_tokens; ++i) {
      std::array<double, 2> s{};
      for (size_t j = 0; j < modes.size(); ++j) {
        const size_t m = (i + r) % 2 == 0 ? j : modes.size() - 1 - j;
        synchronize(device);
        const auto t0 = std::chrono::steady_clock::now();
        next[m] = step(m, next[m], *caches[m]);
        synchronize(device);
        s[m] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        total[m] += s[m];
      }
      pair_overhead.push_back(s[1] / s[0] - 1.0);
    }
    if (r < warmup) continue;
    for (size_t m = 0; m < modes.size(); ++m) seconds[m].push_back(total[m]);
    overhead.push_back(Stats::of(pair_overhead).median);
  }
  const double tokens = double(batch * new_tokens);
  auto result = [&](size_t m) {
    const auto st = Stats::of(seconds[m]);
    return BenchResult{st, st.inverse(tokens), peak[m], anonymous[m]};
  };
  int64_t kv_bytes = 0;
  for (const auto* layers : {&caches[0]->k, &caches[0]->v})
    for (const auto& t : *layers) kv_bytes += int64_t(t.nbytes());
  return {result(0),
          result(1),
          Stats::of(overhead),
          fast ? fast->matmul_weight_bytes(false) : -1,
          fast ? fast->matmul_weight_bytes(true) : -1,
          kv_bytes};
}

}  // namespace fbt
