// Cumulative kernels along one dim: cumsum, cumprod and logcumsumexp. Each
// accumulates as ATen's CPU kernels do (double for float32 and float64,
// float for 16-bit floats, int64 with wrap-around for integers and bool,
// which cumsum and cumprod turn into int64 unless a dtype is given).
#include <cmath>
#include <limits>
#include <string>

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

}  // namespace

void register_cumulative_kernels(KernelRegistry& r) {
  r.add(ir::OpKind::kCumsum, &cumsum);
  r.add(ir::OpKind::kCumprod, &cumprod);
  r.add(ir::OpKind::kLogcumsumexp, &logcumsumexp);
}

}  // namespace kiln::cpu
