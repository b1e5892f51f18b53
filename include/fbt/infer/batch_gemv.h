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

/// out[i] = Σ_k rows[i·K + k]·x[k] for i < n: batch_invariant_linear of x against the n rows [n, K]
/// (row-major) at B = 1, the same bits, on the calling thread (attention's scores: a query head
/// against n cached keys, K = head size). With AVX-512, tiles of four rows keep four independent
/// chains in flight (short rows from cache: the chains' latency, not the reads, is the bound).
void dot_products(const float* rows, int64_t n, int64_t K, const float* x, float* out);

/// y[j] += Σ_i weights[i]·rows[i·K + j] for j < K, over the n rows [n, K] (row-major) whose weight
/// is not 0 (rows with weight 0 are skipped, so they may hold anything, NaN included): for each j
/// one fused multiply-add chain in increasing i, y[j] = fma(weights[i], rows[i·K + j], y[j]), the
/// same bits on every ISA (std::fma in the portable code). On the calling thread. Attention's output:
/// softmax weights against the cached values, one call per run of allowed keys giving the same bits
/// as one call over all of them.
void weighted_row_sum(const float* rows, int64_t n, int64_t K, const float* weights, float* y);

/// The number of threads at::parallel_for actually runs on in the decode kernels' translation
/// units (the fewest of batch_gemv.cpp's, gemm_linear.cpp's and quant_gemv.cpp's): torch::get_num_threads() when they
/// were compiled with OpenMP (CMakeLists.txt), 1 when one was built without it (the pragma is then
/// silently ignored and its products run serially). `fbt bench` records it.
int decode_kernel_threads();

}  // namespace fbt
