// Few-shot evaluation: few-shot prompts, lm-eval request encoding, acc / acc_norm / perplexity.
#include "fbt/eval/mc.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "fbt/util/error.h"
#include "fbt/util/utf8.h"

namespace fbt {
namespace {

/// Index of the first largest value (numpy.argmax).
size_t argmax(const std::vector<double>& v) {
  return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

/// The value of `metric` for one item, from its per-choice results.
double item_value(Metric metric, const Doc& doc, const std::vector<ScoreResult>& scores) {
  std::vector<double> ll;
  for (size_t c = 0; c < scores.size(); ++c) {
    const double length = metric == Metric::AccNorm    ? static_cast<double>(utf8_length(doc.choices[c]))
                          : metric == Metric::AccBytes ? static_cast<double>(doc.choices[c].size())
                                                       : 1.0;
    ll.push_back(scores[c].loglik / length);
  }
  const auto gold = static_cast<size_t>(doc.gold);
  switch (metric) {
    case Metric::Acc:
    case Metric::AccNorm:
    case Metric::AccBytes: return argmax(ll) == gold ? 1.0 : 0.0;
    case Metric::GreedyAcc: return scores[gold].greedy ? 1.0 : 0.0;
    case Metric::Perplexity: return scores[gold].loglik;
  }
  throw Error("internal: unknown metric");
}

/// mean_result of the item values; for perplexity exp(−mean) with the delta-method error
/// exp(−mean)·sd/sqrt(n).
MetricResult aggregate(Metric metric, const std::vector<double>& values) {
  MetricResult r = mean_result(metric_name(metric), values);
  if (metric == Metric::Perplexity) {
    r.value = std::exp(-r.value);
    r.stderr_ = r.value * r.stderr_;
  }
  return r;
}

}  // namespace

MetricResult mean_result(const std::string& metric, const std::vector<double>& values) {
  if (values.empty()) throw Error("no values to average for " + metric);
  const auto n = static_cast<double>(values.size());
  const double mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
  double squares = 0;
  for (double v : values) squares += (v - mean) * (v - mean);
  const double sem = values.size() < 2 ? std::numeric_limits<double>::quiet_NaN() : std::sqrt(squares / (n - 1) / n);
  return {metric, mean, sem, static_cast<int64_t>(values.size())};
}

std::vector<int64_t> fewshot_indices(int64_t pool_size, int64_t shots, uint64_t seed, int64_t item) {
  if (shots > pool_size)
    throw Error("--shots " + std::to_string(shots) + " exceeds the few-shot pool of " + std::to_string(pool_size) +
                " examples");
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(item)};
  std::mt19937_64 rng(seq);
  std::vector<int64_t> pool(static_cast<size_t>(pool_size));
  std::iota(pool.begin(), pool.end(), int64_t{0});
  for (int64_t i = 0; i < shots; ++i)
    std::swap(pool[i], pool[i + static_cast<int64_t>(rng() % static_cast<uint64_t>(pool_size - i))]);
  pool.resize(static_cast<size_t>(shots));
  return pool;
}

ScoreRequest encode_request(const Tokenizer& tokenizer, const std::string& context, const std::string& continuation) {
  const size_t kept = context.find_last_not_of(" \t\n\r\f\v") + 1;  // 0 if all whitespace
  const std::string ctx = context.substr(0, kept), cont = context.substr(kept) + continuation;
  const auto ctx_ids = tokenizer.encode(ctx), whole = tokenizer.encode(ctx + cont);
  ScoreRequest r;
  // The context starts as a document does (Tokenizer::document_prefix); a first token to score
  // needs one before it, so an empty prefix and context get EOS (lm-evaluation-harness's prefix token).
  r.context = tokenizer.document_prefix();
  r.context.insert(r.context.end(), ctx_ids.begin(), ctx_ids.end());
  if (r.context.empty()) r.context.push_back(tokenizer.eos_id());
  // whole = ctx_ids + the continuation's tokens unless a token spans the join (it merges the
  // context's last characters with the continuation's first): then whole[|ctx_ids|:] would spell
  // part of the context, or nothing, so the continuation is encoded on its own.
  const bool splits = whole.size() > ctx_ids.size() && std::equal(ctx_ids.begin(), ctx_ids.end(), whole.begin());
  if (splits)
    r.continuation.assign(whole.begin() + static_cast<std::ptrdiff_t>(ctx_ids.size()), whole.end());
  else
    r.continuation = tokenizer.encode(cont);
  return r;
}

int64_t mc_item_count(const TaskSpec& task, int64_t n_docs, const McEvalOptions& o) {
  const int64_t pool_start = n_docs - task.fewshot_pool;
  const int64_t n = o.limit < 0 ? pool_start : std::min(o.limit, pool_start);
  if (n < 1)
    throw Error("task " + task.name + ": no item to evaluate (" + std::to_string(n_docs) + " items, the last " +
                std::to_string(task.fewshot_pool) + " are the few-shot pool; --limit " + std::to_string(o.limit) + ")");
  return n;
}

std::vector<MetricResult> evaluate_task(const TaskSpec& task, const std::vector<Doc>& docs, const Tokenizer& tokenizer,
                                        Scorer& scorer, const McEvalOptions& o) {
  if (o.shots < 0) throw Error("--shots must be >= 0 (got " + std::to_string(o.shots) + ")");
  if (o.chunk < 1) throw Error("chunk must be >= 1 (got " + std::to_string(o.chunk) + ")");
  const auto n_docs = static_cast<int64_t>(docs.size());
  const int64_t pool_start = n_docs - task.fewshot_pool;
  const int64_t n = mc_item_count(task, n_docs, o);

  std::vector<std::vector<ScoreResult>> scores(static_cast<size_t>(n));  // [item][choice]
  for (int64_t first = 0; first < n; first += o.chunk) {
    const int64_t end = std::min(n, first + o.chunk);
    std::vector<ScoreRequest> requests;
    for (int64_t i = first; i < end; ++i) {
      std::string prefix;
      for (int64_t e : fewshot_indices(task.fewshot_pool, o.shots, o.seed, i)) {
        const Doc& example = docs[pool_start + e];
        prefix += example.contexts[example.gold] + kTargetDelimiter + example.choices[example.gold] + "\n\n";
      }
      const Doc& doc = docs[i];
      for (size_t c = 0; c < doc.choices.size(); ++c) {
        requests.push_back(encode_request(tokenizer, prefix + doc.contexts[c], kTargetDelimiter + doc.choices[c]));
        if (requests.back().continuation.empty())
          throw Error("task " + task.name + ", item " + std::to_string(i) + ", choice " + std::to_string(c) +
                      ": the continuation is empty (nothing to score)");
      }
    }
    const auto results = scorer.score(requests);
    if (results.size() != requests.size()) throw Error("internal: the scorer returned a wrong number of results");
    auto next = results.begin();
    for (int64_t i = first; i < end; ++i) {
      const auto k = static_cast<std::ptrdiff_t>(docs[i].choices.size());
      scores[i].assign(next, next + k);
      next += k;
    }
    if (o.on_progress) o.on_progress(end, n);
  }

  std::vector<MetricResult> out;
  for (Metric metric : task.metrics) {
    std::vector<double> values;
    for (int64_t i = 0; i < n; ++i) values.push_back(item_value(metric, docs[i], scores[i]));
    out.push_back(aggregate(metric, values));
  }
  return out;
}

}  // namespace fbt
