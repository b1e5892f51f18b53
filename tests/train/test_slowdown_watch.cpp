// SlowdownWatch: the busy-machine note of the training progress line (issue 36), on rates worked
// out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "fbt/train/slowdown_watch.h"

namespace fbt {
namespace {

TEST(SlowdownWatch, NotesThreeSlowStepsInARowAfterWarmup) {
  SlowdownWatch w;  // warmup 3, ratio 0.5, streak 3
  for (double r : {10.0, 20.0, 5.0}) EXPECT_EQ(w.update(r, 2), "");  // warm-up: not counted
  for (double r : {1000.0, 900.0, 1040.0}) EXPECT_EQ(w.update(r, 2), "");
  EXPECT_EQ(w.update(100, 2), "");  // 1 and 2 slow steps: no note yet
  EXPECT_EQ(w.update(119, 2), "");
  EXPECT_EQ(w.update(81, 2), "slow: 8% of this run's best 1040 tok/s; another process may be using a core: "
                             "try --threads 1");
  EXPECT_EQ(w.update(600, 2), "");  // back above half the best: the streak ends
  EXPECT_EQ(w.update(NAN, 2), "");  // ignored
  for (int i = 0; i < 2; ++i) EXPECT_EQ(w.update(500, 1), "");
  EXPECT_EQ(w.update(500, 1), "slow: 48% of this run's best 1040 tok/s; another process may be using a core: "
                              "free a core or wait for the other process");
}

TEST(SlowdownWatch, SteadyOrSlowlyVaryingRatesNeverNote) {
  SlowdownWatch w;
  // K=3 steps cost 1.5x K=2 steps: rates alternate between 1000 and 667, never below half the best.
  for (int i = 0; i < 100; ++i) EXPECT_EQ(w.update(i % 3 == 0 ? 667 : 1000, 2), "") << i;
}

}  // namespace
}  // namespace fbt
