// sigmoid: glibc's vector expf (libmvec) where the CPU has AVX2, else std::exp.
#include "fbt/infer/sigmoid.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "fbt/util/cpu_features.h"

// glibc's libmvec (x86_64, since 2.22; linked through libm.so's AS_NEEDED group): expf on 8 floats
// in AVX2 registers, the x86_64 vector function ABI's name for `expf` with `simdlen(8)`.
extern "C" __m256 _ZGVdN8v_expf(__m256 x);

namespace fbt {
namespace {

/// 1 / (1 + exp(−v)) on 8 lanes.
__attribute__((target("avx2,fma"))) inline __m256 sigmoid8(__m256 v) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = _ZGVdN8v_expf(_mm256_xor_ps(v, _mm256_set1_ps(-0.0f)));  // exp(−v): the sign bit flipped
  return _mm256_div_ps(one, _mm256_add_ps(one, e));
}

__attribute__((target("avx2,fma"))) void sigmoid_avx2(const float* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, sigmoid8(_mm256_loadu_ps(x + i)));
  if (i == n) return;
  alignas(32) float tail[8] = {};
  std::copy(x + i, x + n, tail);
  _mm256_store_ps(tail, sigmoid8(_mm256_load_ps(tail)));
  std::copy(tail, tail + (n - i), out + i);
}

}  // namespace

void sigmoid(const float* x, int64_t n, float* out) {
  if (cpu_has_avx2()) return sigmoid_avx2(x, n, out);
  for (int64_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

}  // namespace fbt
