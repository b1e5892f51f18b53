// The machine's memory bandwidth: the ceiling of a decode step, which reads every weight once.
#pragma once
#include <cstdint>

namespace fbt {

/// Memory bandwidth in bytes/s, the best of `reps` timed passes over arrays far larger than any
/// cache, on `threads` threads (each on its own contiguous slice; threads ≥ 1).
struct Bandwidth {
  double read =
      0;  ///< sum of an 8-byte-integer array, four streams per thread: bytes read / s (a decode step's ceiling)
  double triad = 0;  ///< STREAM's triad a[i] = b[i] + s·c[i] on floats: 12 bytes per i / s, as STREAM counts
                     ///< (the write-allocate read of a is not counted)
};

/// Measures read and triad bandwidth over arrays of `bytes_per_array` bytes each (default 256 MiB
/// read array, three arrays for the triad: McCalpin's STREAM asks for ≥ 4× the last-level cache).
/// Throws fbt::Error for threads < 1, reps < 1 or arrays too small to split across the threads.
Bandwidth measure_bandwidth(int threads, int reps, int64_t bytes_per_array = int64_t(256) << 20);

}  // namespace fbt
