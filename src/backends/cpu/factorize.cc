// Linear algebra beyond products: LU (det, slogdet, inv, solve, lu_solve),
// Cholesky (and its solve and inverse), triangular solves, the SVD (svdvals,
// pinv, matrix_rank, cond, matrix norms), the symmetric eigendecomposition,
// Householder products, LDL solves, the matrix exponential and the composites
// export writes over them (multi_dot, matrix_power, vander, tensorinv,
// tensorsolve, linalg.diagonal, fftshift).
//
// Every matrix is computed in float64, column-major, with OpenBLAS's LAPACK
// (the routines of it that need no Fortran runtime) and rounded once to the
// result's dtype: float32 results carry PyTorch's float32 rounding error at
// most, not kiln's. Batch dims broadcast as in PyTorch. Pivots are LAPACK's
// (1-based int32), as PyTorch gives them.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/kernel.h"

extern "C" {
// LAPACK, Fortran calling convention: every argument by address; the trailing
// size_t arguments are the hidden lengths of character arguments.
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void dgetrs_(const char* trans, const int* n, const int* nrhs, const double* a, const int* lda, const int* ipiv,
             double* b, const int* ldb, int* info, size_t);
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, size_t);
void dpotrs_(const char* uplo, const int* n, const int* nrhs, const double* a, const int* lda, double* b,
             const int* ldb, int* info, size_t);
void dpotri_(const char* uplo, const int* n, double* a, const int* lda, int* info, size_t);
void dsyev_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w, double* work,
            const int* lwork, int* info, size_t, size_t);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau, double* work,
             const int* lwork, int* info);
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s, double* u,
             const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork, int* iwork, int* info,
             size_t);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work, const int* lwork,
             int* info);
void dsytrf_(const char* uplo, const int* n, double* a, const int* lda, int* ipiv, double* work, const int* lwork,
             int* info, size_t);
void dsytrs_(const char* uplo, const int* n, const int* nrhs, const double* a, const int* lda, const int* ipiv,
             double* b, const int* ldb, int* info, size_t);
}

namespace kiln::cpu {

namespace {

// One matrix, column-major float64.
struct Mat {
  int r = 0, c = 0;
  std::vector<double> v;
  Mat() = default;
  Mat(int rows, int cols) : r(rows), c(cols), v(static_cast<size_t>(rows) * static_cast<size_t>(cols), 0.0) {}
  double& operator()(int i, int j) { return v[static_cast<size_t>(i) + static_cast<size_t>(j) * r]; }
  double operator()(int i, int j) const { return v[static_cast<size_t>(i) + static_cast<size_t>(j) * r]; }
  double* data() { return v.data(); }
  const double* data() const { return v.data(); }
  int ld() const { return std::max(r, 1); }
  static Mat identity(int n) {
    Mat m(n, n);
    for (int i = 0; i < n; ++i) m(i, i) = 1;
    return m;
  }
  Mat transposed() const {
    Mat t(c, r);
    for (int i = 0; i < r; ++i)
      for (int j = 0; j < c; ++j) t(j, i) = (*this)(i, j);
    return t;
  }
};

// a x b (op = transpose where asked), by OpenBLAS.
Mat product(const Mat& a, const Mat& b, bool ta = false, bool tb = false) {
  const int m = ta ? a.c : a.r, k = ta ? a.r : a.c, n = tb ? b.r : b.c;
  Mat out(m, n);
  if (m == 0 || n == 0) return out;
  if (k == 0) return out;
  cblas_dgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0, a.data(),
              a.ld(), b.data(), b.ld(), 0.0, out.data(), out.ld());
  return out;
}

// float64 when either is, else float32 (the only dtypes these kernels take).
DType wider(DType a, DType b) { return a == DType::Float64 || b == DType::Float64 ? DType::Float64 : DType::Float32; }

int64_t count_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape concat(Shape a, std::initializer_list<int64_t> tail) {
  a.insert(a.end(), tail);
  return a;
}

// The matrices of a [..., rows, cols] tensor (its batch dims first broadcast
// to `batch` when given).
struct Mats {
  Shape batch;
  std::vector<Mat> m;
};

Mats read_mats(const Tensor& t, std::optional<Shape> batch = std::nullopt) {
  Mats out;
  const int64_t r = t.size(-2), c = t.size(-1);
  out.batch = batch ? *batch : Shape(t.sizes().begin(), t.sizes().end() - 2);
  const Shape full = concat(out.batch, {r, c});
  const Tensor d = cast_copy(batch ? expand_to(t, full) : t, DType::Float64);
  const double* p = d.data<double>();
  const int64_t n = count_of(out.batch);
  out.m.reserve(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; ++b) {
    Mat mat(static_cast<int>(r), static_cast<int>(c));
    for (int i = 0; i < r; ++i)
      for (int j = 0; j < c; ++j) mat(i, j) = p[(b * r + i) * c + j];
    out.m.push_back(std::move(mat));
  }
  return out;
}

// [batch..., rows, cols] in `dtype` (every matrix has one shape; `rows`/`cols`
// give it when the batch is empty).
Tensor write_mats(const Shape& batch, const std::vector<Mat>& ms, int64_t rows, int64_t cols, DType dtype) {
  Tensor d = Tensor::zeros(DType::Float64, concat(batch, {rows, cols}));
  double* p = d.data<double>();
  for (size_t b = 0; b < ms.size(); ++b)
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) p[(static_cast<int64_t>(b) * rows + i) * cols + j] = ms[b](i, j);
  return d.to(dtype);
}

// [batch..., n] from one vector per matrix.
Tensor write_vecs(const Shape& batch, const std::vector<std::vector<double>>& vs, int64_t n, DType dtype) {
  Tensor d = Tensor::zeros(DType::Float64, concat(batch, {n}));
  double* p = d.data<double>();
  for (size_t b = 0; b < vs.size(); ++b)
    for (int64_t i = 0; i < n; ++i) p[static_cast<int64_t>(b) * n + i] = vs[b][static_cast<size_t>(i)];
  return d.to(dtype);
}

Tensor write_scalars(const Shape& batch, const std::vector<double>& xs, DType dtype) {
  Tensor d = Tensor::zeros(DType::Float64, batch);
  std::copy(xs.begin(), xs.end(), d.data<double>());
  return d.to(dtype);
}

Tensor write_ints(const Shape& shape, const std::vector<int>& xs, DType dtype = DType::Int32) {
  Tensor d = Tensor::zeros(DType::Int32, shape);
  std::copy(xs.begin(), xs.end(), d.data<int32_t>());
  return d.to(dtype);
}

// ---- factorizations of one matrix

struct Lu {
  Mat lu;
  std::vector<int> piv;  // 1-based, min(r, c) of them
  int info = 0;          // > 0: U(info, info) is exactly zero
};

Lu lu_factor(Mat a) {
  Lu f;
  const int k = std::min(a.r, a.c);
  f.piv.assign(static_cast<size_t>(k), 0);
  if (k > 0) dgetrf_(&a.r, &a.c, a.data(), &a.r, f.piv.data(), &f.info);
  f.lu = std::move(a);
  return f;
}

// Solves op(A) X = B with A's LU factors (trans: A^T X = B).
Mat lu_apply(const Mat& lu, const std::vector<int>& piv, Mat b, bool trans) {
  int info = 0;
  if (lu.r > 0 && b.c > 0)
    dgetrs_(trans ? "T" : "N", &lu.r, &b.c, lu.data(), &lu.r, piv.data(), b.data(), &b.r, &info, 1);
  return b;
}

double lu_det(const Lu& f) {
  double det = 1;
  for (int i = 0; i < f.lu.r; ++i) {
    det *= f.lu(i, i);
    if (f.piv[static_cast<size_t>(i)] != i + 1) det = -det;
  }
  return det;
}

// The LU factors of every matrix of a batch.
std::vector<Lu> lu_factors(const Mats& ms) {
  std::vector<Lu> fs;
  for (const Mat& m : ms.m) fs.push_back(lu_factor(m));
  return fs;
}

// The inverse; info > 0 when singular (then the values are inf/nan, as from
// solving with a zero pivot).
Mat inverse(const Mat& a, int* info) {
  Lu f = lu_factor(a);
  if (info) *info = f.info;
  if (f.info > 0) {
    Mat out(a.r, a.c);
    std::fill(out.v.begin(), out.v.end(), std::numeric_limits<double>::quiet_NaN());
    return out;
  }
  return lu_apply(f.lu, f.piv, Mat::identity(a.r), false);
}

// Cholesky factor in place (the other triangle zeroed); returns LAPACK's info.
int cholesky_in_place(Mat& a, bool upper) {
  int info = 0;
  if (a.r > 0) dpotrf_(upper ? "U" : "L", &a.r, a.data(), &a.r, &info, 1);
  for (int j = 0; j < a.c; ++j)
    for (int i = 0; i < a.r; ++i)
      if (upper ? i > j : i < j) a(i, j) = 0;
  return info;
}

struct Svd {
  Mat u;                  // r x k (full: r x r)
  std::vector<double> s;  // k = min(r, c), descending
  Mat vh;                 // k x c (full: c x c)
};

// LAPACK's divide-and-conquer SVD (dgesdd), the routine PyTorch calls on the
// CPU, so that singular vectors come out with its signs.
Svd svd(const Mat& a_in, bool uv, bool full) {
  Mat a = a_in;
  const int m = a.r, n = a.c, k = std::min(m, n);
  Svd out;
  out.s.assign(static_cast<size_t>(k), 0.0);
  const int ucols = full ? m : k, vrows = full ? n : k;
  if (uv) {
    out.u = Mat(m, ucols);
    out.vh = Mat(vrows, n);
  }
  if (k == 0) {
    if (uv && full) {
      out.u = Mat::identity(m);
      out.vh = Mat::identity(n);
    }
    return out;
  }
  const char* job = !uv ? "N" : (full ? "A" : "S");
  int info = 0, lwork = -1;
  double query = 0, dummy = 0;
  std::vector<int> iwork(static_cast<size_t>(8 * k));
  const int ldu = std::max(m, 1), ldvt = std::max(vrows, 1);
  double* u = uv ? out.u.data() : &dummy;
  double* vt = uv ? out.vh.data() : &dummy;
  dgesdd_(job, &m, &n, a.data(), &m, out.s.data(), u, &ldu, vt, &ldvt, &query, &lwork, iwork.data(), &info, 1);
  lwork = std::max(static_cast<int>(query), 1);
  std::vector<double> work(static_cast<size_t>(lwork));
  dgesdd_(job, &m, &n, a.data(), &m, out.s.data(), u, &ldu, vt, &ldvt, work.data(), &lwork, iwork.data(), &info, 1);
  return out;
}

struct Eigh {
  std::vector<double> w;  // ascending
  Mat v;                  // columns are the eigenvectors
};

Eigh eigh(Mat a, bool upper, bool vectors) {
  Eigh out;
  const int n = a.r;
  out.w.assign(static_cast<size_t>(n), 0.0);
  if (n > 0) {
    int info = 0, lwork = std::max(1, 3 * n) * 8;
    std::vector<double> work(static_cast<size_t>(lwork));
    dsyev_(vectors ? "V" : "N", upper ? "U" : "L", &n, a.data(), &n, out.w.data(), work.data(), &lwork, &info, 1, 1);
  }
  if (vectors) out.v = std::move(a);
  return out;
}

double matrix_norm_of(const Mat& a, double ord, bool fro, bool nuc) {
  if (fro) {
    double s = 0;
    for (double x : a.v) s += x * x;
    return std::sqrt(s);
  }
  if (nuc || std::abs(ord) == 2) {
    const std::vector<double> s = svd(a, false, false).s;
    if (nuc) return std::accumulate(s.begin(), s.end(), 0.0);
    if (s.empty()) return 0;
    return ord > 0 ? s.front() : s.back();
  }
  // ord 1 / -1: the largest / smallest column sum of |a|; inf / -inf: rows.
  const bool cols = std::abs(ord) == 1;
  const int outer = cols ? a.c : a.r, inner = cols ? a.r : a.c;
  double best = ord > 0 ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  for (int o = 0; o < outer; ++o) {
    double s = 0;
    for (int i = 0; i < inner; ++i) s += std::abs(cols ? a(i, o) : a(o, i));
    best = ord > 0 ? std::max(best, s) : std::min(best, s);
  }
  return best;
}

// exp(a): scaled so its 1-norm is at most 1/2, a Taylor series to double
// precision, squared back.
Mat matrix_exp(const Mat& a) {
  const int n = a.r;
  const double norm = n == 0 ? 0 : matrix_norm_of(a, 1, false, false);
  int s = 0;
  if (norm > 0.5) s = static_cast<int>(std::ceil(std::log2(norm / 0.5)));
  if (!std::isfinite(norm)) s = 0;
  Mat x = a;
  const double scale = std::ldexp(1.0, -s);
  for (double& v : x.v) v *= scale;
  Mat result = Mat::identity(n), term = Mat::identity(n);
  for (int k = 1; k <= 30; ++k) {
    term = product(term, x);
    for (double& v : term.v) v /= k;
    double mx = 0;
    for (size_t i = 0; i < term.v.size(); ++i) {
      result.v[i] += term.v[i];
      mx = std::max(mx, std::abs(term.v[i]));
    }
    if (mx < 1e-18) break;
  }
  for (int i = 0; i < s; ++i) result = product(result, result);
  return result;
}

// ---- argument helpers

Expected<Tensor> floating_matrix(KernelArgs& a, std::string_view name, int64_t min_rank = 2) {
  KILN_ASSIGN_OR_RETURN(Tensor t, a.tensor(name));
  if (t.dtype() != DType::Float32 && t.dtype() != DType::Float64)
    return a.error(std::string(name) + " must be float32 or float64 for linear algebra, got " + t.type_string());
  if (t.dim() < min_rank)
    return a.error(std::string(name) + " must have at least " + std::to_string(min_rank) + " dims, got " +
                   t.type_string());
  return t;
}

Status square(KernelArgs& a, const Tensor& t, std::string_view name) {
  if (t.size(-1) != t.size(-2))
    return a.error(std::string(name) + " must be a batch of square matrices, got " + t.type_string());
  return Status::ok();
}

Shape batch_of(const Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end() - 2); }

Expected<Shape> broadcast_batch(KernelArgs& a, const Tensor& x, const Tensor& y) {
  const Shape bx = batch_of(x), by = batch_of(y);
  std::optional<Shape> b = broadcast_shapes(bx, by);
  if (!b) return a.error("batch dims of " + x.type_string() + " and " + y.type_string() + " do not broadcast");
  return *b;
}

// ---- LU family

// Outputs `first` and `first + 1`, when the node has them: the LU matrices
// (n x n) and their pivots.
void set_lu_outputs(KernelArgs& a, const Shape& batch, const std::vector<Lu>& fs, size_t first, int64_t n,
                    DType dtype) {
  if (a.node().outputs.size() <= first) return;
  std::vector<Mat> lus;
  std::vector<int> pivs;
  for (const Lu& f : fs) {
    lus.push_back(f.lu);
    pivs.insert(pivs.end(), f.piv.begin(), f.piv.end());
  }
  a.set_output(first, write_mats(batch, lus, n, n, dtype));
  a.set_output(first + 1, write_ints(concat(batch, {n}), pivs));
}

// _linalg_det(A) -> (det, LU, pivots); linalg_det(A); det(self)
Status det_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, a.has("A") ? "A" : "self"));
  KILN_TRY(square(a, t, "A"));
  const Mats ms = read_mats(t);
  const std::vector<Lu> fs = lu_factors(ms);
  std::vector<double> dets;
  // A zero pivot (info > 0) is on U's diagonal: the product is zero.
  for (const Lu& f : fs) dets.push_back(lu_det(f));
  a.set_output(0, write_scalars(ms.batch, dets, t.dtype()));
  set_lu_outputs(a, ms.batch, fs, 1, t.size(-1), t.dtype());
  return Status::ok();
}

// _linalg_slogdet(A) -> (sign, logabsdet, LU, pivots); slogdet; logdet(self)
Status slogdet_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, a.has("A") ? "A" : "self"));
  KILN_TRY(square(a, t, "A"));
  const bool logdet = a.node().op == ir::OpKind::kLogdet;
  const Mats ms = read_mats(t);
  const std::vector<Lu> fs = lu_factors(ms);
  std::vector<double> signs, logs;
  for (const Lu& f : fs) {
    double sign = 1, log_abs = 0;
    for (int i = 0; i < f.lu.r; ++i) {
      const double d = f.lu(i, i);
      if (d < 0) sign = -sign;
      if (d == 0) sign = 0;
      if (f.piv[static_cast<size_t>(i)] != i + 1) sign = -sign;
      log_abs += std::log(std::abs(d));
    }
    if (std::isnan(log_abs)) sign = std::numeric_limits<double>::quiet_NaN();
    signs.push_back(sign);
    logs.push_back(log_abs);
  }
  if (logdet) {
    // log(det): NaN for a negative determinant, -inf for a zero one.
    std::vector<double> out;
    for (size_t i = 0; i < logs.size(); ++i)
      out.push_back(signs[i] < 0    ? std::numeric_limits<double>::quiet_NaN()
                    : signs[i] == 0 ? -std::numeric_limits<double>::infinity()
                                    : logs[i]);
    a.set_output(0, write_scalars(ms.batch, out, t.dtype()));
    return Status::ok();
  }
  a.set_output(0, write_scalars(ms.batch, signs, t.dtype()));
  a.set_output(1, write_scalars(ms.batch, logs, t.dtype()));
  set_lu_outputs(a, ms.batch, fs, 2, t.size(-1), t.dtype());
  return Status::ok();
}

// linalg_inv_ex(A, check_errors) -> (inverse, info); linalg_inv(A); inverse(self)
Status inv_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, a.has("A") ? "A" : "self"));
  KILN_TRY(square(a, t, "A"));
  const bool ex = a.node().op == ir::OpKind::kLinalgInvEx;
  KILN_ASSIGN_OR_RETURN(bool check, a.bool_arg("check_errors", false));
  const Mats ms = read_mats(t);
  std::vector<Mat> out;
  std::vector<int> infos;
  for (const Mat& m : ms.m) {
    int info = 0;
    out.push_back(inverse(m, &info));
    if (info > 0 && (!ex || check))
      return a.error("the matrix is singular (U[" + std::to_string(info - 1) + ", " + std::to_string(info - 1) +
                     "] of its LU factorization is zero)");
    infos.push_back(info);
  }
  const int64_t n = t.size(-1);
  a.set_output(0, write_mats(ms.batch, out, n, n, t.dtype()));
  if (ex) a.set_output(1, write_ints(ms.batch, infos));
  return Status::ok();
}

// B of a solve as a matrix: PyTorch's vector case (B 1-d, or B's shape A's
// without the last dim) is a column (left) or row (right) matrix.
struct Rhs {
  Tensor b;
  bool vector = false;
};

Rhs rhs_of(const Tensor& A, const Tensor& B, bool left) {
  const bool vec =
      B.dim() == 1 || (B.dim() == A.dim() - 1 && std::equal(B.sizes().begin(), B.sizes().end(), A.sizes().begin()));
  if (!vec) return {B, false};
  Shape s = B.sizes();
  s.insert(left ? s.end() : s.end() - 1, 1);
  return {B.reshape(s), true};
}

Tensor drop_vector_dim(const Tensor& x, bool left) {
  Shape s = x.sizes();
  s.erase(left ? s.end() - 1 : s.end() - 2);
  return x.reshape(s);
}

// _linalg_solve_ex(A, B, left, check_errors) -> (result, LU, pivots, info); linalg_solve(A, B, left)
Status solve_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor A, floating_matrix(a, "A"));
  KILN_ASSIGN_OR_RETURN(Tensor B, floating_matrix(a, "B", 1));
  KILN_TRY(square(a, A, "A"));
  KILN_ASSIGN_OR_RETURN(bool left, a.bool_arg("left"));
  KILN_ASSIGN_OR_RETURN(bool check, a.bool_arg("check_errors", false));
  const bool ex = a.node().op == ir::OpKind::kLinalgSolveEx;
  const Rhs rhs = rhs_of(A, B, left);
  if (rhs.b.dim() < 2) return a.error("B must have at least 1 dim");
  const int64_t n = A.size(-1);
  if ((left ? rhs.b.size(-2) : rhs.b.size(-1)) != n)
    return a.error("A " + A.type_string() + " and B " + B.type_string() + " do not match for a solve");
  KILN_ASSIGN_OR_RETURN(Shape batch, broadcast_batch(a, A, rhs.b));
  const Mats as = read_mats(A, batch), bs = read_mats(rhs.b, batch);
  const DType dt = wider(A.dtype(), B.dtype());
  std::vector<Mat> xs;
  for (size_t i = 0; i < as.m.size(); ++i) {
    Lu f = lu_factor(as.m[i]);
    if (f.info > 0 && (!ex || check)) return a.error("the matrix A is singular");
    Mat x =
        left ? lu_apply(f.lu, f.piv, bs.m[i], false) : lu_apply(f.lu, f.piv, bs.m[i].transposed(), true).transposed();
    xs.push_back(std::move(x));
  }
  const int64_t rows = rhs.b.size(-2), cols = rhs.b.size(-1);
  Tensor x = write_mats(batch, xs, rows, cols, dt);
  if (rhs.vector) x = drop_vector_dim(x, left);
  a.set_output(0, x);
  if (ex) {
    // The factors of A itself, unbroadcast, as PyTorch returns them.
    const Mats own = read_mats(A);
    const std::vector<Lu> fs = lu_factors(own);
    set_lu_outputs(a, own.batch, fs, 1, n, A.dtype());
    std::vector<int> infos;
    for (const Lu& f : fs) infos.push_back(f.info);
    a.set_output(3, write_ints(own.batch, infos));
  }
  return Status::ok();
}

// Matrix i's n pivots from `p` (int64 [batch..., n]), checked: LAPACK's
// 1-based row numbers, negative too for LDL's 2 x 2 blocks (`signed_blocks`).
Expected<std::vector<int>> pivots_of(KernelArgs& a, const Tensor& p, int64_t i, int64_t n, bool signed_blocks) {
  std::vector<int> pv(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    const int64_t v = p.data<int64_t>()[i * n + k];
    if (v == 0 || v > n || v < (signed_blocks ? -n : 1))
      return a.error("pivot " + std::to_string(v) + " is out of range for " + std::to_string(n) + " rows");
    pv[static_cast<size_t>(k)] = static_cast<int>(v);
  }
  return pv;
}

// linalg_lu_solve(LU, pivots, B, left, adjoint); lu_solve(self=B, LU_data, LU_pivots)
Status lu_solve_kernel(KernelArgs& a) {
  const bool old = a.node().op == ir::OpKind::kLuSolve;
  KILN_ASSIGN_OR_RETURN(Tensor LU, floating_matrix(a, old ? "LU_data" : "LU"));
  KILN_ASSIGN_OR_RETURN(Tensor piv, a.tensor(old ? "LU_pivots" : "pivots"));
  KILN_ASSIGN_OR_RETURN(Tensor B, floating_matrix(a, old ? "self" : "B"));
  KILN_TRY(square(a, LU, "LU"));
  KILN_ASSIGN_OR_RETURN(bool left, a.bool_arg("left", true));
  KILN_ASSIGN_OR_RETURN(bool adjoint, a.bool_arg("adjoint", false));
  const int64_t n = LU.size(-1);
  if ((left ? B.size(-2) : B.size(-1)) != n) return a.error("LU and B do not match: " + B.type_string());
  if (piv.dim() < 1 || piv.size(-1) != n) return a.error("pivots must have " + std::to_string(n) + " entries");
  KILN_ASSIGN_OR_RETURN(Shape batch, broadcast_batch(a, LU, B));
  const Mats ls = read_mats(LU, batch), bs = read_mats(B, batch);
  Shape pshape = concat(batch, {n});
  const Tensor p = cast_copy(expand_to(piv, pshape), DType::Int64);
  std::vector<Mat> xs;
  for (size_t i = 0; i < ls.m.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(std::vector<int> pv, pivots_of(a, p, static_cast<int64_t>(i), n, false));
    // left: op(A) X = B; right: X op(A) = B, i.e. op(A)^T X^T = B^T.
    xs.push_back(left ? lu_apply(ls.m[i], pv, bs.m[i], adjoint)
                      : lu_apply(ls.m[i], pv, bs.m[i].transposed(), !adjoint).transposed());
  }
  a.set_output(0, write_mats(batch, xs, B.size(-2), B.size(-1), wider(LU.dtype(), B.dtype())));
  return Status::ok();
}

// linalg_solve_triangular(self, B, upper, left, unitriangular)
Status solve_triangular_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor A, floating_matrix(a, "self"));
  KILN_ASSIGN_OR_RETURN(Tensor B, floating_matrix(a, "B"));
  KILN_TRY(square(a, A, "self"));
  KILN_ASSIGN_OR_RETURN(bool upper, a.bool_arg("upper"));
  KILN_ASSIGN_OR_RETURN(bool left, a.bool_arg("left"));
  KILN_ASSIGN_OR_RETURN(bool unit, a.bool_arg("unitriangular"));
  const int64_t n = A.size(-1);
  if ((left ? B.size(-2) : B.size(-1)) != n) return a.error("A and B do not match: " + B.type_string());
  KILN_ASSIGN_OR_RETURN(Shape batch, broadcast_batch(a, A, B));
  const Mats as = read_mats(A, batch);
  Mats bs = read_mats(B, batch);
  for (size_t i = 0; i < as.m.size(); ++i) {
    Mat& x = bs.m[i];
    if (x.r == 0 || x.c == 0) continue;
    cblas_dtrsm(CblasColMajor, left ? CblasLeft : CblasRight, upper ? CblasUpper : CblasLower, CblasNoTrans,
                unit ? CblasUnit : CblasNonUnit, x.r, x.c, 1.0, as.m[i].data(), as.m[i].ld(), x.data(), x.ld());
  }
  a.set_output(0, write_mats(batch, bs.m, B.size(-2), B.size(-1), wider(A.dtype(), B.dtype())));
  return Status::ok();
}

// ---- Cholesky family

// cholesky(self, upper); linalg_cholesky(self, upper); linalg_cholesky_ex(self, upper, check_errors) -> (L, info)
Status cholesky_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, "self"));
  KILN_TRY(square(a, t, "self"));
  KILN_ASSIGN_OR_RETURN(bool upper, a.bool_arg("upper"));
  KILN_ASSIGN_OR_RETURN(bool check, a.bool_arg("check_errors", false));
  const bool ex = a.node().op == ir::OpKind::kLinalgCholeskyEx;
  Mats ms = read_mats(t);
  std::vector<int> infos;
  for (Mat& m : ms.m) {
    const int info = cholesky_in_place(m, upper);
    if (info > 0 && (!ex || check))
      return a.error("the matrix is not positive-definite (leading minor of order " + std::to_string(info) +
                     " is not positive)");
    infos.push_back(info);
  }
  const int64_t n = t.size(-1);
  a.set_output(0, write_mats(ms.batch, ms.m, n, n, t.dtype()));
  if (ex) a.set_output(1, write_ints(ms.batch, infos));
  return Status::ok();
}

// cholesky_solve(self=B, input2=L, upper): A X = B with A = L L^T (U^T U)
Status cholesky_solve_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor B, floating_matrix(a, "self"));
  KILN_ASSIGN_OR_RETURN(Tensor L, floating_matrix(a, "input2"));
  KILN_TRY(square(a, L, "input2"));
  KILN_ASSIGN_OR_RETURN(bool upper, a.bool_arg("upper"));
  if (B.size(-2) != L.size(-1)) return a.error("input2 and self do not match: " + B.type_string());
  KILN_ASSIGN_OR_RETURN(Shape batch, broadcast_batch(a, B, L));
  const Mats ls = read_mats(L, batch);
  Mats bs = read_mats(B, batch);
  for (size_t i = 0; i < ls.m.size(); ++i) {
    Mat& x = bs.m[i];
    int info = 0;
    if (x.r > 0 && x.c > 0) dpotrs_(upper ? "U" : "L", &x.r, &x.c, ls.m[i].data(), &x.r, x.data(), &x.r, &info, 1);
  }
  a.set_output(0, write_mats(batch, bs.m, B.size(-2), B.size(-1), wider(B.dtype(), L.dtype())));
  return Status::ok();
}

// cholesky_inverse(self=L, upper): (L L^T)^-1
Status cholesky_inverse_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, "self"));
  KILN_TRY(square(a, t, "self"));
  KILN_ASSIGN_OR_RETURN(bool upper, a.bool_arg("upper"));
  Mats ms = read_mats(t);
  for (Mat& m : ms.m) {
    int info = 0;
    if (m.r > 0) dpotri_(upper ? "U" : "L", &m.r, m.data(), &m.r, &info, 1);
    for (int j = 0; j < m.c; ++j)
      for (int i = 0; i < m.r; ++i)
        if (upper ? i > j : i < j) m(i, j) = m(j, i);
  }
  const int64_t n = t.size(-1);
  a.set_output(0, write_mats(ms.batch, ms.m, n, n, t.dtype()));
  return Status::ok();
}

// ---- SVD and eigendecomposition

// _linalg_svd(A, full_matrices, compute_uv, driver) -> (U, S, Vh); linalg_svd(A, full_matrices); linalg_svdvals(A)
Status svd_kernel(KernelArgs& a) {
  const ir::OpKind op = a.node().op;
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, "A"));
  KILN_ASSIGN_OR_RETURN(bool full, a.bool_arg("full_matrices", op == ir::OpKind::kLinalgSvd));
  KILN_ASSIGN_OR_RETURN(bool uv, a.bool_arg("compute_uv", op != ir::OpKind::kLinalgSvdvals));
  const Mats ms = read_mats(t);
  const int64_t m = t.size(-2), n = t.size(-1), k = std::min(m, n);
  std::vector<Mat> us, vhs;
  std::vector<std::vector<double>> ss;
  for (const Mat& x : ms.m) {
    Svd s = svd(x, uv, full);
    ss.push_back(std::move(s.s));
    us.push_back(std::move(s.u));
    vhs.push_back(std::move(s.vh));
  }
  if (op == ir::OpKind::kLinalgSvdvals) {
    a.set_output(0, write_vecs(ms.batch, ss, k, t.dtype()));
    return Status::ok();
  }
  const int64_t ucols = full ? m : k, vrows = full ? n : k;
  a.set_output(0, uv ? write_mats(ms.batch, us, m, ucols, t.dtype()) : Tensor::zeros(t.dtype(), {0}));
  a.set_output(1, write_vecs(ms.batch, ss, k, t.dtype()));
  a.set_output(2, uv ? write_mats(ms.batch, vhs, vrows, n, t.dtype()) : Tensor::zeros(t.dtype(), {0}));
  return Status::ok();
}

// _linalg_eigh(A, UPLO, compute_v) -> (eigenvalues, eigenvectors); linalg_eigh(self, UPLO); linalg_eigvalsh(self, UPLO)
Status eigh_kernel(KernelArgs& a) {
  const ir::OpKind op = a.node().op;
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, a.has("A") ? "A" : "self"));
  KILN_TRY(square(a, t, "A"));
  KILN_ASSIGN_OR_RETURN(std::string uplo, a.string_arg("UPLO"));
  if (uplo != "L" && uplo != "U" && uplo != "l" && uplo != "u")
    return a.error("UPLO must be 'L' or 'U', got '" + uplo + "'");
  KILN_ASSIGN_OR_RETURN(bool vectors, a.bool_arg("compute_v", op != ir::OpKind::kLinalgEigvalsh));
  const bool upper = uplo == "U" || uplo == "u";
  const Mats ms = read_mats(t);
  const int64_t n = t.size(-1);
  std::vector<std::vector<double>> ws;
  std::vector<Mat> vs;
  for (const Mat& m : ms.m) {
    Eigh e = eigh(m, upper, vectors);
    ws.push_back(std::move(e.w));
    vs.push_back(std::move(e.v));
  }
  a.set_output(0, write_vecs(ms.batch, ws, n, t.dtype()));
  if (op != ir::OpKind::kLinalgEigvalsh)
    a.set_output(1, vectors ? write_mats(ms.batch, vs, n, n, t.dtype()) : Tensor::zeros(t.dtype(), {0}));
  return Status::ok();
}

// The singular values (or |eigenvalues| of a symmetric matrix), largest first.
std::vector<double> spectrum(const Mat& m, bool hermitian) {
  std::vector<double> s;
  if (hermitian) {
    for (double w : eigh(m, false, false).w) s.push_back(std::abs(w));
    std::sort(s.begin(), s.end(), std::greater<>());
  } else {
    s = svd(m, false, false).s;
  }
  return s;
}

// An atol/rtol argument per matrix of the batch (a tensor broadcast to it or
// a number); NaN where not given.
Expected<std::vector<double>> per_matrix(KernelArgs& a, std::string_view name, const Shape& batch) {
  const int64_t count = count_of(batch);
  std::vector<double> out(static_cast<size_t>(count), std::numeric_limits<double>::quiet_NaN());
  if (!a.has(name)) return out;
  Expected<std::optional<Tensor>> t = a.optional_tensor(name);
  if (t.has_value() && t.value()) {
    if (!can_expand(t.value()->sizes(), batch))
      return a.error(std::string(name) + " " + t.value()->type_string() + " does not broadcast to the batch");
    const Tensor e = cast_copy(expand_to(*t.value(), batch), DType::Float64);
    std::copy(e.data<double>(), e.data<double>() + count, out.begin());
    return out;
  }
  KILN_ASSIGN_OR_RETURN(std::optional<double> f, a.optional_float(name));
  if (f) std::fill(out.begin(), out.end(), *f);
  return out;
}

// PyTorch's tolerance of pinv and matrix_rank: max(atol, rtol * largest),
// rtol defaulting to eps * max(rows, cols) when neither is given, and to 0
// when only a positive atol is.
Expected<std::vector<double>> thresholds(KernelArgs& a, const Tensor& t, const Mats& ms,
                                         const std::vector<std::vector<double>>& spectra) {
  KILN_ASSIGN_OR_RETURN(std::vector<double> atol, per_matrix(a, "atol", ms.batch));
  KILN_ASSIGN_OR_RETURN(std::vector<double> rtol, per_matrix(a, a.has("rcond") ? "rcond" : "rtol", ms.batch));
  const double eps =
      t.dtype() == DType::Float32 ? std::numeric_limits<float>::epsilon() : std::numeric_limits<double>::epsilon();
  const double default_rtol = eps * static_cast<double>(std::max(t.size(-2), t.size(-1)));
  std::vector<double> out;
  for (size_t i = 0; i < spectra.size(); ++i) {
    const bool has_atol = !std::isnan(atol[i]), has_rtol = !std::isnan(rtol[i]);
    const double at = has_atol ? atol[i] : 0.0;
    const double rt = has_rtol ? rtol[i] : (has_atol && at > 0 ? 0.0 : default_rtol);
    const double largest = spectra[i].empty() ? 0.0 : spectra[i].front();
    out.push_back(std::max(at, rt * largest));
  }
  return out;
}

// linalg_matrix_rank.{atol_rtol_tensor, atol_rtol_float, default, tol_tensor}(input, atol, rtol, hermitian)
Status matrix_rank_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, a.has("input") ? "input" : "self"));
  KILN_ASSIGN_OR_RETURN(bool hermitian, a.bool_arg("hermitian"));
  if (hermitian) KILN_TRY(square(a, t, "input"));
  const Mats ms = read_mats(t);
  std::vector<std::vector<double>> spectra;
  for (const Mat& m : ms.m) spectra.push_back(spectrum(m, hermitian));
  KILN_ASSIGN_OR_RETURN(std::vector<double> tol, thresholds(a, t, ms, spectra));
  Tensor out = Tensor::zeros(DType::Int64, ms.batch);
  for (size_t i = 0; i < spectra.size(); ++i)
    out.data<int64_t>()[i] = std::count_if(spectra[i].begin(), spectra[i].end(), [&](double s) { return s > tol[i]; });
  a.set_output(0, out);
  return Status::ok();
}

// linalg_pinv.{atol_rtol_tensor, atol_rtol_float, default}(self, atol, rtol, hermitian); pinverse(self, rcond)
//
// The tolerance is taken from the singular values (|eigenvalues|) of the same
// decomposition that is inverted: a second decomposition can differ from it
// in the last bit, and with rtol 1 that decides whether the largest value is
// kept (PyTorch keeps only values strictly above the tolerance).
Status pinv_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, "self"));
  bool hermitian = false;  // pinverse has no such argument
  if (a.node().op != ir::OpKind::kPinverse) {
    KILN_ASSIGN_OR_RETURN(hermitian, a.bool_arg("hermitian"));
  }
  if (hermitian) KILN_TRY(square(a, t, "self"));
  const Mats ms = read_mats(t);
  std::vector<Eigh> eighs;
  std::vector<Svd> svds;
  std::vector<std::vector<double>> spectra;
  for (const Mat& m : ms.m) {
    std::vector<double> s;
    if (hermitian) {
      eighs.push_back(eigh(m, false, true));
      for (double w : eighs.back().w) s.push_back(std::abs(w));
      std::sort(s.begin(), s.end(), std::greater<>());
    } else {
      svds.push_back(svd(m, true, false));
      s = svds.back().s;
    }
    spectra.push_back(std::move(s));
  }
  std::vector<double> tol;
  if (a.node().op == ir::OpKind::kPinverse) {
    KILN_ASSIGN_OR_RETURN(double rcond, a.float_arg("rcond", 1e-15));
    for (const auto& s : spectra) tol.push_back(rcond * (s.empty() ? 0.0 : s.front()));
  } else {
    KILN_ASSIGN_OR_RETURN(tol, thresholds(a, t, ms, spectra));
  }
  std::vector<Mat> out;
  for (size_t i = 0; i < ms.m.size(); ++i) {
    const Mat& m = ms.m[i];
    Mat p(m.c, m.r);
    if (hermitian) {
      const Eigh& e = eighs[i];
      for (int k = 0; k < m.r; ++k) {
        const double w = e.w[static_cast<size_t>(k)];
        if (!(std::abs(w) > tol[i])) continue;
        for (int r = 0; r < m.r; ++r)
          for (int c = 0; c < m.r; ++c) p(r, c) += e.v(r, k) * e.v(c, k) / w;
      }
    } else {
      const Svd& s = svds[i];
      for (size_t k = 0; k < s.s.size(); ++k) {
        if (!(s.s[k] > tol[i])) continue;
        const int kk = static_cast<int>(k);
        for (int r = 0; r < m.c; ++r)
          for (int c = 0; c < m.r; ++c) p(r, c) += s.vh(kk, r) * s.u(c, kk) / s.s[k];
      }
    }
    out.push_back(std::move(p));
  }
  a.set_output(0, write_mats(ms.batch, out, t.size(-1), t.size(-2), t.dtype()));
  return Status::ok();
}

// ---- norms and condition numbers

// The two dims of a matrix norm moved last: the matrices, the batch shape of
// the result and its keepdim shape.
struct NormLayout {
  Tensor moved;
  Shape out_shape;
};

Expected<NormLayout> norm_layout(KernelArgs& a, const Tensor& t, std::vector<int64_t> dims, bool keepdim) {
  if (dims.size() != 2) return a.error("a matrix norm takes 2 dims, got " + std::to_string(dims.size()));
  std::vector<int64_t> d(2);
  for (int k = 0; k < 2; ++k) {
    std::optional<int64_t> w = wrap_dim(dims[static_cast<size_t>(k)], t.dim());
    if (!w || t.dim() < 2) return a.error(dim_out_of_range(dims[static_cast<size_t>(k)], t.dim()));
    d[static_cast<size_t>(k)] = *w;
  }
  if (d[0] == d[1]) return a.error("the two dims of a matrix norm must differ");
  Shape perm, sizes, strides, out_shape;
  for (int64_t i = 0; i < t.dim(); ++i)
    if (i != d[0] && i != d[1]) {
      sizes.push_back(t.size(i));
      strides.push_back(t.strides()[static_cast<size_t>(i)]);
      out_shape.push_back(t.size(i));
    } else if (keepdim) {
      out_shape.push_back(1);
    }
  for (int64_t i : d) {
    sizes.push_back(t.size(i));
    strides.push_back(t.strides()[static_cast<size_t>(i)]);
  }
  return NormLayout{t.as_strided(sizes, strides, t.storage_offset()), out_shape};
}

struct NormOrd {
  double ord = 2;
  bool fro = false, nuc = false;
};

Expected<NormOrd> norm_ord(KernelArgs& a, std::string_view name, bool is_string) {
  NormOrd o;
  if (is_string) {
    KILN_ASSIGN_OR_RETURN(std::string s, a.string_arg(name, "fro"));
    if (s == "fro")
      o.fro = true;
    else if (s == "nuc")
      o.nuc = true;
    else
      return a.error("matrix norm order must be 'fro' or 'nuc', got '" + s + "'");
    return o;
  }
  KILN_ASSIGN_OR_RETURN(Scalar s, a.scalar(name));
  o.ord = s.to_double();
  if (o.ord != 1 && o.ord != -1 && o.ord != 2 && o.ord != -2 && !std::isinf(o.ord))
    return a.error("matrix norm order must be one of 1, -1, 2, -2, inf, -inf, got " + std::to_string(o.ord));
  return o;
}

Expected<Tensor> matrix_norm(KernelArgs& a, const Tensor& t, const NormOrd& o, std::vector<int64_t> dims, bool keepdim,
                             DType out_dtype) {
  KILN_ASSIGN_OR_RETURN(NormLayout l, norm_layout(a, t, std::move(dims), keepdim));
  const Mats ms = read_mats(l.moved);
  std::vector<double> out;
  for (const Mat& m : ms.m) {
    // A maximum or minimum over an empty dim (or the spectrum of nothing) is not defined, as in PyTorch.
    const bool over_empty = std::abs(o.ord) == 2 ? m.v.empty() : std::abs(o.ord) == 1 ? m.c == 0 : m.r == 0;
    if (!o.fro && !o.nuc && over_empty) return a.error("this matrix norm of an empty matrix is not defined");
    out.push_back(matrix_norm_of(m, o.ord, o.fro, o.nuc));
  }
  return write_scalars(ms.batch, out, out_dtype).reshape(l.out_shape);
}

Expected<DType> norm_dtype(KernelArgs& a, const Tensor& t) {
  KILN_ASSIGN_OR_RETURN(std::optional<DType> d, a.dtype_arg("dtype"));
  return d ? *d : t.dtype();
}

// linalg_matrix_norm.{default, str_ord}(self, ord, dim, keepdim, dtype)
Status matrix_norm_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, "self"));
  KILN_ASSIGN_OR_RETURN(NormOrd o, norm_ord(a, "ord", a.node().op == ir::OpKind::kLinalgMatrixNormStrOrd));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, a.ints("dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, a.bool_arg("keepdim"));
  KILN_ASSIGN_OR_RETURN(DType dt, norm_dtype(a, t));
  KILN_ASSIGN_OR_RETURN(Tensor out, matrix_norm(a, t, o, dims, keepdim, dt));
  a.set_output(0, out);
  return Status::ok();
}

// A vector norm of every element of `t` along `dims` (all when empty).
Tensor vector_norm(const Tensor& t, double ord, const std::vector<int64_t>& dims, bool keepdim, DType dt) {
  // A 0-d tensor is one element; its norm is 0-d whatever dims say.
  if (t.dim() == 0) return vector_norm(t.reshape({1}), ord, {}, false, dt);
  std::vector<bool> reduce(static_cast<size_t>(t.dim()), dims.empty());
  for (int64_t d : dims) reduce[static_cast<size_t>(*wrap_dim(d, t.dim()))] = true;
  Shape kept, kept_strides, red, red_strides, out_shape;
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (reduce[static_cast<size_t>(i)]) {
      red.push_back(t.size(i));
      red_strides.push_back(t.strides()[static_cast<size_t>(i)]);
      if (keepdim) out_shape.push_back(1);
    } else {
      kept.push_back(t.size(i));
      kept_strides.push_back(t.strides()[static_cast<size_t>(i)]);
      out_shape.push_back(t.size(i));
    }
  }
  Shape sizes = kept, strides = kept_strides;
  sizes.insert(sizes.end(), red.begin(), red.end());
  strides.insert(strides.end(), red_strides.begin(), red_strides.end());
  const Tensor d = cast_copy(t.as_strided(sizes, strides, t.storage_offset()), DType::Float64);
  const int64_t outer = count_of(kept), inner = count_of(red);
  std::vector<double> out;
  for (int64_t o = 0; o < outer; ++o) {
    const double* p = d.data<double>() + o * inner;
    double acc = 0;
    if (std::isinf(ord)) {
      acc = ord > 0 ? 0.0 : std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < inner; ++i) acc = ord > 0 ? std::max(acc, std::abs(p[i])) : std::min(acc, std::abs(p[i]));
      for (int64_t i = 0; i < inner; ++i)
        if (std::isnan(p[i])) acc = p[i];
    } else if (ord == 0) {
      for (int64_t i = 0; i < inner; ++i) acc += p[i] != 0 ? 1 : 0;
    } else {
      for (int64_t i = 0; i < inner; ++i) acc += std::pow(std::abs(p[i]), ord);
      acc = std::pow(acc, 1.0 / ord);
    }
    out.push_back(acc);
  }
  return write_scalars(kept, out, dt).reshape(out_shape);
}

// linalg_vector_norm(self, ord, dim, keepdim, dtype): the forms lowering does not decompose.
Status vector_norm_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, "self", 0));
  KILN_ASSIGN_OR_RETURN(Scalar ord, a.scalar("ord", Scalar::of_int(2)));
  KILN_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> dims, a.optional_ints("dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, a.bool_arg("keepdim", false));
  KILN_ASSIGN_OR_RETURN(DType dt, norm_dtype(a, t));
  for (int64_t d : dims.value_or(std::vector<int64_t>{}))
    if (!wrap_dim(d, t.dim())) return a.error(dim_out_of_range(d, t.dim()));
  a.set_output(0, vector_norm(t, ord.to_double(), dims.value_or(std::vector<int64_t>{}), keepdim, dt));
  return Status::ok();
}

// linalg_norm.{default, ord_str}(self, ord, dim, keepdim, dtype)
Status linalg_norm_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, "self", 0));
  KILN_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> dims, a.optional_ints("dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, a.bool_arg("keepdim", false));
  KILN_ASSIGN_OR_RETURN(DType dt, norm_dtype(a, t));
  const bool str = a.node().op == ir::OpKind::kLinalgNormOrdStr;
  if (str || (a.has("ord") && ((dims && dims->size() == 2) || (!dims && t.dim() == 2)))) {
    KILN_ASSIGN_OR_RETURN(NormOrd o, norm_ord(a, "ord", str));
    KILN_ASSIGN_OR_RETURN(Tensor out, matrix_norm(a, t, o, dims.value_or(std::vector<int64_t>{-2, -1}), keepdim, dt));
    a.set_output(0, out);
    return Status::ok();
  }
  if (a.has("ord") && !dims && t.dim() != 1)
    return a.error("linalg.norm with an order takes a 1-d or 2-d input or dims, got " + t.type_string());
  if (dims && dims->size() > 2) return a.error("linalg.norm takes at most 2 dims");
  double ord = 2;
  if (a.has("ord")) {
    KILN_ASSIGN_OR_RETURN(Scalar s, a.scalar("ord"));
    ord = s.to_double();
  }
  for (int64_t d : dims.value_or(std::vector<int64_t>{}))
    if (!wrap_dim(d, t.dim())) return a.error(dim_out_of_range(d, t.dim()));
  // ord None over 2 dims is the Frobenius norm, a 2-norm of the elements.
  a.set_output(0, vector_norm(t, ord, dims.value_or(std::vector<int64_t>{}), keepdim, dt));
  return Status::ok();
}

// linalg_cond(self, p), linalg_cond.p_str(self, p)
Status cond_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, "self"));
  NormOrd o;
  bool spectral = true;
  if (a.node().op == ir::OpKind::kLinalgCondPStr) {
    KILN_ASSIGN_OR_RETURN(o, norm_ord(a, "p", true));
    spectral = false;
  } else if (a.has("p")) {
    KILN_ASSIGN_OR_RETURN(o, norm_ord(a, "p", false));
    spectral = std::abs(o.ord) == 2;
  }
  if (!spectral) KILN_TRY(square(a, t, "self"));
  const Mats ms = read_mats(t);
  std::vector<double> out;
  for (const Mat& m : ms.m) {
    if (spectral) {
      const std::vector<double> s = svd(m, false, false).s;
      if (s.empty()) {
        out.push_back(0);
        continue;
      }
      out.push_back(o.ord > 0 ? s.front() / s.back() : s.back() / s.front());
    } else {
      int info = 0;
      const Mat inv = inverse(m, &info);
      out.push_back(info > 0 ? std::numeric_limits<double>::infinity()
                             : matrix_norm_of(m, o.ord, o.fro, o.nuc) * matrix_norm_of(inv, o.ord, o.fro, o.nuc));
    }
  }
  a.set_output(0, write_scalars(ms.batch, out, t.dtype()));
  return Status::ok();
}

// ---- products and composites

// linalg_matrix_power(self, n)
Status matrix_power_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, "self"));
  KILN_TRY(square(a, t, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t n, a.int_arg("n"));
  Mats ms = read_mats(t);
  for (Mat& m : ms.m) {
    Mat base = m;
    if (n < 0) {
      int info = 0;
      base = inverse(m, &info);
      if (info > 0) return a.error("matrix_power with a negative exponent of a singular matrix");
    }
    Mat result = Mat::identity(m.r);
    for (uint64_t e = static_cast<uint64_t>(n < 0 ? -n : n); e; e >>= 1) {
      if (e & 1) result = product(result, base);
      if (e > 1) base = product(base, base);
    }
    m = std::move(result);
  }
  a.set_output(0, write_mats(ms.batch, ms.m, t.size(-1), t.size(-1), t.dtype()));
  return Status::ok();
}

// linalg_multi_dot(tensors): the first may be a row vector, the last a column vector.
Status multi_dot_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor> ts, a.tensors("tensors"));
  if (ts.size() < 2) return a.error("multi_dot takes at least 2 tensors, got " + std::to_string(ts.size()));
  DType dt = ts[0].dtype();
  std::optional<Mat> acc;
  for (size_t i = 0; i < ts.size(); ++i) {
    Tensor x = ts[i];
    if (x.dtype() != DType::Float32 && x.dtype() != DType::Float64)
      return a.error("multi_dot takes float32 or float64 tensors, got " + x.type_string());
    dt = wider(dt, x.dtype());
    const bool end = i == 0 || i + 1 == ts.size();
    if (x.dim() == 1 && end) x = x.reshape(i == 0 ? Shape{1, x.size(0)} : Shape{x.size(0), 1});
    if (x.dim() != 2) return a.error("multi_dot: tensor " + std::to_string(i) + " must be 2-d, got " + x.type_string());
    Mat m = read_mats(x).m[0];
    if (acc && acc->c != m.r)
      return a.error("multi_dot: tensor " + std::to_string(i) + " does not chain: " + x.type_string());
    acc = acc ? product(*acc, m) : m;
  }
  Tensor out = write_mats({}, {*acc}, acc->r, acc->c, dt);
  Shape final_shape;
  if (ts.front().dim() != 1) final_shape.push_back(acc->r);
  if (ts.back().dim() != 1) final_shape.push_back(acc->c);
  a.set_output(0, out.reshape(final_shape));
  return Status::ok();
}

// linalg_matrix_exp(self), matrix_exp(self)
Status matrix_exp_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, "self"));
  KILN_TRY(square(a, t, "self"));
  Mats ms = read_mats(t);
  for (Mat& m : ms.m) m = matrix_exp(m);
  a.set_output(0, write_mats(ms.batch, ms.m, t.size(-1), t.size(-1), t.dtype()));
  return Status::ok();
}

// linalg_householder_product(input, tau): the first columns of Q = H_1 ... H_k
Status householder_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, "input"));
  KILN_ASSIGN_OR_RETURN(Tensor tau, floating_matrix(a, "tau", 1));
  const int64_t m = t.size(-2), n = t.size(-1), k = tau.size(-1);
  if (m < n || n < k)
    return a.error("householder_product needs rows >= cols >= len(tau), got " + t.type_string() + " and tau " +
                   tau.type_string());
  Mats ms = read_mats(t);
  const Shape tshape = concat(ms.batch, {k});
  if (!can_expand(tau.sizes(), tshape) || tau.dim() != t.dim() - 1)
    return a.error("tau " + tau.type_string() + " does not match input");
  const Tensor taus = cast_copy(tau, DType::Float64);
  for (size_t i = 0; i < ms.m.size(); ++i) {
    Mat& x = ms.m[i];
    if (x.c == 0) continue;
    int info = 0, mm = x.r, nn = x.c, kk = static_cast<int>(k), lwork = std::max(1, nn) * 64;
    std::vector<double> work(static_cast<size_t>(lwork));
    dorgqr_(&mm, &nn, &kk, x.data(), &mm, taus.data<double>() + static_cast<int64_t>(i) * k, work.data(), &lwork,
            &info);
  }
  a.set_output(0, write_mats(ms.batch, ms.m, m, n, wider(t.dtype(), tau.dtype())));
  return Status::ok();
}

// ormqr(self, input2=tau, input3=other, left, transpose): op(Q) other or other op(Q)
Status ormqr_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, "self"));
  KILN_ASSIGN_OR_RETURN(Tensor tau, floating_matrix(a, "input2", 1));
  KILN_ASSIGN_OR_RETURN(Tensor c, floating_matrix(a, "input3"));
  KILN_ASSIGN_OR_RETURN(bool left, a.bool_arg("left", true));
  KILN_ASSIGN_OR_RETURN(bool transpose, a.bool_arg("transpose", false));
  const int64_t mq = left ? c.size(-2) : c.size(-1), k = tau.size(-1);
  if (t.size(-2) != mq || t.size(-1) < k || k > mq)
    return a.error("ormqr: self " + t.type_string() + ", tau " + tau.type_string() + " and other " + c.type_string() +
                   " do not match");
  const Mats ms = read_mats(t), cs = read_mats(c, batch_of(t));
  const Tensor taus = cast_copy(tau, DType::Float64);
  std::vector<Mat> out;
  for (size_t i = 0; i < ms.m.size(); ++i) {
    Mat q(static_cast<int>(mq), static_cast<int>(mq));
    for (int j = 0; j < k; ++j)
      for (int r = 0; r < mq; ++r) q(r, j) = ms.m[i](r, j);
    if (mq > 0) {
      int info = 0, n = static_cast<int>(mq), kk = static_cast<int>(k), lwork = std::max(1, n) * 64;
      std::vector<double> work(static_cast<size_t>(lwork));
      dorgqr_(&n, &n, &kk, q.data(), &n, taus.data<double>() + static_cast<int64_t>(i) * k, work.data(), &lwork, &info);
    }
    out.push_back(left ? product(q, cs.m[i], transpose, false) : product(cs.m[i], q, false, transpose));
  }
  a.set_output(0, write_mats(ms.batch, out, c.size(-2), c.size(-1), wider(t.dtype(), c.dtype())));
  return Status::ok();
}

// QR of one matrix as LAPACK's geqrf leaves it: R above the diagonal,
// Householder vectors below, and their scales.
struct Qr {
  Mat a;
  std::vector<double> tau;
};

Qr qr_factor(Mat a) {
  Qr f;
  const int k = std::min(a.r, a.c);
  f.tau.assign(static_cast<size_t>(k), 0.0);
  if (k > 0) {
    int info = 0, lwork = std::max(1, a.c) * 64;
    std::vector<double> work(static_cast<size_t>(lwork));
    dgeqrf_(&a.r, &a.c, a.data(), &a.r, f.tau.data(), work.data(), &lwork, &info);
  }
  f.a = std::move(a);
  return f;
}

// The first `cols` columns of Q (cols <= rows) from geqrf's factors.
Mat qr_q(const Qr& f, int cols) {
  const int m = f.a.r, k = static_cast<int>(f.tau.size());
  Mat q(m, cols);
  for (int j = 0; j < std::min(cols, f.a.c); ++j)
    for (int i = 0; i < m; ++i) q(i, j) = f.a(i, j);
  if (m > 0 && cols > 0) {
    int info = 0, kk = std::min(k, cols), lwork = std::max(1, cols) * 64;
    std::vector<double> work(static_cast<size_t>(lwork));
    dorgqr_(&m, &cols, &kk, q.data(), &m, f.tau.data(), work.data(), &lwork, &info);
  }
  return q;
}

// linalg_qr(A, mode) -> (Q, R): reduced Q [m, k] R [k, n], complete Q [m, m]
// R [m, n], r (Q empty); qr(self, some) -> (Q, R) as reduced or complete;
// geqrf(self) -> (a, tau) as LAPACK leaves them.
Status qr_kernel(KernelArgs& a) {
  const ir::OpKind op = a.node().op;
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, op == ir::OpKind::kLinalgQr ? "A" : "self"));
  std::string mode = "reduced";
  if (op == ir::OpKind::kLinalgQr) {
    KILN_ASSIGN_OR_RETURN(mode, a.string_arg("mode"));
  } else if (op == ir::OpKind::kQr) {
    KILN_ASSIGN_OR_RETURN(bool some, a.bool_arg("some", true));
    mode = some ? "reduced" : "complete";
  }
  if (mode != "reduced" && mode != "complete" && mode != "r")
    return a.error("linalg_qr mode must be 'reduced', 'complete' or 'r', got '" + mode + "'");
  const Mats ms = read_mats(t);
  const int64_t m = t.size(-2), n = t.size(-1), k = std::min(m, n);
  std::vector<Qr> fs;
  for (const Mat& x : ms.m) fs.push_back(qr_factor(x));
  if (op == ir::OpKind::kGeqrf) {
    std::vector<Mat> as;
    std::vector<std::vector<double>> taus;
    for (const Qr& f : fs) {
      as.push_back(f.a);
      taus.push_back(f.tau);
    }
    a.set_output(0, write_mats(ms.batch, as, m, n, t.dtype()));
    a.set_output(1, write_vecs(ms.batch, taus, k, t.dtype()));
    return Status::ok();
  }
  const int64_t qcols = mode == "complete" ? m : k, rrows = mode == "complete" ? m : k;
  std::vector<Mat> qs, rs;
  for (const Qr& f : fs) {
    if (mode != "r") qs.push_back(qr_q(f, static_cast<int>(qcols)));
    Mat r(static_cast<int>(rrows), static_cast<int>(n));
    for (int j = 0; j < n; ++j)
      for (int i = 0; i <= std::min<int>(j, static_cast<int>(rrows) - 1); ++i) r(i, j) = f.a(i, j);
    rs.push_back(std::move(r));
  }
  a.set_output(0, mode == "r" ? Tensor::zeros(t.dtype(), {0}) : write_mats(ms.batch, qs, m, qcols, t.dtype()));
  a.set_output(1, write_mats(ms.batch, rs, rrows, n, t.dtype()));
  return Status::ok();
}

// A factorization's outputs: the factor matrices (rows x cols), their
// `count` int32 pivots each, and each one's LAPACK info where the node has a
// third output (the _ex forms).
void set_factor_outputs(KernelArgs& a, const Shape& batch, const std::vector<Mat>& factors, int64_t rows, int64_t cols,
                        const std::vector<int>& pivots, int64_t count, const std::vector<int>& infos, DType dtype) {
  a.set_output(0, write_mats(batch, factors, rows, cols, dtype));
  a.set_output(1, write_ints(concat(batch, {count}), pivots));
  if (a.node().outputs.size() > 2) a.set_output(2, write_ints(batch, infos));
}

// linalg_lu_factor(A, pivot) -> (LU, pivots); linalg_lu_factor_ex(A, pivot,
// check_errors) and _lu_with_info(self, pivot, check_errors) -> (LU, pivots,
// info): getrf's factors of any m x n matrix, pivots 1-based int32.
Status lu_factor_kernel(KernelArgs& a) {
  const ir::OpKind op = a.node().op;
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, op == ir::OpKind::kLuWithInfo ? "self" : "A"));
  KILN_ASSIGN_OR_RETURN(bool pivot, a.bool_arg("pivot"));
  if (!pivot) return a.error("LU without pivoting is CUDA-only in PyTorch; kiln factors with partial pivoting");
  const Mats ms = read_mats(t);
  const int64_t m = t.size(-2), n = t.size(-1), k = std::min(m, n);
  std::vector<Mat> lus;
  std::vector<int> pivs, infos;
  for (const Mat& x : ms.m) {
    Lu f = lu_factor(x);
    lus.push_back(std::move(f.lu));
    pivs.insert(pivs.end(), f.piv.begin(), f.piv.end());
    infos.push_back(f.info);
  }
  set_factor_outputs(a, ms.batch, lus, m, n, pivs, k, infos, t.dtype());
  return Status::ok();
}

// lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots) -> (P, L, U) with
// A = P L U: P [m, m] from the row swaps, L [m, k] unit lower, U [k, n].
Status lu_unpack_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, "LU_data"));
  KILN_ASSIGN_OR_RETURN(Tensor piv, a.tensor("LU_pivots"));
  KILN_ASSIGN_OR_RETURN(bool unpack_data, a.bool_arg("unpack_data"));
  KILN_ASSIGN_OR_RETURN(bool unpack_pivots, a.bool_arg("unpack_pivots"));
  const Mats ms = read_mats(t);
  const int64_t m = t.size(-2), n = t.size(-1), k = std::min(m, n);
  if (unpack_pivots && (piv.dim() != t.dim() - 1 || piv.size(-1) != k || is_floating(piv.dtype()) ||
                        count_of(batch_of(t)) * k != piv.numel()))
    return a.error("LU_pivots " + piv.type_string() + " does not match LU_data " + t.type_string());
  const Tensor pivots = cast_copy(piv, DType::Int64);
  std::vector<Mat> ps, ls, us;
  for (size_t b = 0; b < ms.m.size(); ++b) {
    const Mat& x = ms.m[b];
    if (unpack_pivots) {
      std::vector<int> rows(static_cast<size_t>(m));
      for (int i = 0; i < m; ++i) rows[static_cast<size_t>(i)] = i;
      for (int64_t i = 0; i < k; ++i) {
        const int64_t v = pivots.data<int64_t>()[static_cast<int64_t>(b) * k + i];
        if (v < i + 1 || v > m)
          return a.error("LU pivot " + std::to_string(v) + " at " + std::to_string(i) + " is out of range for " +
                         std::to_string(m) + " rows");
        std::swap(rows[static_cast<size_t>(i)], rows[static_cast<size_t>(v - 1)]);
      }
      Mat pm(static_cast<int>(m), static_cast<int>(m));  // row i of P L U is row rows[i] of L U
      for (int i = 0; i < m; ++i) pm(rows[static_cast<size_t>(i)], i) = 1;
      ps.push_back(std::move(pm));
    }
    if (unpack_data) {
      Mat l(static_cast<int>(m), static_cast<int>(k)), u(static_cast<int>(k), static_cast<int>(n));
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < k; ++j) l(i, j) = i == j ? 1.0 : (i > j ? x(i, j) : 0.0);
      for (int i = 0; i < k; ++i)
        for (int j = i; j < n; ++j) u(i, j) = x(i, j);
      ls.push_back(std::move(l));
      us.push_back(std::move(u));
    }
  }
  a.set_output(0, unpack_pivots ? write_mats(ms.batch, ps, m, m, t.dtype()) : Tensor::zeros(t.dtype(), {0}));
  a.set_output(1, unpack_data ? write_mats(ms.batch, ls, m, k, t.dtype()) : Tensor::zeros(t.dtype(), {0}));
  a.set_output(2, unpack_data ? write_mats(ms.batch, us, k, n, t.dtype()) : Tensor::zeros(t.dtype(), {0}));
  return Status::ok();
}

// svd(self, some, compute_uv) -> (U, S, V): V = Vh^T; without compute_uv, U
// and V are zeros of [m, m] and [n, n], as torch returns them.
Status svd_v_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, "self"));
  KILN_ASSIGN_OR_RETURN(bool some, a.bool_arg("some"));
  KILN_ASSIGN_OR_RETURN(bool uv, a.bool_arg("compute_uv"));
  const Mats ms = read_mats(t);
  const int64_t m = t.size(-2), n = t.size(-1), k = std::min(m, n);
  std::vector<Mat> us, vs;
  std::vector<std::vector<double>> ss;
  for (const Mat& x : ms.m) {
    Svd s = svd(x, uv, !some);
    ss.push_back(std::move(s.s));
    us.push_back(std::move(s.u));
    vs.push_back(s.vh.transposed());
  }
  const int64_t ucols = uv && some ? k : m, vcols = uv && some ? k : n;
  if (!uv) {
    us.assign(ms.m.size(), Mat(static_cast<int>(m), static_cast<int>(m)));
    vs.assign(ms.m.size(), Mat(static_cast<int>(n), static_cast<int>(n)));
  }
  a.set_output(0, write_mats(ms.batch, us, m, ucols, t.dtype()));
  a.set_output(1, write_vecs(ms.batch, ss, k, t.dtype()));
  a.set_output(2, write_mats(ms.batch, vs, n, vcols, t.dtype()));
  return Status::ok();
}

// linalg_ldl_factor(_ex)(self, hermitian[, check_errors]) -> (LD, pivots[,
// info]): sytrf's lower Bunch-Kaufman factors, the upper triangle zeroed as
// torch returns it, pivots as LAPACK writes them (negative for 2 x 2 blocks).
Status ldl_factor_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, "self"));
  KILN_TRY(square(a, t, "self"));
  Mats ms = read_mats(t);
  const int64_t n = t.size(-1);
  std::vector<int> pivs, infos;
  for (Mat& x : ms.m) {
    std::vector<int> p(static_cast<size_t>(n), 0);
    int info = 0;
    if (n > 0) {
      int nn = static_cast<int>(n), lwork = std::max(1, nn) * 64;
      std::vector<double> work(static_cast<size_t>(lwork));
      dsytrf_("L", &nn, x.data(), &nn, p.data(), work.data(), &lwork, &info, 1);
    }
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < j; ++i) x(i, j) = 0;
    pivs.insert(pivs.end(), p.begin(), p.end());
    infos.push_back(info);
  }
  set_factor_outputs(a, ms.batch, ms.m, n, n, pivs, n, infos, t.dtype());
  return Status::ok();
}

// linalg_ldl_solve(LD, pivots, B, hermitian): A X = B with A = L D L^T from
// ldl_factor (lower, Bunch-Kaufman pivots as LAPACK's sytrf writes them).
Status ldl_solve_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor ld, floating_matrix(a, "LD"));
  KILN_ASSIGN_OR_RETURN(Tensor piv, a.tensor("pivots"));
  KILN_ASSIGN_OR_RETURN(Tensor B, floating_matrix(a, "B"));
  KILN_TRY(square(a, ld, "LD"));
  const int64_t n = ld.size(-1);
  if (B.size(-2) != n || piv.size(-1) != n) return a.error("LD, pivots and B do not match: " + B.type_string());
  KILN_ASSIGN_OR_RETURN(Shape batch, broadcast_batch(a, ld, B));
  const Mats ls = read_mats(ld, batch);
  Mats bs = read_mats(B, batch);
  const Tensor p = cast_copy(expand_to(piv, concat(batch, {n})), DType::Int64);
  for (size_t i = 0; i < ls.m.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(std::vector<int> pv, pivots_of(a, p, static_cast<int64_t>(i), n, true));
    Mat& x = bs.m[i];
    int info = 0;
    if (x.r > 0 && x.c > 0) dsytrs_("L", &x.r, &x.c, ls.m[i].data(), &x.r, pv.data(), x.data(), &x.r, &info, 1);
  }
  a.set_output(0, write_mats(batch, bs.m, B.size(-2), B.size(-1), wider(ld.dtype(), B.dtype())));
  return Status::ok();
}

// linalg_vander(x, N): x ** 0, x ** 1, ..., x ** (N - 1) along a new last dim.
Status vander_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("x"));
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> N, a.optional_int("N"));
  if (x.dim() == 0) x = x.reshape({1});  // one point: a [1, N] result, as PyTorch gives
  const int64_t cols = N.value_or(x.size(-1));
  if (cols < 0) return a.error("N must be non-negative");
  if (x.dtype() == DType::Bool) return a.error("vander of a bool tensor");
  Shape shape = x.sizes();
  shape.push_back(cols);
  const int64_t n = x.numel();
  Tensor out;
  if (is_floating(x.dtype())) {
    const Tensor d = cast_copy(x, DType::Float64);
    Tensor o = Tensor::zeros(DType::Float64, shape);
    for (int64_t i = 0; i < n; ++i) {
      double v = 1;
      for (int64_t j = 0; j < cols; ++j, v *= d.data<double>()[i]) o.data<double>()[i * cols + j] = v;
    }
    out = o.to(x.dtype());
  } else {
    // Integers multiply in int64 (wrapping), like PyTorch's cumprod of them.
    const Tensor d = cast_copy(x, DType::Int64);
    Tensor o = Tensor::zeros(DType::Int64, shape);
    for (int64_t i = 0; i < n; ++i) {
      uint64_t v = 1;
      for (int64_t j = 0; j < cols; ++j, v *= static_cast<uint64_t>(d.data<int64_t>()[i]))
        o.data<int64_t>()[i * cols + j] = static_cast<int64_t>(v);
    }
    out = o.to(x.dtype() == DType::UInt8 || x.dtype() == DType::Int8 || x.dtype() == DType::Int16 ||
                       x.dtype() == DType::Int32
                   ? DType::Int64
                   : x.dtype());
  }
  a.set_output(0, out);
  return Status::ok();
}

// linalg_diagonal(A, offset, dim1, dim2): diagonal's elements, copied.
Status linalg_diagonal_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, a.tensor("A"));
  KILN_ASSIGN_OR_RETURN(int64_t offset, a.int_arg("offset"));
  KILN_ASSIGN_OR_RETURN(int64_t d1, a.dim_arg("dim1", t.dim()));
  KILN_ASSIGN_OR_RETURN(int64_t d2, a.dim_arg("dim2", t.dim()));
  if (d1 == d2) return a.error("dim1 and dim2 must differ");
  const int64_t len = std::max<int64_t>(
      0, offset >= 0 ? std::min(t.size(d1), t.size(d2) - offset) : std::min(t.size(d1) + offset, t.size(d2)));
  Shape sizes, strides;
  for (int64_t i = 0; i < t.dim(); ++i)
    if (i != d1 && i != d2) {
      sizes.push_back(t.size(i));
      strides.push_back(t.strides()[static_cast<size_t>(i)]);
    }
  sizes.push_back(len);
  strides.push_back(t.strides()[static_cast<size_t>(d1)] + t.strides()[static_cast<size_t>(d2)]);
  int64_t start = t.storage_offset();
  if (len > 0)
    start +=
        offset >= 0 ? offset * t.strides()[static_cast<size_t>(d2)] : -offset * t.strides()[static_cast<size_t>(d1)];
  a.set_output(0, t.as_strided(sizes, strides, len > 0 ? start : t.storage_offset()).clone());
  return Status::ok();
}

// linalg_tensorinv(self, ind): the inverse of self seen as a
// prod(shape[:ind]) x prod(shape[ind:]) matrix, shaped shape[ind:] + shape[:ind].
Status tensorinv_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, "self", 1));
  KILN_ASSIGN_OR_RETURN(int64_t ind, a.int_arg("ind", 2));
  if (ind <= 0 || ind > t.dim()) return a.error("ind must be in [1, " + std::to_string(t.dim()) + "]");
  const Shape front(t.sizes().begin(), t.sizes().begin() + ind), back(t.sizes().begin() + ind, t.sizes().end());
  const int64_t rows = count_of(front), cols = count_of(back);
  if (rows != cols) return a.error("tensorinv: prod(shape[:ind]) must equal prod(shape[ind:]), got " + t.type_string());
  const Mat m = read_mats(t.reshape({rows, cols})).m[0];
  int info = 0;
  const Mat inv = inverse(m, &info);
  if (info > 0) return a.error("tensorinv of a singular tensor");
  Shape out_shape = back;
  out_shape.insert(out_shape.end(), front.begin(), front.end());
  a.set_output(0, write_mats({}, {inv}, rows, cols, t.dtype()).reshape(out_shape));
  return Status::ok();
}

// linalg_tensorsolve(self, other, dims): X with tensordot(self, X, X.dim()) = other.
Status tensorsolve_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, floating_matrix(a, "self", 1));
  KILN_ASSIGN_OR_RETURN(Tensor other, floating_matrix(a, "other", 0));
  KILN_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> dims, a.optional_ints("dims"));
  if (dims && !dims->empty()) {
    // The dims of self named by `dims` move to the end, in order.
    std::vector<int64_t> perm;
    std::vector<bool> moved(static_cast<size_t>(t.dim()), false);
    std::vector<int64_t> wrapped;
    for (int64_t d : *dims) {
      std::optional<int64_t> w = wrap_dim(d, t.dim());
      if (!w) return a.error(dim_out_of_range(d, t.dim()));
      moved[static_cast<size_t>(*w)] = true;
      wrapped.push_back(*w);
    }
    for (int64_t i = 0; i < t.dim(); ++i)
      if (!moved[static_cast<size_t>(i)]) perm.push_back(i);
    perm.insert(perm.end(), wrapped.begin(), wrapped.end());
    Shape sizes, strides;
    for (int64_t p : perm) {
      sizes.push_back(t.size(p));
      strides.push_back(t.strides()[static_cast<size_t>(p)]);
    }
    t = t.as_strided(sizes, strides, t.storage_offset());
  }
  if (other.dim() > t.dim()) return a.error("tensorsolve: other " + other.type_string() + " has more dims than self");
  // The result has self's trailing dims after other's rank; the system is
  // self seen as a square matrix of other's element count.
  const Shape rest(t.sizes().begin() + other.dim(), t.sizes().end());
  const int64_t rows = other.numel(), cols = count_of(rest);
  if (rows != cols) return a.error("tensorsolve: the system is not square: " + t.type_string());
  const Mat m = read_mats(t.contiguous().reshape({rows, cols})).m[0];
  const Mat b = read_mats(other.contiguous().reshape({rows, 1})).m[0];
  Lu f = lu_factor(m);
  if (f.info > 0) return a.error("tensorsolve of a singular system");
  const Mat x = lu_apply(f.lu, f.piv, b, false);
  a.set_output(0, write_mats({}, {x}, cols, 1, wider(t.dtype(), other.dtype())).reshape(rest));
  return Status::ok();
}

// fft_fftshift(self, dim) / fft_ifftshift(self, dim): a roll by half of each
// dim (all when None), forward or back.
Status fftshift_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor t, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> dims, a.optional_ints("dim"));
  const bool inverse_shift = a.node().op == ir::OpKind::kFftIfftshift;
  std::vector<int64_t> shift(static_cast<size_t>(t.dim()), 0);
  std::vector<int64_t> ds;
  if (dims) {
    for (int64_t d : *dims) {
      std::optional<int64_t> w = wrap_dim(d, t.dim());
      if (!w) return a.error(dim_out_of_range(d, t.dim()));
      ds.push_back(*w);
    }
  } else {
    for (int64_t i = 0; i < t.dim(); ++i) ds.push_back(i);
  }
  for (int64_t d : ds) {
    const int64_t n = t.size(d);
    shift[static_cast<size_t>(d)] = inverse_shift ? n - n / 2 : n / 2;
  }
  const Tensor src = t.contiguous();
  Tensor out = Tensor::zeros(t.dtype(), t.sizes());
  const size_t es = dtype_size(t.dtype());
  const int64_t total = t.numel();
  const Shape strides = contiguous_strides(t.sizes());
  const auto* in = static_cast<const uint8_t*>(src.raw_data());
  auto* o = static_cast<uint8_t*>(out.raw_data());
  for (int64_t i = 0; i < total; ++i) {
    // The output element i takes the input element `shift` behind it in every dim.
    int64_t rem = i, from = 0;
    for (int64_t d = 0; d < t.dim(); ++d) {
      const int64_t n = t.size(d), idx = rem / strides[static_cast<size_t>(d)];
      rem %= strides[static_cast<size_t>(d)];
      from += ((idx - shift[static_cast<size_t>(d)] + n) % n) * strides[static_cast<size_t>(d)];
    }
    std::memcpy(o + static_cast<size_t>(i) * es, in + static_cast<size_t>(from) * es, es);
  }
  a.set_output(0, out);
  return Status::ok();
}

}  // namespace

void register_factorize_kernels(KernelRegistry& r) {
  using K = ir::OpKind;
  for (K k : {K::kLinalgDetEx, K::kLinalgDet, K::kDet}) r.add(k, &det_kernel);
  for (K k : {K::kLinalgSlogdetEx, K::kLinalgSlogdet, K::kLogdet}) r.add(k, &slogdet_kernel);
  for (K k : {K::kLinalgInvEx, K::kLinalgInv, K::kInverse}) r.add(k, &inv_kernel);
  for (K k : {K::kLinalgSolveEx, K::kLinalgSolve}) r.add(k, &solve_kernel);
  for (K k : {K::kLinalgLuSolve, K::kLuSolve}) r.add(k, &lu_solve_kernel);
  r.add(K::kLinalgSolveTriangular, &solve_triangular_kernel);
  for (K k : {K::kCholesky, K::kLinalgCholesky, K::kLinalgCholeskyEx}) r.add(k, &cholesky_kernel);
  r.add(K::kCholeskySolve, &cholesky_solve_kernel);
  r.add(K::kCholeskyInverse, &cholesky_inverse_kernel);
  for (K k : {K::kLinalgSvdEx, K::kLinalgSvd, K::kLinalgSvdvals}) r.add(k, &svd_kernel);
  for (K k : {K::kLinalgEighEx, K::kLinalgEigh, K::kLinalgEigvalsh}) r.add(k, &eigh_kernel);
  for (K k : {K::kLinalgMatrixRankAtolRtolTensor, K::kLinalgMatrixRankAtolRtolFloat}) r.add(k, &matrix_rank_kernel);
  for (K k : {K::kLinalgPinvAtolRtolTensor, K::kLinalgPinvAtolRtolFloat, K::kPinverse}) r.add(k, &pinv_kernel);
  for (K k : {K::kLinalgMatrixNorm, K::kLinalgMatrixNormStrOrd}) r.add(k, &matrix_norm_kernel);
  r.add(K::kLinalgVectorNorm, &vector_norm_kernel);
  for (K k : {K::kLinalgNorm, K::kLinalgNormOrdStr}) r.add(k, &linalg_norm_kernel);
  for (K k : {K::kLinalgCond, K::kLinalgCondPStr}) r.add(k, &cond_kernel);
  r.add(K::kLinalgMatrixPower, &matrix_power_kernel);
  r.add(K::kLinalgMultiDot, &multi_dot_kernel);
  for (K k : {K::kLinalgMatrixExp, K::kMatrixExp}) r.add(k, &matrix_exp_kernel);
  r.add(K::kLinalgHouseholderProduct, &householder_kernel);
  r.add(K::kOrmqr, &ormqr_kernel);
  r.add(K::kLinalgLdlSolve, &ldl_solve_kernel);
  for (K k : {K::kLinalgQr, K::kQr, K::kGeqrf}) r.add(k, &qr_kernel);
  for (K k : {K::kLinalgLuFactor, K::kLinalgLuFactorEx, K::kLuWithInfo}) r.add(k, &lu_factor_kernel);
  r.add(K::kLuUnpack, &lu_unpack_kernel);
  r.add(K::kSvd, &svd_v_kernel);
  for (K k : {K::kLinalgLdlFactor, K::kLinalgLdlFactorEx}) r.add(k, &ldl_factor_kernel);
  r.add(K::kLinalgVander, &vander_kernel);
  r.add(K::kLinalgDiagonal, &linalg_diagonal_kernel);
  r.add(K::kLinalgTensorinv, &tensorinv_kernel);
  r.add(K::kLinalgTensorsolve, &tensorsolve_kernel);
  for (K k : {K::kFftFftshift, K::kFftIfftshift}) r.add(k, &fftshift_kernel);
}

}  // namespace kiln::cpu
