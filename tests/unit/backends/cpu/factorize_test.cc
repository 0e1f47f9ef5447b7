// Linear-algebra kernels (factorize.cc) against properties that do not use
// the kernel's own algorithm: A inv(A) = I, residuals of solves, L L^T = A,
// closed-form determinants, eigenpairs and singular values checked by
// multiplying back, the exponential of matrices whose exponential is known.
#include <gtest/gtest.h>

#include <cmath>

#include "unit/backends/cpu/op_test_helpers.h"

namespace kiln::cpu {
namespace {

using ir::OpKind;
using namespace testing;

// Row-major n x n product of two row-major matrices given as value vectors.
std::vector<double> matmul(const std::vector<double>& a, const std::vector<double>& b, int64_t n, int64_t k,
                           int64_t m) {
  std::vector<double> c(static_cast<size_t>(n * m), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j)
      for (int64_t t = 0; t < k; ++t) c[i * m + j] += a[i * k + t] * b[t * m + j];
  return c;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

const std::vector<double> kA = {4, -2, 1, 3, 6, -4, 2, 1, 8};  // well conditioned, det = 4*(48+4)+2*(24+8)+(3-12) = 263

TEST(FactorizeKernels, InverseDeterminantAndSolveAgreeWithTheirDefinitions) {
  const Tensor a = make_tensor(DType::Float32, {3, 3}, kA);
  EXPECT_NEAR(run_op_tensor(OpKind::kLinalgDet, {{"A", a}}).item(), 263.0, 1e-3);
  auto slog = run_op(OpKind::kLinalgSlogdetEx, {{"A", a}}, 4);
  ASSERT_TRUE(slog.has_value()) << slog.status().message();
  EXPECT_EQ(output(*slog, 0).item(), 1.0);
  EXPECT_NEAR(output(*slog, 1).item(), std::log(263.0), 1e-6);
  EXPECT_EQ(output(*slog, 3).dtype(), DType::Int32);  // LAPACK's 1-based pivots, as PyTorch gives them

  const std::vector<double> inv = values(run_op_tensor(OpKind::kLinalgInv, {{"A", a}}));
  expect_near_all(matmul(kA, inv, 3, 3, 3), {1, 0, 0, 0, 1, 0, 0, 0, 1}, 1e-6);

  // A batch with a vector right-hand side (PyTorch's vector case) and a right solve X A = B.
  const Tensor b = make_tensor(DType::Float64, {3}, {1, 2, 3});
  const std::vector<double> x = values(run_op_tensor(OpKind::kLinalgSolve, {{"A", a.to(DType::Float64)}, {"B", b}}));
  expect_near_all(matmul(kA, x, 3, 3, 1), {1, 2, 3}, 1e-12);
  const Tensor rb = make_tensor(DType::Float64, {2, 3}, {1, 0, 0, 0, 1, 1});
  const std::vector<double> xr =
      values(run_op_tensor(OpKind::kLinalgSolve, {{"A", a.to(DType::Float64)}, {"B", rb}, {"left", B(false)}}));
  expect_near_all(matmul(xr, kA, 2, 3, 3), {1, 0, 0, 0, 1, 1}, 1e-12);

  // A singular matrix: det 0, logdet -inf, inv refused by name.
  const Tensor s = make_tensor(DType::Float32, {2, 2}, {1, 2, 2, 4});
  EXPECT_EQ(run_op_tensor(OpKind::kDet, {{"self", s}}).item(), 0.0);
  EXPECT_EQ(run_op_tensor(OpKind::kLogdet, {{"self", s}}).item(), -std::numeric_limits<double>::infinity());
  expect_error(OpKind::kLinalgInv, {{"A", s}}, "singular");
  // A negative determinant: logdet is NaN, slogdet's sign -1.
  const Tensor neg = make_tensor(DType::Float32, {2, 2}, {0, 1, 1, 0});
  EXPECT_TRUE(std::isnan(run_op_tensor(OpKind::kLogdet, {{"self", neg}}).item()));
}

TEST(FactorizeKernels, CholeskyFactorsSolvesAndInverts) {
  // A = M M^T + 3 I is symmetric positive definite.
  const std::vector<double> m = {1, 2, 0, -1, 1, 3, 2, 0, 1};
  std::vector<double> mt(9);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) mt[j * 3 + i] = m[i * 3 + j];
  std::vector<double> spd = matmul(m, mt, 3, 3, 3);
  for (int i = 0; i < 3; ++i) spd[i * 4] += 3;
  const Tensor a = make_tensor(DType::Float64, {3, 3}, spd);
  const std::vector<double> l = values(run_op_tensor(OpKind::kLinalgCholesky, {{"self", a}}));
  EXPECT_EQ(l[1], 0.0);  // lower triangular
  std::vector<double> lt(9);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) lt[j * 3 + i] = l[i * 3 + j];
  expect_near_all(matmul(l, lt, 3, 3, 3), spd, 1e-12);
  const std::vector<double> u = values(run_op_tensor(OpKind::kCholesky, {{"self", a}, {"upper", B(true)}}));
  expect_near_all(u, lt, 1e-12);  // U = L^T

  const Tensor lf = make_tensor(DType::Float64, {3, 3}, l);
  const Tensor rhs = make_tensor(DType::Float64, {3, 2}, {1, 0, 0, 1, 2, -1});
  const std::vector<double> x = values(run_op_tensor(OpKind::kCholeskySolve, {{"self", rhs}, {"input2", lf}}));
  expect_near_all(matmul(spd, x, 3, 3, 2), {1, 0, 0, 1, 2, -1}, 1e-12);
  const std::vector<double> inv = values(run_op_tensor(OpKind::kCholeskyInverse, {{"self", lf}}));
  expect_near_all(matmul(spd, inv, 3, 3, 3), {1, 0, 0, 0, 1, 0, 0, 0, 1}, 1e-12);

  // Not positive definite: refused, or reported in info by the _ex form.
  const Tensor bad = make_tensor(DType::Float32, {2, 2}, {1, 2, 2, 1});
  expect_error(OpKind::kLinalgCholesky, {{"self", bad}}, "not positive-definite");
  auto ex = run_op(OpKind::kLinalgCholeskyEx, {{"self", bad}}, 2);
  ASSERT_TRUE(ex.has_value());
  EXPECT_EQ(output(*ex, 1).item(), 2.0);
}

TEST(FactorizeKernels, SvdAndEighReconstructTheirMatrix) {
  const std::vector<double> a = {3, 1, 1, -1, 3, 1};  // 2 x 3, singular values sqrt(12), sqrt(10)
  auto svd = run_op(OpKind::kLinalgSvdEx, {{"A", make_tensor(DType::Float64, {2, 3}, a)}}, 3);
  ASSERT_TRUE(svd.has_value()) << svd.status().message();
  const std::vector<double> u = values(output(*svd, 0)), s = values(output(*svd, 1)), vh = values(output(*svd, 2));
  EXPECT_EQ(output(*svd, 2).sizes(), (Shape{2, 3}));
  EXPECT_NEAR(s[0], std::sqrt(12.0), 1e-12);
  EXPECT_NEAR(s[1], std::sqrt(10.0), 1e-12);
  std::vector<double> us = u;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) us[i * 2 + j] *= s[j];
  expect_near_all(matmul(us, vh, 2, 2, 3), a, 1e-12);
  expect_near_all(values(run_op_tensor(OpKind::kLinalgSvdvals, {{"A", make_tensor(DType::Float32, {2, 3}, a)}})),
                  {std::sqrt(12.0), std::sqrt(10.0)}, 1e-5);

  const std::vector<double> sym = {2, 1, 0, 1, 2, 0, 0, 0, 5};  // eigenvalues 1, 3, 5
  auto eig = run_op(OpKind::kLinalgEigh, {{"self", make_tensor(DType::Float64, {3, 3}, sym)}}, 2);
  ASSERT_TRUE(eig.has_value());
  const std::vector<double> w = values(output(*eig, 0)), v = values(output(*eig, 1));
  expect_near_all(w, {1, 3, 5}, 1e-12);
  for (int k = 0; k < 3; ++k) {
    const std::vector<double> col = {v[k], v[3 + k], v[6 + k]};
    expect_near_all(matmul(sym, col, 3, 3, 1), {w[k] * col[0], w[k] * col[1], w[k] * col[2]}, 1e-12);
  }
}

TEST(FactorizeKernels, RankPinvNormsAndConditionNumbers) {
  const Tensor rank1 = make_tensor(DType::Float32, {3, 2}, {1, 2, 2, 4, 3, 6});
  EXPECT_EQ(run_op_tensor(OpKind::kLinalgMatrixRankAtolRtolTensor, {{"input", rank1}}).item(), 1.0);
  // pinv of a rank-1 matrix u v^T is v u^T / (|u|^2 |v|^2).
  const std::vector<double> p = values(run_op_tensor(OpKind::kLinalgPinvAtolRtolTensor, {{"self", rank1}}));
  const std::vector<double> want = {1 / 70.0, 2 / 70.0, 3 / 70.0, 2 / 70.0, 4 / 70.0, 6 / 70.0};
  expect_near_all(p, want, 1e-6);
  // torch.pinverse(self, rcond) is the same inverse; it has no hermitian argument.
  expect_near_all(values(run_op_tensor(OpKind::kPinverse, {{"self", rank1}})), want, 1e-6);
  // rtol 1: the tolerance is the largest singular value itself, and PyTorch
  // keeps only values strictly above it, so every matrix's pinv is zero
  // (the threshold and the kept values must come from one decomposition).
  const Tensor full = make_tensor(DType::Float32, {3, 3}, kA);
  for (bool hermitian : {false, true}) {
    const Tensor m = hermitian ? make_tensor(DType::Float32, {2, 2}, {2, 1, 1, 3}) : full;
    const std::vector<double> z = values(run_op_tensor(
        OpKind::kLinalgPinvAtolRtolFloat, {{"self", m}, {"rtol", F(1.0)}, {"hermitian", B(hermitian)}}));
    expect_near_all(z, std::vector<double>(z.size(), 0.0), 0);
  }

  const Tensor a = make_tensor(DType::Float64, {2, 2}, {1, -2, 3, 4});
  EXPECT_NEAR(run_op_tensor(OpKind::kLinalgMatrixNormStrOrd, {{"self", a}}).item(), std::sqrt(30.0), 1e-12);
  EXPECT_NEAR(run_op_tensor(OpKind::kLinalgMatrixNorm, {{"self", a}, {"ord", F(1)}}).item(), 6.0, 1e-12);
  EXPECT_NEAR(run_op_tensor(OpKind::kLinalgMatrixNorm, {{"self", a}, {"ord", F(INFINITY)}}).item(), 7.0, 1e-12);
  EXPECT_NEAR(run_op_tensor(OpKind::kLinalgMatrixNorm, {{"self", a}, {"ord", F(-1)}}).item(), 4.0, 1e-12);
  // cond_1 = |A|_1 |A^-1|_1; A^-1 = [[4, 2], [-3, 1]] / 10.
  EXPECT_NEAR(run_op_tensor(OpKind::kLinalgCond, {{"self", a}, {"p", F(1)}}).item(), 6.0 * 0.7, 1e-12);
  const Tensor diag = make_tensor(DType::Float64, {2, 2}, {4, 0, 0, -0.5});
  EXPECT_NEAR(run_op_tensor(OpKind::kLinalgCond, {{"self", diag}}).item(), 8.0, 1e-12);
  EXPECT_NEAR(run_op_tensor(OpKind::kLinalgMatrixNormStrOrd, {{"self", diag}, {"ord", S("nuc")}}).item(), 4.5, 1e-12);
}

TEST(FactorizeKernels, MatrixExpPowerAndMultiDot) {
  // exp of a nilpotent matrix is I + N; of a diagonal one, exp of its entries.
  expect_near_all(
      values(run_op_tensor(OpKind::kLinalgMatrixExp, {{"self", make_tensor(DType::Float64, {2, 2}, {0, 5, 0, 0})}})),
      {1, 5, 0, 1}, 1e-12);
  expect_near_all(
      values(run_op_tensor(OpKind::kMatrixExp, {{"self", make_tensor(DType::Float64, {2, 2}, {3, 0, 0, -7})}})),
      {std::exp(3.0), 0, 0, std::exp(-7.0)}, 1e-10);
  // A rotation by t: exp([[0, -t], [t, 0]]) = [[cos t, -sin t], [sin t, cos t]], with a large t (scaling and squaring).
  const double t = 20.5;
  expect_near_all(
      values(run_op_tensor(OpKind::kLinalgMatrixExp, {{"self", make_tensor(DType::Float64, {2, 2}, {0, -t, t, 0})}})),
      {std::cos(t), -std::sin(t), std::sin(t), std::cos(t)}, 1e-9);

  const Tensor a = make_tensor(DType::Float64, {2, 2}, {1, 1, 0, 1});
  expect_near_all(values(run_op_tensor(OpKind::kLinalgMatrixPower, {{"self", a}, {"n", I(5)}})), {1, 5, 0, 1}, 0);
  expect_near_all(values(run_op_tensor(OpKind::kLinalgMatrixPower, {{"self", a}, {"n", I(-3)}})), {1, -3, 0, 1}, 1e-12);
  expect_near_all(values(run_op_tensor(OpKind::kLinalgMatrixPower, {{"self", a}, {"n", I(0)}})), {1, 0, 0, 1}, 0);

  const std::vector<Tensor> chain = {make_tensor(DType::Float32, {2}, {1, 2}), a.to(DType::Float32),
                                     make_tensor(DType::Float32, {2}, {3, 4})};
  const Tensor dot = run_op_tensor(OpKind::kLinalgMultiDot, {{"tensors", chain}});
  EXPECT_EQ(dot.dim(), 0);
  EXPECT_EQ(dot.item(), 3 + 3 * 4.0);  // [1, 3] . [3, 4]
}

TEST(FactorizeKernels, VanderDiagonalAndFftshift) {
  const Tensor x = make_tensor(DType::Int64, {3}, {2, -1, 3});
  expect_near_all(values(run_op_tensor(OpKind::kLinalgVander, {{"x", x}})), {1, 2, 4, 1, -1, 1, 1, 3, 9}, 0);
  const Tensor m = iota(DType::Float32, {2, 3, 4});
  expect_near_all(values(run_op_tensor(OpKind::kLinalgDiagonal, {{"A", m}, {"offset", I(1)}})), {1, 6, 11, 13, 18, 23},
                  0);
  expect_near_all(values(run_op_tensor(OpKind::kFftFftshift, {{"self", iota(DType::Float32, {5})}})), {3, 4, 0, 1, 2},
                  0);
  expect_near_all(values(run_op_tensor(OpKind::kFftIfftshift, {{"self", iota(DType::Float32, {5})}})), {2, 3, 4, 0, 1},
                  0);
}

}  // namespace
}  // namespace kiln::cpu
