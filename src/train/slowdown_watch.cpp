// A busy machine seen in the training throughput (see slowdown_watch.h).
#include "fbt/train/slowdown_watch.h"

#include <cmath>

namespace fbt {

std::string SlowdownWatch::update(double token_passes_per_s, double cpu_share, int threads) {
  if (!std::isfinite(token_passes_per_s) || token_passes_per_s <= 0) return "";
  if (++seen_ <= warmup_) return "";
  const bool starved = std::isfinite(cpu_share) && cpu_share < kStarvedShare;
  const bool slow = best_ > 0 && token_passes_per_s < ratio_ * best_;
  streak_ = starved || slow ? streak_ + 1 : 0;
  if (token_passes_per_s > best_) best_ = token_passes_per_s;
  if (streak_ < streak_needed_) return "";
  const std::string remedy =
      threads > 1 ? "try --threads " + std::to_string(threads - 1) : "free a core or wait for the other process";
  if (starved)
    return "busy: the " + std::to_string(threads) + (threads == 1 ? " thread" : " threads") + " got " +
           std::to_string(std::lround(100 * cpu_share)) +
           "% of their CPU time; another process is using a core: " + remedy;
  return "slow: " + std::to_string(std::lround(100 * token_passes_per_s / best_)) +
         "% of this run's best speed; another process may be using a core: " + remedy;
}

}  // namespace fbt
