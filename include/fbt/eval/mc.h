// Few-shot multiple-choice / cloze evaluation (SPEC §8) with lm-evaluation-harness conventions.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fbt/data/tokenizer.h"
#include "fbt/eval/scorer.h"
#include "fbt/eval/tasks.h"

namespace fbt {

struct McEvalOptions {
  int64_t shots = 5;     ///< few-shot examples per item (0 allowed)
  int64_t limit = -1;    ///< evaluate the first this many items at most (< 0: all)
  uint64_t seed = 1234;  ///< few-shot draws (lm-eval's default fewshot seed)
  int64_t chunk = 256;   ///< items per Scorer::score call (progress granularity)
  /// Called after each chunk with (items done, items in total); may be empty.
  std::function<void(int64_t, int64_t)> on_progress;
};

/// One reported number.
struct MetricResult {
  std::string metric;  ///< metric_name(): "acc", "acc_norm", "acc_bytes" or "perplexity"
  double value;        ///< accuracy in [0, 1], or perplexity
  double stderr_;      ///< standard error of value (NaN for n < 2)
  int64_t n;           ///< items evaluated
};

/// The mean of `values` reported as `metric`, with the standard error sd/sqrt(n) (sd with n−1, so
/// sqrt(p(1−p)/(n−1)) for 0/1 values: lm-eval's mean_stderr; NaN for n < 2). Throws fbt::Error
/// naming `metric` if values is empty.
MetricResult mean_result(const std::string& metric, const std::vector<double>& values);

/// The few-shot examples of evaluated item `item`: `shots` distinct indices into a pool of
/// `pool_size` docs, drawn with std::mt19937_64 seeded by std::seed_seq{low 32 bits of seed, high
/// 32 bits of seed, low 32 bits of item}
/// (a partial Fisher–Yates shuffle; the same on every platform, independent of --limit and of
/// the order items are scored in). Throws fbt::Error if shots > pool_size.
std::vector<int64_t> fewshot_indices(int64_t pool_size, int64_t shots, uint64_t seed, int64_t item);

/// The token request of a context and a continuation, as lm-eval's _encode_pair: trailing
/// spaces of the context move to the front of the continuation, the continuation's tokens are
/// encode(context + continuation) after the first |encode(context)| tokens, and the context
/// tokens are [EOS] + encode(context) (training documents follow an EOS, so the prompt starts a
/// document, as in `fbt generate`). Where encode(context + continuation) does not start with
/// encode(context) (a token spans the join) or has nothing after it, the continuation is encoded
/// on its own instead, so the scored tokens always spell exactly the continuation (with the moved
/// spaces); they are empty only for an empty continuation.
ScoreRequest encode_request(const Tokenizer& tokenizer, const std::string& context, const std::string& continuation);

/// The number of items evaluate_task scores of `n_docs` docs: those before the few-shot pool (the
/// last task.fewshot_pool docs), at most options.limit of them. Throws fbt::Error "task NAME: no
/// item to evaluate (...)" naming the counts and --limit when none is left; `fbt eval` calls it
/// right after reading the data, before it loads the checkpoint.
int64_t mc_item_count(const TaskSpec& task, int64_t n_docs, const McEvalOptions& options);

/// Evaluates `task` on `docs` (load_docs): the last task.fewshot_pool docs form the few-shot pool,
/// the docs before them (the first options.limit of them) are evaluated. For evaluated item i
/// and choice c the request is
///   prefix_i + doc.contexts[c]  →  kTargetDelimiter + doc.choices[c]
/// where prefix_i joins the few-shot examples contexts[gold] + kTargetDelimiter + choices[gold]
/// of fewshot_indices(pool, shots, seed, i), each followed by "\n\n" (lm-eval's
/// fewshot_delimiter). Returns one MetricResult per task.metrics entry:
///  - acc:        mean of [argmax_c loglik_c == gold]; ties go to the first choice (numpy argmax)
///  - acc_norm:   the same with loglik_c / characters of choices[c] (Unicode code points, without
///                the delimiter: lm-eval's len(choice))
///  - acc_bytes:  the same with loglik_c / UTF-8 bytes of choices[c] (equal to acc_norm for ASCII)
///  - acc (cloze): mean of greedy (every continuation token is the argmax)
///  - perplexity: exp(−mean_i loglik_i), loglik_i the item's summed continuation log-likelihood
///                (lm-eval's perplexity aggregation: per item, not per token)
/// Standard errors: sqrt(p(1−p)/(n−1)) for accuracies (lm-eval's mean_stderr); the delta method
/// perplexity · sd(loglik)/sqrt(n) for perplexity (lm-eval bootstraps it instead).
/// Throws fbt::Error if shots < 0, no doc is left to evaluate, or shots exceeds the pool.
std::vector<MetricResult> evaluate_task(const TaskSpec& task, const std::vector<Doc>& docs, const Tokenizer& tokenizer,
                                        Scorer& scorer, const McEvalOptions& options);

}  // namespace fbt
