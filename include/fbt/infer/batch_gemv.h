// A batch-invariant matrix product for decoding and prefill: y[b] = W · x[b] for rows b, each
// rounded the same however many rows are computed together.
#pragma once
#include <cstdint>
#include <vector>

namespace fbt {

/// y[B,N] = x[B,K] · W[N,K]ᵀ, all row-major fp32 (a bias-free nn::Linear); row b of y starts at
/// y + b·ldy (ldy ≥ N: y may be a column block of a wider matrix).
///
/// Every y[b,n] is one dot product with a fixed summation order: 16 partial sums over k ≡ j mod 16
/// in increasing k, added pairwise (8+8, 4+4, 2+2, 1+1), compiled without floating-point
/// contraction. So y[b] is the same, bit for bit, at any B and for any other rows beside it — the
/// property continuous batching needs (a served sequence's output must not depend on its batch),
/// which BLAS does not give (OpenBLAS's sgemm picks other kernels as B grows; sgemv rounds unlike
/// sgemm). At B = 1 the weights stream from memory one row at a time; above, with AVX-512, tiles of
/// 4 weight rows × 6 inputs keep 24 dot products in registers (the next tile
/// prefetched as one stream); with AVX2 one weight row meets four inputs at a time.
/// Output rows n are split across libtorch's intra-op threads. The AVX-512 and AVX2+FMA kernels
/// (the 16 partial sums in one or two registers, each step a fused multiply-add; bit-identical to
/// each other) are chosen at run time where the CPU has them, else portable code that multiplies,
/// then adds; the portable code rounds differently, but one process only ever runs one of them.
void batch_invariant_linear(const float* x, int64_t B, int64_t K, const float* W, int64_t N, float* y, int64_t ldy);

/// One of the row blocks [N, K] (row-major) of a weight stacked from several tensors.
struct WeightPart {
  const float* W;
  int64_t N;
};
/// batch_invariant_linear of a weight stacked from `parts` (not contiguous with each other): part i
/// fills columns [Σ_{j<i} N_j, + N_i) of y, the same bits as one call per part, with one split of all
/// the rows across the threads (one fork and join, not one per part: a decode step's q/k/v/gate).
void batch_invariant_linear(const float* x, int64_t B, int64_t K, const std::vector<WeightPart>& parts, float* y,
                            int64_t ldy);

/// Σ_i a[i]·b[i] over n floats: one of batch_invariant_linear's dot products (the same kernel,
/// summation order and rounding), on the calling thread. For short products inside other loops
/// (attention scores: a query head against a key, n = head size).
float dot_product(const float* a, const float* b, int64_t n);

/// The number of threads at::parallel_for actually runs on in the decode kernels' translation
/// units (the fewest of batch_gemv.cpp's, gemm_linear.cpp's and quant_gemv.cpp's): torch::get_num_threads() when they
/// were compiled with OpenMP (CMakeLists.txt), 1 when one was built without it (the pragma is then
/// silently ignored and its products run serially). `fbt bench` records it.
int decode_kernel_threads();

}  // namespace fbt
