// gemm_linear: y = x · Wᵀ for many input rows (prefill), in the outer-product form of a GEMM
// microkernel: each output one chain of fused multiply-adds, with no reduction across lanes.
#pragma once
#include <cstdint>
#include <vector>

#include "fbt/infer/batch_gemv.h"

namespace fbt {

/// y[B,N] = x[B,K] · Wᵀ, W stacked from `parts` (row-major [N_i, K] blocks, part i filling columns
/// [Σ_{j<i} N_j, + N_i) of y); x row-major fp32, row b of y at y + b·ldy (ldy ≥ N).
///
/// Every y[b,n] is one sequential chain y = fma(W[n,k], x[b,k], y) over k = 0, 1, …, K−1 from
/// y = 0, so its bits depend neither on B, nor on the other rows beside it, nor on the kernel
/// (AVX-512, AVX2+FMA and portable std::fma round alike) — but they are not batch_invariant_linear's
/// (16 partial sums added pairwise), so a caller that needs a prompt's rows to equal the same
/// positions decoded one at a time uses that instead.
///
/// The inputs are first packed K-major in blocks of 16 (x is read once); then tiles of 12 weight
/// rows × 32 inputs (AVX-512; 6 × 16 with AVX2) keep their 24 (12) sums in registers while each
/// step k broadcasts the 12 rows' W[n,k] against two vectors of 16 inputs' x[·,k] — per fused
/// multiply-add one sixth of a vector load, not the dot-product form's half (batch_gemv.h; measured
/// at B = 64 on Llama-134M's products, one Xeon core: ~150–165 GFLOP/s against ~95–130; the
/// standard GEMM register blocking, e.g. Goto & van de Geijn, ACM TOMS 34(3), 2008). Tiles of
/// output rows are split across libtorch's intra-op threads. Throws nothing; B, K ≥ 0.
void gemm_linear(const float* x, int64_t B, int64_t K, const std::vector<WeightPart>& parts, float* y, int64_t ldy);

/// at::parallel_for's thread count in this kernel's translation unit (see decode_kernel_threads()).
int gemm_kernel_threads();

/// True where gemm_linear runs a SIMD kernel (AVX-512, or AVX2 with FMA); elsewhere it is portable
/// code, correct but slow (std::fma per multiply-add).
bool gemm_linear_vectorised();

}  // namespace fbt
