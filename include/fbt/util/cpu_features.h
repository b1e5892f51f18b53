// Run-time CPU feature dispatch of the hand-written SIMD kernels (the default build targets any x86-64).
#pragma once

namespace fbt {

/// True where the CPU has AVX2, FMA and F16C (x86-64-v3: Intel Haswell, AMD Excavator and
/// later): the kernels compiled with __attribute__((target("avx2,fma,f16c"))) may run. Checked
/// once (GCC's __builtin_cpu_supports, CPUID); a process never switches kernels, so the rounding
/// of a product never changes within one run.
inline bool cpu_has_avx2() {
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return has;
}

/// True where the CPU and the OS run AVX-512F (its 16-lane registers; GCC's check includes the
/// OS's XSAVE support of them): the kernels compiled with target("avx512f") may run.
inline bool cpu_has_avx512() {
  static const bool has = cpu_has_avx2() && __builtin_cpu_supports("avx512f");
  return has;
}

}  // namespace fbt
