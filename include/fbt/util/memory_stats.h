// Peak memory of this process: resident set size on the CPU, allocator peak on CUDA.
#pragma once
#include <cstdint>

#include <c10/core/Device.h>

namespace fbt {

/// Starts a new peak-memory window for `device`. CPU: returns the heap's free pages to the OS
/// (glibc malloc_trim, so memory freed earlier — e.g. building the model — is not counted), then
/// resets the kernel's peak RSS (VmHWM) by writing 5 to /proc/self/clear_refs (Linux ≥ 4.0; a
/// no-op where that file is not writable). CUDA: resets the caching allocator's peak statistics of the device.
void reset_peak_memory(const c10::Device& device);

/// Peak memory in bytes since the last reset_peak_memory (or since the start of the process).
/// CPU: the peak resident set size of the whole process (VmHWM, which includes the weights
/// and the libraries). CUDA: the caching allocator's peak allocated bytes on the device.
/// Returns -1 when the value cannot be read (CUDA stats in a build without CUDA).
int64_t peak_memory_bytes(const c10::Device& device);

/// The resident set size of the process now (VmRSS of /proc/self/status) in bytes, -1 where it
/// cannot be read. At start-up it is the runtime's own footprint (libtorch's code and data).
int64_t resident_bytes();

/// The anonymous part of it now (RssAnon: the heap and other private memory — tensors, caches —
/// without the pages of mapped files such as the libraries' code) in bytes, -1 where it cannot be read.
/// Hands the heap's free pages back first (malloc_trim), so it counts what is in use.
int64_t anonymous_resident_bytes();

}  // namespace fbt
