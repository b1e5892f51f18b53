// batch_invariant_linear: fixed-order dot products, several input rows per weight row.
// Compiled with -ffp-contract=off (CMakeLists.txt): a fused multiply-add would round differently.
#include "fbt/infer/batch_gemv.h"

#include <algorithm>

#include <ATen/Parallel.h>

namespace fbt {
namespace {

constexpr int64_t kLanes = 16;  // partial sums per dot product

/// out[r] = Σ_k w[k]·xs[r][k] for R rows, in the fixed order of batch_gemv.h.
template <int R>
inline void dots(const float* w, const float* const* xs, int64_t K, float* out) {
  float acc[R][kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes)
    for (int r = 0; r < R; ++r)
      for (int64_t j = 0; j < kLanes; ++j) acc[r][j] += w[k + j] * xs[r][k + j];
  for (int r = 0; r < R; ++r)
    for (int64_t j = 0; k + j < K; ++j) acc[r][j] += w[k + j] * xs[r][k + j];
  for (int r = 0; r < R; ++r) {
    float* a = acc[r];
    for (int64_t half = kLanes / 2; half >= 1; half /= 2)
      for (int64_t j = 0; j < half; ++j) a[j] += a[j + half];
    out[r] = a[0];
  }
}

__attribute__((target_clones("arch=x86-64-v3", "default")))
void rows(const float* x, int64_t B, int64_t K, const float* W, int64_t N, float* y, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* w = W + n * K;
    int64_t b = 0;
    for (; b + 4 <= B; b += 4) {
      const float* xs[4] = {x + b * K, x + (b + 1) * K, x + (b + 2) * K, x + (b + 3) * K};
      float out[4];
      dots<4>(w, xs, K, out);
      for (int r = 0; r < 4; ++r) y[(b + r) * N + n] = out[r];
    }
    for (; b < B; ++b) {
      const float* xs[1] = {x + b * K};
      dots<1>(w, xs, K, y + b * N + n);
    }
  }
}

}  // namespace

void batch_invariant_linear(const float* x, int64_t B, int64_t K, const float* W, int64_t N, float* y) {
  // Grain: at least ~64 KiB of weights per task, so small products stay on one thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(K, 1));
  at::parallel_for(0, N, grain, [&](int64_t n0, int64_t n1) { rows(x, B, K, W, N, y, n0, n1); });
}

}  // namespace fbt
