// Creation kernels: arange, full/zeros/ones (and their _like/new_ forms),
// empty (zero-filled here), scalar_tensor, fill and zero. Device, layout,
// pin_memory and memory_format arguments are accepted and ignored.
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/kernel.h"
#include "backends/cpu/philox.h"
#include "kiln/settings.h"

namespace kiln::cpu {

namespace {

// A tensor of `dtype` and `sizes` with every element equal to `value`; an
// error naming the node when the value does not fit the dtype.
Expected<Tensor> filled(const KernelArgs& a, DType dtype, const Shape& sizes, const Scalar& value) {
  auto v = scalar_to_dtype(value, dtype);
  if (!v.has_value()) return a.error(v.status().message());
  Tensor out = Tensor::zeros(dtype, sizes);
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T x = *v->data<T>();
    T* p = out.data<T>();
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) p[i] = x;
  });
  return out;
}

Expected<Shape> read_size(const KernelArgs& a, std::string_view name) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size, a.ints(name));
  auto n = checked_numel(size);
  if (!n.has_value()) return a.error("invalid '" + std::string(name) + "': " + n.status().message());
  return Shape(size);
}

Status arange_impl(KernelArgs& a, const Scalar& start, const Scalar& end, const Scalar& step) {
  KILN_ASSIGN_OR_RETURN(std::optional<DType> dtype_arg, a.dtype_arg("dtype"));
  const bool all_int =
      start.kind != Scalar::Kind::kFloat && end.kind != Scalar::Kind::kFloat && step.kind != Scalar::Kind::kFloat;
  const DType dtype = dtype_arg.value_or(all_int ? DType::Int64 : DType::Float32);
  if (dtype == DType::Bool) return a.error("arange does not support bool results");
  const double xstart = start.to_double(), xend = end.to_double(), xstep = step.to_double();
  if (!std::isfinite(xstart) || !std::isfinite(xend)) return a.error("arange bounds must be finite");
  if (xstep == 0) return a.error("arange step must be nonzero");
  if ((xstep > 0 && xend < xstart) || (xstep < 0 && xend > xstart))
    return a.error("arange upper bound and lower bound are inconsistent with step sign (start " +
                   std::to_string(xstart) + ", end " + std::to_string(xend) + ", step " + std::to_string(xstep) + ")");
  for (const Scalar* s : {&start, &end, &step})
    if (s->kind == Scalar::Kind::kFloat && !(std::abs(s->f) < 9.0e18))
      return a.error("arange argument " + std::to_string(s->f) + " is out of range");
  // Integer arguments count exactly; otherwise the count is ceil((end - start) / step)
  // in double. Integer dtypes take start and step truncated toward zero.
  int64_t n = 0;
  if (all_int) {
    const __int128 st = step.i, sgn = step.i > 0 ? 1 : -1;
    const __int128 count = (static_cast<__int128>(end.i) - start.i + st - sgn) / st;
    if (count < 0 || count > std::numeric_limits<int64_t>::max()) return a.error("arange has an invalid size");
    n = static_cast<int64_t>(count);
  } else {
    const double size_d = std::ceil((xend - xstart) / xstep);
    if (!(size_d >= 0 && size_d < 9.0e18)) return a.error("arange has an invalid number of elements");
    n = static_cast<int64_t>(size_d);
  }
  if (n > (int64_t{1} << 40)) return a.error("arange would have " + std::to_string(n) + " elements");
  if (!is_floating(dtype) && n > 0 && step.i == 0)
    return a.error("arange step " + std::to_string(xstep) + " truncates to 0 for an integer dtype");
  Tensor out = Tensor::zeros(dtype, {n});
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = out.data<T>();
    // start + step * i in ATen's CPU accumulate type: int64 for integers,
    // float for 16-bit floats, double for float32/float64.
    if constexpr (std::is_integral_v<T>) {
      const auto s0 = static_cast<uint64_t>(start.i), ds = static_cast<uint64_t>(step.i);
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(s0 + ds * static_cast<uint64_t>(i));
    } else if constexpr (is_reduced_float_v<T>) {
      const float s0 = static_cast<float>(xstart), ds = static_cast<float>(xstep);
      for (int64_t i = 0; i < n; ++i) p[i] = T(s0 + ds * static_cast<float>(i));
    } else {
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(xstart + xstep * static_cast<double>(i));
    }
  });
  a.set_output(0, out);
  return Status::ok();
}

Status arange(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Scalar end, a.scalar("end"));
  return arange_impl(a, Scalar::of_int(0), end, Scalar::of_int(1));
}

Status arange_start(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Scalar start, a.scalar("start", Scalar::of_int(0)));
  KILN_ASSIGN_OR_RETURN(Scalar end, a.scalar("end"));
  KILN_ASSIGN_OR_RETURN(Scalar step, a.scalar("step", Scalar::of_int(1)));
  return arange_impl(a, start, end, step);
}

// full(size, fill_value): without a dtype, bool -> bool, int -> int64, float -> float32.
Status full(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Shape size, read_size(a, "size"));
  KILN_ASSIGN_OR_RETURN(Scalar value, a.scalar("fill_value"));
  KILN_ASSIGN_OR_RETURN(std::optional<DType> dtype, a.dtype_arg("dtype"));
  const DType inferred = value.kind == Scalar::Kind::kBool  ? DType::Bool
                         : value.kind == Scalar::Kind::kInt ? DType::Int64
                                                            : DType::Float32;
  KILN_ASSIGN_OR_RETURN(Tensor out, filled(a, dtype.value_or(inferred), size, value));
  a.set_output(0, out);
  return Status::ok();
}

Status full_like(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Scalar value, a.scalar("fill_value"));
  KILN_ASSIGN_OR_RETURN(std::optional<DType> dtype, a.dtype_arg("dtype"));
  KILN_ASSIGN_OR_RETURN(Tensor out, filled(a, dtype.value_or(self.dtype()), self.sizes(), value));
  a.set_output(0, out);
  return Status::ok();
}

// zeros / ones / empty(size, dtype=float32).
template <int kValue>
Status constant_of_size(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Shape size, read_size(a, "size"));
  KILN_ASSIGN_OR_RETURN(std::optional<DType> dtype, a.dtype_arg("dtype"));
  KILN_ASSIGN_OR_RETURN(Tensor out, filled(a, dtype.value_or(DType::Float32), size, Scalar::of_int(kValue)));
  a.set_output(0, out);
  return Status::ok();
}

// zeros_like / ones_like(self, dtype=self.dtype).
template <int kValue>
Status constant_like(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::optional<DType> dtype, a.dtype_arg("dtype"));
  KILN_ASSIGN_OR_RETURN(Tensor out, filled(a, dtype.value_or(self.dtype()), self.sizes(), Scalar::of_int(kValue)));
  a.set_output(0, out);
  return Status::ok();
}

// new_zeros / new_ones(self, size, dtype=self.dtype).
template <int kValue>
Status constant_new(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Shape size, read_size(a, "size"));
  KILN_ASSIGN_OR_RETURN(std::optional<DType> dtype, a.dtype_arg("dtype"));
  KILN_ASSIGN_OR_RETURN(Tensor out, filled(a, dtype.value_or(self.dtype()), size, Scalar::of_int(kValue)));
  a.set_output(0, out);
  return Status::ok();
}

// scalar_tensor(s, dtype=float32): a 0-d tensor.
Status scalar_tensor(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Scalar s, a.scalar("s"));
  KILN_ASSIGN_OR_RETURN(std::optional<DType> dtype, a.dtype_arg("dtype"));
  KILN_ASSIGN_OR_RETURN(Tensor out, filled(a, dtype.value_or(DType::Float32), {}, s));
  a.set_output(0, out);
  return Status::ok();
}

// fill.Scalar(self, value): self's shape and dtype, every element `value`.
Status fill_scalar(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Scalar value, a.scalar("value"));
  KILN_ASSIGN_OR_RETURN(Tensor out, filled(a, self.dtype(), self.sizes(), value));
  a.set_output(0, out);
  return Status::ok();
}

Status zero(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  a.set_output(0, Tensor::zeros(self.dtype(), self.sizes()));
  return Status::ok();
}

// linspace / logspace (start, end, steps, [base,] dtype), start and end
// numbers or one-element tensors: steps points from start to end, each half
// counted from its own end as ATen does (so both ends are exact); logspace
// raises base to them. float32 unless a dtype is given.
Status spaced(KernelArgs& a, bool log) {
  KILN_ASSIGN_OR_RETURN(Scalar start, a.scalar("start"));
  KILN_ASSIGN_OR_RETURN(Scalar end, a.scalar("end"));
  KILN_ASSIGN_OR_RETURN(int64_t steps, a.int_arg("steps"));
  KILN_ASSIGN_OR_RETURN(double base, a.float_arg("base", 10.0));
  KILN_ASSIGN_OR_RETURN(std::optional<DType> dtype, a.dtype_arg("dtype"));
  if (steps < 0) return a.error("steps must be non-negative, got " + std::to_string(steps));
  const double lo = start.to_double(), hi = end.to_double();
  Tensor out = Tensor::zeros(DType::Float64, {steps});
  double* p = out.data<double>();
  const double step = steps > 1 ? (hi - lo) / static_cast<double>(steps - 1) : 0.0;
  for (int64_t i = 0; i < steps; ++i) {
    const double v =
        i < steps / 2 ? lo + step * static_cast<double>(i) : hi - step * static_cast<double>(steps - 1 - i);
    p[i] = log ? std::pow(base, v) : v;
  }
  if (steps == 1) p[0] = log ? std::pow(base, lo) : lo;
  a.set_output(0, out.to(dtype.value_or(DType::Float32)));
  return Status::ok();
}

Status linspace(KernelArgs& a) { return spaced(a, false); }
Status logspace(KernelArgs& a) { return spaced(a, true); }

// The process's random stream: its key is Settings::seed (KILN_SEED, default
// 0), read at the first draw; each draw takes the next blocks of the counter,
// so calls get new values.
uint64_t random_seed() {
  static const uint64_t seed = settings().seed;
  return seed;
}
std::atomic<uint64_t> random_blocks{0};

// `n` words of the stream, for one draw.
std::vector<uint32_t> random_words(int64_t n) {
  const uint64_t blocks = static_cast<uint64_t>((n + 3) / 4);
  const uint64_t first = random_blocks.fetch_add(blocks);
  const uint64_t seed = random_seed();
  const std::array<uint32_t, 2> key = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  std::vector<uint32_t> words(blocks * 4);
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t at = first + b;
    const auto w = philox4x32_10({static_cast<uint32_t>(at), static_cast<uint32_t>(at >> 32), 0, 0}, key);
    std::copy(w.begin(), w.end(), words.begin() + static_cast<ptrdiff_t>(b * 4));
  }
  return words;
}

// Values uniform on [0, 1) (normal: standard normal, by Box-Muller) in a
// floating dtype; uniform values carry as many random bits as the dtype's
// significand holds, so none rounds up to 1.
Expected<Tensor> random_tensor(const KernelArgs& a, DType dtype, const Shape& sizes, bool normal) {
  if (!is_floating(dtype)) return a.error("random values need a floating dtype, got " + std::string(dtype_name(dtype)));
  Tensor out = Tensor::zeros(dtype, sizes);
  const int64_t n = out.numel();
  const int bits = dtype == DType::Float16 ? 11 : dtype == DType::BFloat16 ? 8 : 24;
  const std::vector<uint32_t> w = random_words(normal ? 2 * n : n);
  auto uniform = [&](int64_t i) {
    return static_cast<double>(w[static_cast<size_t>(i)] >> (32 - bits)) / double(1u << bits);
  };
  visit_floating(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = out.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      double v = uniform(i);
      if (normal) {
        // 1 - u is in (0, 1]: its log is finite.
        const double u1 = 1.0 - static_cast<double>(w[static_cast<size_t>(2 * i)]) / 4294967296.0;
        const double u2 = static_cast<double>(w[static_cast<size_t>(2 * i + 1)]) / 4294967296.0;
        v = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
      }
      if constexpr (std::is_same_v<T, double>) {
        p[i] = v;
      } else {
        p[i] = T(static_cast<float>(v));
      }
    }
  });
  return out;
}

// rand / randn(size, dtype=float32); rand_like / randn_like(self, dtype=self.dtype).
template <bool kNormal, bool kLike>
Status random_op(KernelArgs& a) {
  Shape sizes;
  DType dtype = DType::Float32;
  if constexpr (kLike) {
    KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
    sizes = self.sizes();
    dtype = self.dtype();
  } else {
    KILN_ASSIGN_OR_RETURN(sizes, read_size(a, "size"));
  }
  KILN_ASSIGN_OR_RETURN(std::optional<DType> given, a.dtype_arg("dtype"));
  KILN_ASSIGN_OR_RETURN(Tensor out, random_tensor(a, given.value_or(dtype), sizes, kNormal));
  a.set_output(0, out);
  return Status::ok();
}

}  // namespace

void register_creation_kernels(KernelRegistry& r) {
  using ir::OpKind;
  r.add(OpKind::kRand, &random_op<false, false>);
  r.add(OpKind::kRandn, &random_op<true, false>);
  r.add(OpKind::kRandLike, &random_op<false, true>);
  r.add(OpKind::kRandnLike, &random_op<true, true>);
  for (OpKind k :
       {OpKind::kLinspace, OpKind::kLinspaceTensorTensor, OpKind::kLinspaceTensorScalar, OpKind::kLinspaceScalarTensor})
    r.add(k, &linspace);
  for (OpKind k :
       {OpKind::kLogspace, OpKind::kLogspaceTensorTensor, OpKind::kLogspaceTensorScalar, OpKind::kLogspaceScalarTensor})
    r.add(k, &logspace);
  r.add(OpKind::kArange, &arange);
  r.add(OpKind::kArangeStart, &arange_start);
  r.add(OpKind::kArangeStartStep, &arange_start);
  r.add(OpKind::kFull, &full);
  r.add(OpKind::kFullLike, &full_like);
  r.add(OpKind::kZeros, &constant_of_size<0>);
  r.add(OpKind::kOnes, &constant_of_size<1>);
  r.add(OpKind::kEmpty, &constant_of_size<0>);
  r.add(OpKind::kZerosLike, &constant_like<0>);
  r.add(OpKind::kOnesLike, &constant_like<1>);
  r.add(OpKind::kNewZeros, &constant_new<0>);
  r.add(OpKind::kNewOnes, &constant_new<1>);
  r.add(OpKind::kScalarTensor, &scalar_tensor);
  r.add(OpKind::kFillScalar, &fill_scalar);
  r.add(OpKind::kZero, &zero);
}

}  // namespace kiln::cpu
