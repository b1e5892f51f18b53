// Peak memory: /proc/self/status VmHWM on the CPU, the CUDA caching allocator's statistics on GPUs.
#include "fbt/util/memory_stats.h"

#include <fstream>
#include <string>

#include "fbt/util/cpu_allocator.h"

#ifdef FBT_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace fbt {
namespace {

/// The value of a "Field:  1234 kB" line of /proc/self/status in bytes, -1 if absent.
int64_t status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(field.size())) * 1024;
  }
  return -1;
}

}  // namespace

void reset_peak_memory(const c10::Device& device) {
  if (device.is_cuda()) {
#ifdef FBT_WITH_CUDA
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? 0 : device.index());
#endif
    return;
  }
  release_free_cpu_blocks();                      // first: the window counts what is in use, not glibc's cache
  std::ofstream("/proc/self/clear_refs") << "5";  // "5": reset the peak RSS to the current RSS
}

int64_t peak_memory_bytes(const c10::Device& device) {
  if (device.is_cuda()) {
#ifdef FBT_WITH_CUDA
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
    return stats.allocated_bytes[0].peak;  // index 0: StatType::AGGREGATE
#else
    return -1;
#endif
  }
  return status_bytes("VmHWM:");
}

int64_t resident_bytes() { return status_bytes("VmRSS:"); }

int64_t anonymous_resident_bytes() {
  release_free_cpu_blocks();  // freed heap pages that glibc still holds are not in use
  return status_bytes("RssAnon:");
}

}  // namespace fbt
