#include "backends/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <limits>
#include <string>

namespace kiln::cpu {

namespace {

bool fits_blasint(int64_t v) { return v >= 0 && v <= static_cast<int64_t>(std::numeric_limits<blasint>::max()); }

template <typename T, typename Blas>
Status gemm_impl(Blas blas, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return Status::ok();
  if (k == 0 || alpha == T(0)) {
    // BLAS rejects a zero leading dimension for an empty operand; the result is just beta * C.
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        T& x = c[i * ldc + j];
        x = beta == T(0) ? T(0) : beta * x;
      }
    return Status::ok();
  }
  // Leading dimensions must be at least the stored row length (and at least 1).
  lda = std::max<int64_t>(lda, std::max<int64_t>(1, trans_a ? m : k));
  ldb = std::max<int64_t>(ldb, std::max<int64_t>(1, trans_b ? k : n));
  ldc = std::max<int64_t>(ldc, std::max<int64_t>(1, n));
  for (int64_t v : {m, n, k, lda, ldb, ldc})
    if (!fits_blasint(v))
      return unsupported("matrix product of size " + std::to_string(m) + "x" + std::to_string(k) + " by " +
                         std::to_string(k) + "x" + std::to_string(n) + " exceeds the BLAS integer range");
  blas(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
       static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
       static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
  return Status::ok();
}

}  // namespace

Status gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
            const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  return gemm_impl<float>(&cblas_sgemm, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

Status gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
            const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  return gemm_impl<double>(&cblas_dgemm, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace kiln::cpu
