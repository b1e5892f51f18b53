// Noticing a busy machine from the training throughput: with every physical core in use
// by default, one core taken by another process stalls OpenMP's spinning threads and a run drops
// to a tenth of its speed (measured: ~1,040 -> 81-119 tokens/s). The progress line then says so and
// names the remedy, rather than leaving a user to guess.
#pragma once
#include <cstdint>
#include <string>

namespace fbt {

class SlowdownWatch {
 public:
  /// `warmup`: the first steps, not counted in the best rate (allocation, caches); `ratio`: a
  /// step below ratio x the best rate is slow; `streak`: consecutive slow steps before the note.
  explicit SlowdownWatch(int64_t warmup = 3, double ratio = 0.5, int64_t streak = 3)
      : warmup_(warmup), ratio_(ratio), streak_needed_(streak) {}

  /// Records one step and returns the note for the progress line ("" while the run is not slowed).
  /// `token_passes_per_s`: tokens x passes K over the step's seconds (a K=2 step is not slow for
  /// costing two passes); `cpu_share`: the process's CPU seconds in the step over (its seconds x
  /// `threads`): near 1 while the threads spin or compute, well below when another process takes
  /// the core of one of them. A step is slowed when its rate is below ratio x the run's best or its
  /// CPU share is below `kStarvedShare`; after `streak` slowed steps in a row the note says which,
  /// e.g. "busy: the 2 threads got 61% of their CPU time; another process is using a core: try
  /// --threads 1" or "slow: 11% of this run's best speed; another process may be using a core: ..."
  /// (at 1 thread the remedy is to free a core). Non-finite or non-positive rates are ignored.
  std::string update(double token_passes_per_s, double cpu_share, int threads);

  /// The CPU share below which a step counts as starved.
  static constexpr double kStarvedShare = 0.8;

 private:
  int64_t warmup_;
  double ratio_;
  int64_t streak_needed_;
  int64_t seen_ = 0, streak_ = 0;
  double best_ = 0;
};

}  // namespace fbt
