// measure_bandwidth: a STREAM-like read and triad on plain threads (no library: the loops are the
// measurement). See include/fbt/bench/bandwidth.h.
#include "fbt/bench/bandwidth.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "fbt/util/error.h"

namespace fbt {
namespace {

/// Best seconds of `reps` runs of part(t, threads) on `threads` threads started together.
double best_seconds(int threads, int reps, const std::function<void(int, int)>& part) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(part, t, threads);
    part(0, threads);
    for (auto& th : pool) th.join();
    const std::chrono::duration<double> s = std::chrono::steady_clock::now() - start;
    best = std::min(best, s.count());
  }
  return best;
}

/// [begin, end) of thread t's slice of n items.
std::pair<int64_t, int64_t> slice(int64_t n, int t, int threads) { return {n * t / threads, n * (t + 1) / threads}; }

}  // namespace

Bandwidth measure_bandwidth(int threads, int reps, int64_t bytes_per_array) {
  if (threads < 1) throw Error("measure_bandwidth: threads must be >= 1 (got " + std::to_string(threads) + ")");
  if (reps < 1) throw Error("measure_bandwidth: reps must be >= 1 (got " + std::to_string(reps) + ")");
  const int64_t n_words = bytes_per_array / 8, n_floats = bytes_per_array / 4;
  if (n_words < 64 * threads)
    throw Error("measure_bandwidth: arrays too small for " + std::to_string(threads) + " threads");
  Bandwidth bw;
  {
    std::vector<uint64_t> words(n_words);
    for (int64_t i = 0; i < n_words; ++i) words[i] = uint64_t(i);  // touched: pages are mapped before timing
    std::vector<uint64_t> sums(threads);
    const double s = best_seconds(threads, reps, [&](int t, int T) {
      // Four streams per thread (the quarters of its slice, read side by side): one sequential
      // stream alone leaves the memory system idle between its prefetches.
      const auto [begin, end] = slice(n_words, t, T);
      const int64_t quarter = (end - begin) / 4;
      const uint64_t* q[4] = {&words[begin], &words[begin + quarter], &words[begin + 2 * quarter],
                              &words[begin + 3 * quarter]};
      uint64_t sum = 0;  // integers: the compiler may vectorise the sums without reordering floats
      for (int64_t i = 0; i < quarter; ++i) sum += q[0][i] + q[1][i] + q[2][i] + q[3][i];
      for (int64_t i = begin + 4 * quarter; i < end; ++i) sum += words[i];
      sums[t] = sum;
    });
    uint64_t total = 0;
    for (uint64_t v : sums) total += v;
    if (total != uint64_t(n_words) * uint64_t(n_words - 1) / 2) throw Error("measure_bandwidth: the read sum is wrong");
    bw.read = double(n_words * 8) / s;
  }
  {
    std::vector<float> a(n_floats, 0.0f), b(n_floats, 1.0f), c(n_floats, 2.0f);
    const double s = best_seconds(threads, reps, [&](int t, int T) {
      const auto [begin, end] = slice(n_floats, t, T);
      for (int64_t i = begin; i < end; ++i) a[i] = b[i] + 3.0f * c[i];
    });
    if (a[n_floats / 2] != 7.0f) throw Error("measure_bandwidth: the triad result is wrong");
    bw.triad = double(n_floats * 12) / s;
  }
  return bw;
}

}  // namespace fbt
