// Batched generation: left-padded prefill, lockstep decode, greedy/temperature/top-k/top-p.
#include "fbt/infer/generate.h"

#include <limits>
#include <optional>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>

#include "fbt/infer/cpu_decoder.h"
#include "fbt/util/error.h"

namespace fbt {

bool temperature_in_range(double t) { return t == 0 || (t >= kMinTemperature && t <= kMaxTemperature); }

std::string temperature_problem(double t) {
  if (temperature_in_range(t)) return "";
  std::ostringstream o;
  o << "must be 0 (greedy) or in [" << kMinTemperature << ", " << kMaxTemperature << "] (got " << t << ")";
  return o.str();
}

void check_temperature(double t, const std::string& flag) {
  if (const auto problem = temperature_problem(t); !problem.empty()) throw Error(flag + " " + problem);
}

std::string top_k_problem(int64_t k) {
  return k >= kMinTopK ? "" : "must be >= 1, or 0 or -1 for all tokens (got " + std::to_string(k) + ")";
}

std::string top_p_problem(double p) {
  if (p > 0 && p <= 1) return "";
  std::ostringstream o;
  o << "must be in (0, 1] (got " << p << ")";
  return o.str();
}

void SamplingOptions::validate() const {
  check_temperature(temperature, "--temperature");
  if (const auto problem = top_k_problem(top_k); !problem.empty()) throw Error("--top-k " + problem);
  if (const auto problem = top_p_problem(top_p); !problem.empty()) throw Error("--top-p " + problem);
}

torch::Tensor sample_tokens(const torch::Tensor& logits, const SamplingOptions& o, at::Generator& generator) {
  o.validate();
  if (o.temperature == 0) return logits.argmax(-1);
  auto scaled = logits.to(torch::kCPU, torch::kFloat) / o.temperature;  // [B,V]
  if (o.top_k > 0 && o.top_k < scaled.size(-1)) {
    auto kth = std::get<0>(scaled.topk(o.top_k, -1)).narrow(-1, o.top_k - 1, 1);  // [B,1]
    scaled = scaled.masked_fill(scaled < kth, -std::numeric_limits<float>::infinity());
  }
  auto probs = torch::softmax(scaled, -1);
  if (o.top_p < 1) {
    auto [sorted, order] = probs.sort(-1, /*descending=*/true);
    // Keep a token if the mass before it is below top_p (the most likely token always stays).
    auto drop = (sorted.cumsum(-1) - sorted) >= o.top_p;
    probs = probs.scatter(-1, order, sorted.masked_fill(drop, 0));
  }
  return torch::multinomial(probs, 1, false, generator).view({-1}).to(logits.device());
}

std::vector<std::vector<int64_t>> generate(FBT& model, const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerationOptions& o) {
  torch::InferenceMode inference;
  const int64_t B = prompts.size(), context = model->config().context;
  int64_t longest = 0;
  for (size_t b = 0; b < prompts.size(); ++b) {
    if (prompts[b].empty()) throw Error("prompt " + std::to_string(b) + " is empty");
    longest = std::max<int64_t>(longest, prompts[b].size());
  }
  if (longest > context)
    throw Error("prompt of " + std::to_string(longest) + " tokens does not fit the model context of " +
                std::to_string(context) + " tokens");
  auto param = model->parameters().front();

  // Left-pad into [B,T] with a validity mask.
  auto tokens = torch::full({B, longest}, o.pad_id, torch::kLong);
  auto valid = torch::zeros({B, longest}, torch::kBool);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = prompts[b].size();
    tokens[b].narrow(0, longest - n, n).copy_(torch::tensor(prompts[b], torch::kLong));
    valid[b].narrow(0, longest - n, n).fill_(true);
  }
  const int64_t steps = std::min(o.max_new_tokens, context - longest);
  KVCache cache(model->config(), B, longest + std::max<int64_t>(steps, 0), param.options());
  auto generator = at::make_generator<at::CPUGeneratorImpl>(o.sampling.seed);

  std::vector<std::vector<int64_t>> out(B);
  if (steps <= 0) return out;
  const auto backend = o.backend ? o.backend : make_decode_backend(model);
  // Standard and Soft prefill one plain pass, Fused k + 1 passes; the dedicated step runs them all.
  if (const auto p = o.decoding.problem(); !p.empty()) throw Error("--fused-passes " + p);
  auto logits = backend->prefill(tokens, valid, o.decoding, cache);
  std::vector<bool> done(B, false);
  for (int64_t step = 0; step < steps; ++step) {
    if (o.ignore_eos && o.eos_id >= 0)
      logits = logits.index_fill(1, torch::tensor({o.eos_id}, torch::kLong).to(logits.device()),
                                 -std::numeric_limits<float>::infinity());
    auto next = sample_tokens(logits, o.sampling, generator);  // [B]
    auto host = next.to(torch::kCPU).contiguous();
    const int64_t* sampled = host.data_ptr<int64_t>();
    bool all_done = true;
    for (int64_t b = 0; b < B; ++b) {
      if (done[b]) continue;
      const int64_t tok = sampled[b];
      if (tok == o.eos_id) {
        done[b] = true;
        continue;
      }
      out[b].push_back(tok);
      if (o.on_token) o.on_token(b, tok);
      all_done = false;
    }
    if (all_done || step + 1 == steps || (o.should_stop && o.should_stop())) break;
    logits = backend->step(next, o.decoding.mode, cache);
  }
  return out;
}

}  // namespace fbt
