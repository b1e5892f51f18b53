// keep_freed_cpu_blocks, release_free_cpu_blocks: glibc mallopt thresholds and malloc_trim (see cpu_allocator.h).
#include "fbt/util/cpu_allocator.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace fbt {

bool keep_freed_cpu_blocks() {
#if defined(__GLIBC__)
  constexpr int kOneGiB = 1 << 30;
  return mallopt(M_MMAP_THRESHOLD, kOneGiB) == 1 && mallopt(M_TRIM_THRESHOLD, kOneGiB) == 1;
#else
  return false;
#endif
}

void release_free_cpu_blocks() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace fbt
