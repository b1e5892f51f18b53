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

/// True where the CPU also has AVX-512 VL and VNNI (Intel Cascade Lake, AMD Zen 4 and later): the
/// int8 kernels compiled with target("avx512vl,avx512vnni") may run vpdpbusd on 8-lane registers.
inline bool cpu_has_avx512_vnni() {
  static const bool has =
      cpu_has_avx512() && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return has;
}

}  // namespace fbt
