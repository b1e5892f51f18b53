// How many threads at::parallel_for reaches in the translation unit that includes this header.
#pragma once
#include <atomic>
#include <cstdint>

#include <ATen/Parallel.h>

namespace fbt::detail {

/// The number of distinct threads at::parallel_for runs a loop of 64 tasks per intra-op thread on,
/// compiled into the including file (static: one copy per translation unit, so each kernel file
/// reports its own OpenMP flags): torch::get_num_threads() with -fopenmp, 1 without it.
static inline int parallel_for_threads_here() {
  std::atomic<int> reached{1};
  at::parallel_for(0, 64 * int64_t(at::get_num_threads()), 1, [&](int64_t, int64_t) {
    const int seen = at::get_thread_num() + 1;
    for (int old = reached.load(); seen > old && !reached.compare_exchange_weak(old, seen);) {}
  });
  return reached.load();
}

}  // namespace fbt::detail
