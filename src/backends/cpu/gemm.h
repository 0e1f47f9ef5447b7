// Row-major matrix products over OpenBLAS, shared by the linear-algebra,
// convolution and attention kernels.
#pragma once

#include <cstdint>

#include "kiln/status.h"

namespace kiln::cpu {

// C = alpha * op(A) * op(B) + beta * C, all row-major.
//   trans_a / trans_b: op(X) is X transposed when true.
//   m, n, k: op(A) is m x k, op(B) is k x n, C is m x n.
//   a, lda: A and its row stride (elements between rows as stored).
//   b, ldb: B and its row stride.
//   c, ldc: C and its row stride; with beta == 0, C's prior contents are ignored (NaN is not propagated).
// Fails (kUnsupported) only when a size or stride does not fit OpenBLAS's integer type.
Status gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
            const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
Status gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
            const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

}  // namespace kiln::cpu
