// Recognising an allocation failure, so that the code that sized the allocation can say which
// settings to lower instead of passing on the allocator's bare message.
#pragma once
#include <exception>
#include <new>
#include <string>

namespace fbt {

/// True if `e` is an allocation failure: std::bad_alloc, or a torch allocator's error (CPU:
/// "DefaultCPUAllocator: can't allocate memory"; CUDA: "CUDA out of memory").
inline bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return true;
  const std::string what = e.what();
  return what.find("can't allocate memory") != std::string::npos || what.find("out of memory") != std::string::npos;
}

/// The first line of an allocator's message (c10 errors append a backtrace in some builds).
inline std::string first_line(const std::exception& e) {
  const std::string what = e.what();
  return what.substr(0, what.find('\n'));
}

}  // namespace fbt
