// A batch-invariant matrix-vector product for decoding: y[b] = W · x[b] for a few rows b, each
// rounded the same however many rows are computed together.
#pragma once
#include <cstdint>

namespace fbt {

/// y[B,N] = x[B,K] · W[N,K]ᵀ, all row-major fp32 (a bias-free nn::Linear); row b of y starts at
/// y + b·ldy (ldy ≥ N: y may be a column block of a wider matrix).
///
/// Every y[b,n] is one dot product with a fixed summation order: 16 partial sums over k ≡ j mod 16
/// in increasing k, added pairwise (8+8, 4+4, 2+2, 1+1), compiled without floating-point
/// contraction. So y[b] is the same, bit for bit, at any B and for any other rows beside it — the
/// property continuous batching needs (a served sequence's output must not depend on its batch),
/// which BLAS does not give (OpenBLAS's sgemm picks other kernels as B grows; sgemv rounds unlike
/// sgemm). Input rows are taken four at a time for each weight row read, so the weights are
/// streamed from memory once per four rows, one weight row at a time.
/// Output rows n are split across libtorch's intra-op threads. The AVX2+FMA kernel (the 16
/// partial sums in two registers, each step a fused multiply-add) is chosen once at run time
/// where the CPU has it, else portable code that multiplies, then adds; the two round differently,
/// but one process only ever runs one of them.
void batch_invariant_linear(const float* x, int64_t B, int64_t K, const float* W, int64_t N, float* y, int64_t ldy);

/// Σ_i a[i]·b[i] over n floats: one of batch_invariant_linear's dot products (the same kernel,
/// summation order and rounding), on the calling thread. For short products inside other loops
/// (attention scores: a query head against a key, n = head size).
float dot_product(const float* a, const float* b, int64_t n);

/// The number of threads at::parallel_for actually runs on in the decode kernels' translation
/// units (the fewer of batch_gemv.cpp's and quant_gemv.cpp's): torch::get_num_threads() when they
/// were compiled with OpenMP (CMakeLists.txt), 1 when one was built without it (the pragma is then
/// silently ignored and its products run serially). `fbt bench` records it.
int decode_kernel_threads();

}  // namespace fbt
