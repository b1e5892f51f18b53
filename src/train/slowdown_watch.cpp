// A busy machine seen in the training throughput (see slowdown_watch.h).
#include "fbt/train/slowdown_watch.h"

#include <cmath>

namespace fbt {

std::string SlowdownWatch::update(double tokens_per_s, int threads) {
  if (!std::isfinite(tokens_per_s) || tokens_per_s <= 0) return "";
  if (++seen_ <= warmup_) return "";
  if (best_ > 0 && tokens_per_s < ratio_ * best_) {
    ++streak_;
  } else {
    streak_ = 0;
  }
  if (tokens_per_s > best_) best_ = tokens_per_s;
  if (streak_ < streak_needed_) return "";
  const std::string remedy = threads > 1 ? "try --threads " + std::to_string(threads - 1)
                                         : "free a core or wait for the other process";
  return "slow: " + std::to_string(std::lround(100 * tokens_per_s / best_)) + "% of this run's best " +
         std::to_string(std::lround(best_)) + " tok/s; another process may be using a core: " + remedy;
}

}  // namespace fbt
