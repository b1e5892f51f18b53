// The logistic sigmoid over arrays, for the CPU decoder's gates (SwiGLU, the fusion, attention's).
#pragma once
#include <cstdint>

namespace fbt {

/// out[i] = 1 / (1 + exp(−x[i])) for i < n (out may be x). Where the CPU has AVX2, exp is glibc's
/// vector expf on 8 values at a time (libmvec's _ZGVdN8v_expf, the variant GCC's vectoriser calls
/// for expf; glibc 2.22's NEWS: accurate to 4 ulp), a last
/// n mod 8 values padded into one more call, so a value's result does not depend on its position or
/// on n; elsewhere std::exp. One process only ever runs one of the two. exp(−x) overflows to +inf
/// for x below about −88 (result 0) and underflows to 0 above about 104 (result 1); NaN stays NaN.
void sigmoid(const float* x, int64_t n, float* out);

}  // namespace fbt
