// Noticing a busy machine from the training throughput (issue 36): with every physical core in use
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

  /// Records one step's rate (tokens/s; a non-finite or non-positive rate is ignored) and returns
  /// the note for the progress line: "" while the run is not slow, else e.g. "slow: 11% of this
  /// run's best 1040 tok/s; another process may be using a core: try --threads 1" (`threads`: the
  /// threads in use; at 1 the remedy is to free a core).
  std::string update(double tokens_per_s, int threads);

 private:
  int64_t warmup_, streak_needed_;
  double ratio_;
  int64_t seen_ = 0, streak_ = 0;
  double best_ = 0;
};

}  // namespace fbt
