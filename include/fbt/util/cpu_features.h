// Run-time CPU feature dispatch of the hand-written SIMD kernels (the default build targets any x86-64).
#pragma once
#include <cstdlib>
#include <string>

#include "fbt/util/error.h"

namespace fbt {

/// The widest instruction set the kernels may use.
enum class CpuLevel { Portable, Avx2, Avx512 };

/// The cap the environment variable FBT_CPU puts on the kernels' instruction set: "avx512" (or
/// unset: whatever the CPU has), "avx2" (no AVX-512) or "portable" (no SIMD), to run the kernels
/// (and the rounding) of another machine, or to test them. Read once; throws fbt::Error naming
/// FBT_CPU for another value.
inline CpuLevel cpu_level_cap() {
  static const CpuLevel cap = [] {
    const char* v = std::getenv("FBT_CPU");
    const std::string value = v ? v : "avx512";
    if (value == "avx512") return CpuLevel::Avx512;
    if (value == "avx2") return CpuLevel::Avx2;
    if (value == "portable") return CpuLevel::Portable;
    throw Error("environment variable FBT_CPU is '" + value + "' (expected avx512, avx2 or portable)");
  }();
  return cap;
}

/// True where the CPU has AVX2, FMA and F16C (x86-64-v3: Intel Haswell, AMD Excavator and
/// later) and FBT_CPU allows it: the kernels compiled with
/// __attribute__((target("avx2,fma,f16c"))) may run. Checked once (GCC's __builtin_cpu_supports,
/// CPUID); a process never switches kernels, so the rounding of a product never changes within
/// one run.
inline bool cpu_has_avx2() {
  static const bool has = cpu_level_cap() >= CpuLevel::Avx2 && __builtin_cpu_supports("avx2") &&
                          __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return has;
}

/// True where the CPU and the OS run AVX-512F (its 16-lane registers; GCC's check includes the
/// OS's XSAVE support of them) and FBT_CPU allows it: the kernels compiled with
/// target("avx512f") may run.
inline bool cpu_has_avx512() {
  static const bool has = cpu_has_avx2() && cpu_level_cap() >= CpuLevel::Avx512 && __builtin_cpu_supports("avx512f");
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
