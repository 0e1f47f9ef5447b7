// Cumulative kernels along one dim: cumsum, cumprod, logcumsumexp, cummax and cummin, and
// gradient (finite differences along each dim). Each scan
// accumulates as ATen's CPU kernels do (double for float32 and float64,
// float for 16-bit floats, int64 with wrap-around for integers and bool,
// which cumsum and cumprod turn into int64 unless a dtype is given).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

enum class Scan { kSum, kProd, kLogSumExp };

// Scans `out` (a fresh contiguous copy of the input in its result dtype) in place along dim d.
void scan_along(Tensor& out, int64_t d, Scan kind) {
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= out.size(k);
  for (int64_t k = d + 1; k < out.dim(); ++k) inner *= out.size(k);
  const int64_t len = out.dim() == 0 ? 1 : out.size(d);
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using Acc = std::conditional_t<is_reduced_float_v<T>, float,
                                   std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>>;
    T* p = out.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        Acc acc = kind == Scan::kProd ? Acc(1) : Acc(0);
        if constexpr (!std::is_same_v<Acc, uint64_t>) {
          if (kind == Scan::kLogSumExp) acc = -std::numeric_limits<Acc>::infinity();
        }
        for (int64_t j = 0; j < len; ++j) {
          T& x = p[(o * len + j) * inner + i];
          if constexpr (std::is_same_v<Acc, uint64_t>) {
            const auto v = static_cast<uint64_t>(static_cast<int64_t>(x));
            acc = kind == Scan::kProd ? acc * v : acc + v;
            x = convert<T>(static_cast<int64_t>(acc));
          } else {
            const auto v = static_cast<Acc>(load(x));
            if (kind == Scan::kSum) {
              acc += v;
            } else if (kind == Scan::kProd) {
              acc *= v;
            } else if (std::isnan(v) || std::isnan(acc)) {
              acc = std::isnan(v) ? v : acc;
            } else {
              // log(e^acc + e^v) from the larger, keeping equal infinities as they are.
              const Acc lo = std::min(acc, v), hi = std::max(acc, v);
              if (lo != hi || std::isfinite(lo)) acc = hi + std::log1p(std::exp(lo - hi));
            }
            x = convert<T>(acc);
          }
        }
      }
  });
}

// cummax / cummin(self, dim) -> (values, indices), as ATen's CPU kernel: an
// element equal to the running extreme takes its place (the later index
// wins), and a NaN, once met, stays, each later NaN taking the index.
Status cumulative_extreme(KernelArgs& a, bool want_max) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim, a.int_arg("dim"));
  auto d = wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  if (!d) return a.error(dim_out_of_range(dim, self.dim()) + " (argument 'dim')");
  Tensor values = cast_copy(self, self.dtype());
  Tensor indices = Tensor::zeros(DType::Int64, self.sizes());
  const int64_t axis = self.dim() == 0 ? 0 : *d;
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= values.size(k);
  for (int64_t k = axis + 1; k < values.dim(); ++k) inner *= values.size(k);
  const int64_t len = values.dim() == 0 ? 1 : values.size(axis);
  int64_t* ix = indices.data<int64_t>();
  visit_dtype(values.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = values.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        if (len == 0) continue;
        auto best = load(p[o * len * inner + i]);
        int64_t at = 0;
        for (int64_t j = 0; j < len; ++j) {
          const int64_t k = (o * len + j) * inner + i;
          const auto x = load(p[k]);
          const bool x_nan = x != x, best_nan = best != best;  // NaN only for floating types
          if (x_nan || (!best_nan && (want_max ? x >= best : x <= best))) {
            best = x;
            at = j;
          }
          p[k] = convert<T>(best);
          ix[k] = at;
        }
      }
  });
  a.set_output(0, values);
  a.set_output(1, indices);
  return Status::ok();
}

Status cummax(KernelArgs& a) { return cumulative_extreme(a, true); }
Status cummin(KernelArgs& a) { return cumulative_extreme(a, false); }

Status scan_kernel(KernelArgs& a, Scan kind) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim, a.int_arg("dim"));
  auto d = wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  if (!d) return a.error(dim_out_of_range(dim, self.dim()) + " (argument 'dim')");
  DType dtype = self.dtype();
  if (kind == Scan::kLogSumExp) {
    if (!is_floating(dtype)) return a.error("logcumsumexp takes a floating tensor, got " + self.type_string());
  } else {
    KILN_ASSIGN_OR_RETURN(std::optional<DType> dtype_arg, a.dtype_arg("dtype"));
    dtype = dtype_arg.value_or(is_floating(self.dtype()) ? self.dtype() : DType::Int64);
  }
  Tensor out = cast_copy(self, dtype);
  scan_along(out, self.dim() == 0 ? 0 : *d, kind);
  a.set_output(0, out);
  return Status::ok();
}

Status cumsum(KernelArgs& a) { return scan_kernel(a, Scan::kSum); }
Status cumprod(KernelArgs& a) { return scan_kernel(a, Scan::kProd); }
Status logcumsumexp(KernelArgs& a) { return scan_kernel(a, Scan::kLogSumExp); }

// gradient.scalarint(self, spacing, dim, edge_order) -> one tensor per dim
// (every dim when dim is None): (x[i+1] - x[i-1]) / 2h inside; at the edges
// (x[1] - x[0]) / h (edge_order 1) or (-3/2 x[0] + 2 x[1] - 1/2 x[2]) / h
// (edge_order 2), mirrored at the end. Computed in double, rounded once.
Status gradient(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::optional<Scalar> spacing, a.optional_scalar("spacing"));
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> dim, a.optional_int("dim"));
  KILN_ASSIGN_OR_RETURN(int64_t order, a.int_arg("edge_order"));
  if (order != 1 && order != 2) return a.error("edge_order must be 1 or 2, got " + std::to_string(order));
  if (self.dim() == 0) return a.error("gradient of a 0-d tensor");
  const double h = spacing ? spacing->to_double() : 1.0;
  std::vector<int64_t> dims;
  if (dim) {
    auto d = wrap_dim(*dim, self.dim());
    if (!d) return a.error(dim_out_of_range(*dim, self.dim()) + " (argument 'dim')");
    dims.push_back(*d);
  } else {
    for (int64_t d = 0; d < self.dim(); ++d) dims.push_back(d);
  }
  const DType dt = is_floating(self.dtype()) ? self.dtype() : DType::Float32;
  const Tensor x = cast_copy(self, DType::Float64);
  for (size_t k = 0; k < dims.size(); ++k) {
    const int64_t d = dims[k], len = self.size(d);
    if (len < order + 1)
      return a.error("gradient needs at least " + std::to_string(order + 1) + " elements along dim " +
                     std::to_string(d) + ", got " + self.type_string());
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < d; ++i) outer *= self.size(i);
    for (int64_t i = d + 1; i < self.dim(); ++i) inner *= self.size(i);
    Tensor out = Tensor::zeros(DType::Float64, self.sizes());
    const double* p = x.data<double>();
    double* q = out.data<double>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        auto at = [&](int64_t j) { return (o * len + j) * inner + i; };
        for (int64_t j = 1; j + 1 < len; ++j) q[at(j)] = (p[at(j + 1)] - p[at(j - 1)]) / h / 2;
        if (order == 1) {
          q[at(0)] = (p[at(1)] - p[at(0)]) / h;
          q[at(len - 1)] = (p[at(len - 1)] - p[at(len - 2)]) / h;
        } else {
          q[at(0)] = (-1.5 * p[at(0)] + 2 * p[at(1)] - 0.5 * p[at(2)]) / h;
          q[at(len - 1)] = (1.5 * p[at(len - 1)] - 2 * p[at(len - 2)] + 0.5 * p[at(len - 3)]) / h;
        }
      }
    a.set_output(k, out.to(dt));
  }
  return Status::ok();
}

}  // namespace

void register_cumulative_kernels(KernelRegistry& r) {
  r.add(ir::OpKind::kGradientScalarInt, &gradient);
  r.add(ir::OpKind::kCumsum, &cumsum);
  r.add(ir::OpKind::kCummax, &cummax);
  r.add(ir::OpKind::kCummin, &cummin);
  r.add(ir::OpKind::kCumprod, &cumprod);
  r.add(ir::OpKind::kLogcumsumexp, &logcumsumexp);
}

}  // namespace kiln::cpu
