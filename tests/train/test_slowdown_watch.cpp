// SlowdownWatch: the busy-machine note of the training progress line (issue 36), on rates and CPU
// shares worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "fbt/train/slowdown_watch.h"

namespace fbt {
namespace {

TEST(SlowdownWatch, NotesThreeSlowStepsInARowAfterWarmup) {
  SlowdownWatch w;                                                        // warmup 3, ratio 0.5, streak 3
  for (double r : {10.0, 20.0, 5.0}) EXPECT_EQ(w.update(r, 0.1, 2), "");  // warm-up: not counted
  for (double r : {1000.0, 900.0, 1040.0}) EXPECT_EQ(w.update(r, 1.0, 2), "");
  EXPECT_EQ(w.update(100, 1.0, 2), "");  // 1 and 2 slow steps: no note yet
  EXPECT_EQ(w.update(119, 1.0, 2), "");
  EXPECT_EQ(w.update(81, 1.0, 2),
            "slow: 8% of this run's best speed; another process may be using a core: "
            "try --threads 1");
  EXPECT_EQ(w.update(600, 1.0, 2), "");  // back above half the best: the streak ends
  EXPECT_EQ(w.update(NAN, 1.0, 2), "");  // ignored
  for (int i = 0; i < 2; ++i) EXPECT_EQ(w.update(500, 1.0, 1), "");
  EXPECT_EQ(w.update(500, 1.0, 1),
            "slow: 48% of this run's best speed; another process may be using a core: "
            "free a core or wait for the other process");
}

// A run that starts on a busy machine has no faster past to compare with: its threads' CPU share
// shows it (two threads, one core shared with another process: about 3/4).
TEST(SlowdownWatch, NotesAStarvedRunFromItsCpuShare) {
  SlowdownWatch w;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(w.update(5000, 0.61, 2), "") << i;
  EXPECT_EQ(w.update(5000, 0.61, 2),
            "busy: the 2 threads got 61% of their CPU time; another process is using a "
            "core: try --threads 1");
  EXPECT_EQ(w.update(5000, 0.95, 2), "");
}

TEST(SlowdownWatch, SteadyOrSlowlyVaryingRatesNeverNote) {
  SlowdownWatch w;
  // Token-pass rates that wander by a third at a full CPU share never note.
  for (int i = 0; i < 100; ++i) EXPECT_EQ(w.update(i % 3 == 0 ? 667 : 1000, 0.97, 2), "") << i;
}

}  // namespace
}  // namespace fbt
