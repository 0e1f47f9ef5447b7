// Reductions (sum, mean, amax/amin, max.dim, argmax, var, any) and softmax.
//
// A reduction permutes the reduced dims to the end and copies the input into a
// wide type (double for floating types, int64 otherwise), so each output
// element reduces one contiguous run. Floating sums accumulate in double;
// integer sums wrap in 64 bits, which truncates to the same value PyTorch's
// narrower accumulators produce.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

Expected<int64_t> wrap_dim(const KernelArgs& a, int64_t dim, int64_t ndim) {
  const int64_t n = std::max<int64_t>(ndim, 1);  // a 0-d tensor accepts dim 0 and -1
  if (dim < -n || dim >= n)
    return a.error("dim " + std::to_string(dim) + " is out of range for a tensor of rank " + std::to_string(ndim));
  return dim < 0 ? dim + n : dim;
}

// Which dims a reduction folds away, and the layout it works on.
struct ReducePlan {
  std::vector<bool> reduced;  // one flag per input dim
  Shape out_shape;            // keepdim applied
  int64_t outer = 1;          // number of output elements
  int64_t inner = 1;          // elements folded into each output
};

// `dims`: nullopt or empty reduces every dim.
Expected<ReducePlan> plan_reduction(const KernelArgs& a, const Tensor& x,
                                    const std::optional<std::vector<int64_t>>& dims, bool keepdim) {
  const int64_t nd = x.dim();
  ReducePlan p;
  p.reduced.assign(static_cast<size_t>(nd), !dims || dims->empty());
  if (dims && !dims->empty()) {
    std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(nd, 1)), false);
    for (int64_t d : *dims) {
      KILN_ASSIGN_OR_RETURN(int64_t w, wrap_dim(a, d, nd));
      if (seen[static_cast<size_t>(w)]) return a.error("dim " + std::to_string(w) + " appears more than once in 'dim'");
      seen[static_cast<size_t>(w)] = true;
      if (nd > 0) p.reduced[static_cast<size_t>(w)] = true;
    }
  }
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t s = x.size(d);
    if (p.reduced[static_cast<size_t>(d)]) {
      p.inner *= s;
      if (keepdim) p.out_shape.push_back(1);
    } else {
      p.outer *= s;
      p.out_shape.push_back(s);
    }
  }
  return p;
}

DType wide_type(DType t) { return is_floating(t) ? DType::Float64 : DType::Int64; }

// x with kept dims first and reduced dims last, converted to `wide` and contiguous: [outer, inner].
Tensor arrange(const Tensor& x, const ReducePlan& p, DType wide) {
  Shape sizes, strides;
  for (int pass = 0; pass < 2; ++pass)
    for (size_t d = 0; d < p.reduced.size(); ++d)
      if (p.reduced[d] == (pass == 1)) {
        sizes.push_back(x.sizes()[d]);
        strides.push_back(x.strides()[d]);
      }
  return x.as_strided(sizes, strides, x.storage_offset()).to(wide).contiguous();
}

Status require_nonempty(const KernelArgs& a, const Tensor& x, const ReducePlan& p, const char* op) {
  for (size_t d = 0; d < p.reduced.size(); ++d)
    if (p.reduced[d] && x.sizes()[d] == 0)
      return a.error(std::string(op) + " over dim " + std::to_string(d) + " of size 0 of " + x.type_string() +
                     " has no identity");
  return Status::ok();
}

// ---- sum / mean

Status sum_like(KernelArgs& a, const Tensor& input, const std::optional<std::vector<int64_t>>& dims, bool keepdim,
                std::optional<DType> dtype, bool mean) {
  Tensor x = dtype ? input.to(*dtype) : input;
  DType out_dtype = x.dtype();
  if (mean) {
    if (!is_floating(out_dtype))
      return a.error("mean needs a floating-point input or dtype, got " + std::string(dtype_name(out_dtype)));
  } else if (!dtype && !is_floating(out_dtype)) {
    out_dtype = DType::Int64;  // sums of integers and bools are int64 unless a dtype is given
  }
  KILN_ASSIGN_OR_RETURN(ReducePlan p, plan_reduction(a, x, dims, keepdim));
  const DType wide = wide_type(x.dtype());
  Tensor v = arrange(x, p, wide);
  Tensor out = Tensor::zeros(wide, p.out_shape);
  if (wide == DType::Float64) {
    const double* src = v.data<double>();
    double* dst = out.data<double>();
    for (int64_t o = 0; o < p.outer; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < p.inner; ++i) acc += src[o * p.inner + i];
      dst[o] = mean ? acc / static_cast<double>(p.inner) : acc;
    }
  } else {
    const int64_t* src = v.data<int64_t>();
    int64_t* dst = out.data<int64_t>();
    for (int64_t o = 0; o < p.outer; ++o) {
      uint64_t acc = 0;
      for (int64_t i = 0; i < p.inner; ++i) acc += static_cast<uint64_t>(src[o * p.inner + i]);
      dst[o] = static_cast<int64_t>(acc);
    }
  }
  a.set_output(0, out.to(out_dtype));
  return Status::ok();
}

Status sum_dim(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(auto dims, a.optional_ints("dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, a.bool_arg("keepdim"));
  KILN_ASSIGN_OR_RETURN(auto dtype, a.dtype_arg("dtype"));
  return sum_like(a, x, dims, keepdim, dtype, /*mean=*/false);
}

Status sum_all(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(auto dtype, a.dtype_arg("dtype"));
  return sum_like(a, x, std::nullopt, false, dtype, /*mean=*/false);
}

Status mean_dim(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(auto dims, a.optional_ints("dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, a.bool_arg("keepdim"));
  KILN_ASSIGN_OR_RETURN(auto dtype, a.dtype_arg("dtype"));
  return sum_like(a, x, dims, keepdim, dtype, /*mean=*/true);
}

Status mean_all(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(auto dtype, a.dtype_arg("dtype"));
  return sum_like(a, x, std::nullopt, false, dtype, /*mean=*/true);
}

// ---- amax / amin / max.dim / argmax

// Index of the extreme of run[0, n) (first occurrence; the first NaN wins for floats).
template <typename W>
int64_t extreme_index(const W* run, int64_t n, bool want_max) {
  int64_t best = 0;
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_floating_point_v<W>) {
      if (std::isnan(run[i])) return i;
    }
    if (want_max ? run[i] > run[best] : run[i] < run[best]) best = i;
  }
  return best;
}

// Fills values (wide type) and indices (int64) for each output element.
void reduce_extreme(const Tensor& v, const ReducePlan& p, bool want_max, Tensor* values, Tensor* indices) {
  auto run = [&](auto tag) {
    using W = decltype(tag);
    const W* src = v.data<W>();
    for (int64_t o = 0; o < p.outer; ++o) {
      const int64_t i = extreme_index(src + o * p.inner, p.inner, want_max);
      if (values) values->data<W>()[o] = src[o * p.inner + i];
      if (indices) indices->data<int64_t>()[o] = i;
    }
  };
  if (v.dtype() == DType::Float64)
    run(double{});
  else
    run(int64_t{});
}

Status amax_amin(KernelArgs& a, bool want_max) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(auto dims, a.ints("dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, a.bool_arg("keepdim"));
  KILN_ASSIGN_OR_RETURN(ReducePlan p, plan_reduction(a, x, dims, keepdim));
  KILN_TRY(require_nonempty(a, x, p, want_max ? "amax" : "amin"));
  const DType wide = wide_type(x.dtype());
  Tensor values = Tensor::zeros(wide, p.out_shape);
  reduce_extreme(arrange(x, p, wide), p, want_max, &values, nullptr);
  a.set_output(0, values.to(x.dtype()));
  return Status::ok();
}

Status amax(KernelArgs& a) { return amax_amin(a, true); }
Status amin(KernelArgs& a) { return amax_amin(a, false); }

// max.dim / min.dim(self, dim, keepdim) -> (values, indices).
Status extreme_dim(KernelArgs& a, bool want_max) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim, a.int_arg("dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, a.bool_arg("keepdim"));
  KILN_ASSIGN_OR_RETURN(ReducePlan p, plan_reduction(a, x, std::vector<int64_t>{dim}, keepdim));
  KILN_TRY(require_nonempty(a, x, p, want_max ? "max" : "min"));
  const DType wide = wide_type(x.dtype());
  Tensor values = Tensor::zeros(wide, p.out_shape);
  Tensor indices = Tensor::zeros(DType::Int64, p.out_shape);
  reduce_extreme(arrange(x, p, wide), p, want_max, &values, &indices);
  a.set_output(0, values.to(x.dtype()));
  a.set_output(1, indices);
  return Status::ok();
}

Status max_dim(KernelArgs& a) { return extreme_dim(a, true); }
Status min_dim(KernelArgs& a) { return extreme_dim(a, false); }

// aminmax(self, dim=None, keepdim=False) -> (min, max); without a dim over every element.
Status aminmax(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(auto dim, a.optional_int("dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, a.bool_arg("keepdim"));
  std::optional<std::vector<int64_t>> dims;
  if (dim) dims = std::vector<int64_t>{*dim};
  KILN_ASSIGN_OR_RETURN(ReducePlan p, plan_reduction(a, x, dims, keepdim));
  KILN_TRY(require_nonempty(a, x, p, "aminmax"));
  const DType wide = wide_type(x.dtype());
  const Tensor arranged = arrange(x, p, wide);
  for (int k = 0; k < 2; ++k) {
    Tensor values = Tensor::zeros(wide, p.out_shape);
    reduce_extreme(arranged, p, k == 1, &values, nullptr);
    a.set_output(k, values.to(x.dtype()));
  }
  return Status::ok();
}

// mode(self, dim=-1, keepdim=False) -> (values, indices): the most frequent
// value of each slice, the smallest among equally frequent ones, and the
// index ATen's CPU kernel gives it: the slice's (value, index) pairs sorted
// by value alone (std::sort, as ATen), the index of the last pair of the run.
Status mode(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim, a.int_arg("dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, a.bool_arg("keepdim"));
  const std::vector<int64_t> dims = x.dim() == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{dim};
  KILN_ASSIGN_OR_RETURN(ReducePlan p, plan_reduction(a, x, dims, keepdim));
  KILN_TRY(require_nonempty(a, x, p, "mode"));
  const DType wide = wide_type(x.dtype());
  const Tensor v = arrange(x, p, wide);
  Tensor values = Tensor::zeros(wide, p.out_shape);
  Tensor indices = Tensor::zeros(DType::Int64, p.out_shape);
  auto run = [&](auto tag) {
    using W = decltype(tag);
    const W* src = v.data<W>();
    std::vector<std::pair<W, int64_t>> run_of(static_cast<size_t>(p.inner));
    for (int64_t o = 0; o < p.outer; ++o) {
      for (int64_t i = 0; i < p.inner; ++i) run_of[static_cast<size_t>(i)] = {src[o * p.inner + i], i};
      std::sort(run_of.begin(), run_of.end(), [](const auto& l, const auto& r) { return l.first < r.first; });
      int64_t freq = 0, best_freq = 0;
      for (size_t i = 0; i < run_of.size(); ++i) {
        ++freq;
        if (i + 1 == run_of.size() || run_of[i].first != run_of[i + 1].first) {
          if (freq > best_freq) {
            values.data<W>()[o] = run_of[i].first;
            indices.data<int64_t>()[o] = run_of[i].second;
            best_freq = freq;
          }
          freq = 0;
        }
      }
    }
  };
  if (wide == DType::Float64)
    run(double{});
  else
    run(int64_t{});
  a.set_output(0, values.to(x.dtype()));
  a.set_output(1, indices);
  return Status::ok();
}

Status arg_extreme(KernelArgs& a, bool want_max) {
  const char* name = want_max ? "argmax" : "argmin";
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(auto dim, a.optional_int("dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, a.bool_arg("keepdim"));
  std::optional<std::vector<int64_t>> dims;
  if (dim) dims = std::vector<int64_t>{*dim};
  if (!dim && x.numel() == 0)
    return a.error(std::string(name) + " of the empty tensor " + x.type_string() + " needs a dim");
  // With dim=None the input is flattened; keepdim then keeps every dim as size 1.
  KILN_ASSIGN_OR_RETURN(ReducePlan p, plan_reduction(a, x, dims, keepdim));
  KILN_TRY(require_nonempty(a, x, p, name));
  Tensor indices = Tensor::zeros(DType::Int64, p.out_shape);
  reduce_extreme(arrange(x, p, wide_type(x.dtype())), p, want_max, nullptr, &indices);
  a.set_output(0, indices);
  return Status::ok();
}

Status argmax(KernelArgs& a) { return arg_extreme(a, true); }
Status argmin(KernelArgs& a) { return arg_extreme(a, false); }

// ---- var / var_mean

Status var_like(KernelArgs& a, bool with_mean) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(auto dims, a.optional_ints("dim"));
  KILN_ASSIGN_OR_RETURN(auto correction, a.optional_scalar("correction"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, a.bool_arg("keepdim"));
  if (!is_floating(x.dtype()))
    return a.error("var needs a floating-point input, got " + std::string(dtype_name(x.dtype())));
  const double c = correction ? correction->to_double() : 1.0;
  KILN_ASSIGN_OR_RETURN(ReducePlan p, plan_reduction(a, x, dims, keepdim));
  Tensor v = arrange(x, p, DType::Float64);
  Tensor var = Tensor::zeros(DType::Float64, p.out_shape);
  Tensor mean = Tensor::zeros(DType::Float64, p.out_shape);
  const double divisor = std::max(0.0, static_cast<double>(p.inner) - c);
  for (int64_t o = 0; o < p.outer; ++o) {
    const double* run = v.data<double>() + o * p.inner;
    double sum = 0;
    for (int64_t i = 0; i < p.inner; ++i) sum += run[i];
    const double m = sum / static_cast<double>(p.inner);
    double m2 = 0;
    for (int64_t i = 0; i < p.inner; ++i) m2 += (run[i] - m) * (run[i] - m);
    var.data<double>()[o] = m2 / divisor;  // divisor 0 gives inf or NaN, as in PyTorch
    mean.data<double>()[o] = m;
  }
  a.set_output(0, var.to(x.dtype()));
  if (with_mean) a.set_output(1, mean.to(x.dtype()));
  return Status::ok();
}

Status var_correction(KernelArgs& a) { return var_like(a, false); }
Status var_mean_correction(KernelArgs& a) { return var_like(a, true); }

// ---- any

// any (or, with `all`, all) of the elements over dims: true where one (every one) is nonzero.
Status any_like(KernelArgs& a, const Tensor& x, const std::optional<std::vector<int64_t>>& dims, bool keepdim,
                bool all = false) {
  KILN_ASSIGN_OR_RETURN(ReducePlan p, plan_reduction(a, x, dims, keepdim));
  const DType wide = wide_type(x.dtype());
  Tensor v = arrange(x, p, wide);
  Tensor out = Tensor::zeros(DType::Bool, p.out_shape);
  for (int64_t o = 0; o < p.outer; ++o) {
    bool result = all;  // an empty reduction: all is true, any false
    for (int64_t i = 0; i < p.inner && result == all; ++i) {
      const bool nonzero =
          wide == DType::Float64 ? v.data<double>()[o * p.inner + i] != 0 : v.data<int64_t>()[o * p.inner + i] != 0;
      result = nonzero;  // all stops at the first zero, any at the first nonzero
    }
    out.data<bool>()[o] = result;
  }
  // PyTorch keeps uint8 for uint8 inputs.
  a.set_output(0, x.dtype() == DType::UInt8 ? out.to(DType::UInt8) : out);
  return Status::ok();
}

// any() / all() of every element, any.dim / all.dim over one dim.
template <bool kAll>
Status any_all_every(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  return any_like(a, x, std::nullopt, false, kAll);
}

template <bool kAll>
Status any_all_dim(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim, a.int_arg("dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, a.bool_arg("keepdim"));
  return any_like(a, x, std::vector<int64_t>{dim}, keepdim, kAll);
}

// any.dims / all.dims(self, dim=None, keepdim): several dims, every dim (None), or none ([]).
template <bool kAll>
Status any_all_dims(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(auto dims, a.optional_ints("dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, a.bool_arg("keepdim"));
  if (dims && dims->empty()) {
    // An explicit empty list reduces nothing (unlike sum's): each element's truth, in x's shape.
    const Tensor v = x.to(DType::Bool).contiguous();
    a.set_output(0, x.dtype() == DType::UInt8 ? v.to(DType::UInt8) : v);
    return Status::ok();
  }
  return any_like(a, x, dims, keepdim, kAll);
}

// max() / min() of every element: a 0-d tensor, NaN if any element is NaN.
template <bool kMax>
Status extreme_all(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(ReducePlan p, plan_reduction(a, x, std::nullopt, false));
  KILN_TRY(require_nonempty(a, x, p, kMax ? "max" : "min"));
  const DType wide = wide_type(x.dtype());
  Tensor values = Tensor::zeros(wide, p.out_shape);
  reduce_extreme(arrange(x, p, wide), p, kMax, &values, nullptr);
  a.set_output(0, values.to(x.dtype()));
  return Status::ok();
}

// The product over dims (every dim when none): floating in double, integers
// and bools as int64 (wrapping), as torch.prod.
Status prod_like(KernelArgs& a, const Tensor& input, const std::optional<std::vector<int64_t>>& dims, bool keepdim,
                 std::optional<DType> dtype) {
  Tensor x = dtype ? input.to(*dtype) : input;
  const DType out_dtype = dtype ? *dtype : is_floating(x.dtype()) ? x.dtype() : DType::Int64;
  KILN_ASSIGN_OR_RETURN(ReducePlan p, plan_reduction(a, x, dims, keepdim));
  const DType wide = wide_type(x.dtype());
  Tensor v = arrange(x, p, wide);
  Tensor out = Tensor::zeros(wide, p.out_shape);
  for (int64_t o = 0; o < p.outer; ++o) {
    if (wide == DType::Float64) {
      double acc = 1;
      for (int64_t i = 0; i < p.inner; ++i) acc *= v.data<double>()[o * p.inner + i];
      out.data<double>()[o] = acc;
    } else {
      uint64_t acc = 1;
      for (int64_t i = 0; i < p.inner; ++i) acc *= static_cast<uint64_t>(v.data<int64_t>()[o * p.inner + i]);
      out.data<int64_t>()[o] = static_cast<int64_t>(acc);
    }
  }
  a.set_output(0, out.to(out_dtype));
  return Status::ok();
}

Status prod_all(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(auto dtype, a.dtype_arg("dtype"));
  return prod_like(a, x, std::nullopt, false, dtype);
}

Status prod_dim(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim, a.int_arg("dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, a.bool_arg("keepdim"));
  KILN_ASSIGN_OR_RETURN(auto dtype, a.dtype_arg("dtype"));
  return prod_like(a, x, std::vector<int64_t>{dim}, keepdim, dtype);
}

// ---- softmax / log_softmax

// Softmax along the middle axis of [outer, n, inner], computed in double.
// A row that is all -inf gives NaN, as in PyTorch.
template <typename T>
void softmax_rows(const T* in, T* out, int64_t outer, int64_t n, int64_t inner, bool log) {
  std::vector<double> row(static_cast<size_t>(n));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      const int64_t base = o * n * inner + j;
      double mx = -std::numeric_limits<double>::infinity();
      bool nan = false;
      for (int64_t i = 0; i < n; ++i) {
        row[static_cast<size_t>(i)] = static_cast<double>(in[base + i * inner]);
        if (std::isnan(row[static_cast<size_t>(i)])) nan = true;
        mx = std::max(mx, row[static_cast<size_t>(i)]);
      }
      if (nan) mx = std::numeric_limits<double>::quiet_NaN();
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += std::exp(row[static_cast<size_t>(i)] - mx);
      const double log_sum = std::log(sum);
      for (int64_t i = 0; i < n; ++i) {
        const double shifted = row[static_cast<size_t>(i)] - mx;
        out[base + i * inner] = static_cast<T>(log ? shifted - log_sum : std::exp(shifted) / sum);
      }
    }
}

Status softmax_common(KernelArgs& a, const Tensor& input, int64_t dim, DType out_dtype, bool log) {
  if (!is_floating(out_dtype))
    return a.error(std::string(log ? "log_softmax" : "softmax") + " needs a floating-point input, got " +
                   std::string(dtype_name(out_dtype)));
  KILN_ASSIGN_OR_RETURN(int64_t d, wrap_dim(a, dim, input.dim()));
  int64_t outer = 1, n = 1, inner = 1;
  for (int64_t i = 0; i < input.dim(); ++i) {
    if (i < d) outer *= input.size(i);
    if (i == d) n = input.size(i);
    if (i > d) inner *= input.size(i);
  }
  // fp16/bf16 are computed in float32 and rounded once on store.
  const DType compute = out_dtype == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor x = input.to(compute).contiguous();
  Tensor out = Tensor::zeros(compute, input.sizes());
  if (compute == DType::Float64)
    softmax_rows(x.data<double>(), out.data<double>(), outer, n, inner, log);
  else
    softmax_rows(x.data<float>(), out.data<float>(), outer, n, inner, log);
  a.set_output(0, out.to(out_dtype));
  return Status::ok();
}

// aten.softmax.int(self, dim, dtype=None): a dtype converts the input first.
Status softmax_int(KernelArgs& a, bool log) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim, a.int_arg("dim"));
  KILN_ASSIGN_OR_RETURN(auto dtype, a.dtype_arg("dtype"));
  return softmax_common(a, x, dim, dtype.value_or(x.dtype()), log);
}

// aten._softmax(self, dim, half_to_float): half_to_float gives a float32 result for fp16/bf16 inputs.
Status softmax_internal(KernelArgs& a, bool log) {
  KILN_ASSIGN_OR_RETURN(Tensor x, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim, a.int_arg("dim"));
  KILN_ASSIGN_OR_RETURN(bool half_to_float, a.bool_arg("half_to_float", false));
  DType out = x.dtype();
  if (half_to_float && (out == DType::Float16 || out == DType::BFloat16)) out = DType::Float32;
  return softmax_common(a, x, dim, out, log);
}

Status softmax(KernelArgs& a) { return softmax_int(a, false); }
Status log_softmax(KernelArgs& a) { return softmax_int(a, true); }
Status softmax_internal_op(KernelArgs& a) { return softmax_internal(a, false); }
Status log_softmax_internal_op(KernelArgs& a) { return softmax_internal(a, true); }

// segment_reduce(data, reduce, lengths, indices, offsets, axis, unsafe,
// initial): consecutive segments along axis (their lengths, or offsets
// between their bounds), each reduced from `initial` (or the reduction's
// identity) as ATen does: sum, prod, max and min (a NaN wins), mean (the
// sum from initial over the length; an empty segment gives initial, or NaN).
Status segment_reduce(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor data, a.tensor("data"));
  KILN_ASSIGN_OR_RETURN(std::string reduce, a.string_arg("reduce"));
  KILN_ASSIGN_OR_RETURN(std::optional<Tensor> lengths, a.optional_tensor("lengths"));
  KILN_ASSIGN_OR_RETURN(std::optional<Tensor> offsets, a.optional_tensor("offsets"));
  KILN_ASSIGN_OR_RETURN(int64_t axis_arg, a.int_arg("axis"));
  KILN_ASSIGN_OR_RETURN(std::optional<double> initial, a.optional_float("initial"));
  if (reduce != "sum" && reduce != "mean" && reduce != "max" && reduce != "min" && reduce != "prod")
    return a.error("reduce must be sum, mean, max, min or prod, got '" + reduce + "'");
  if (!is_floating(data.dtype())) return a.error("segment_reduce takes floating data, got " + data.type_string());
  const auto axis =
      data.dim() == 0 ? std::nullopt : std::optional<int64_t>(axis_arg < 0 ? axis_arg + data.dim() : axis_arg);
  if (!axis || *axis < 0 || *axis >= data.dim())
    return a.error("axis " + std::to_string(axis_arg) + " is out of range");
  std::vector<int64_t> bounds{0};
  if (lengths && lengths->dim() == 1) {
    for (int64_t i = 0; i < lengths->numel(); ++i) bounds.push_back(bounds.back() + lengths->int_at(i));
  } else if (offsets && offsets->dim() == 1 && offsets->numel() >= 1) {
    bounds.clear();
    for (int64_t i = 0; i < offsets->numel(); ++i) bounds.push_back(offsets->int_at(i));
  } else {
    return a.error("segment_reduce needs 1-d lengths or offsets");
  }
  const int64_t len = data.size(*axis);
  for (size_t i = 0; i < bounds.size(); ++i)
    if (bounds[i] < 0 || bounds[i] > len || (i > 0 && bounds[i] < bounds[i - 1]))
      return a.error("segments must be non-negative and end within the " + std::to_string(len) + " entries along axis");
  const int64_t segments = static_cast<int64_t>(bounds.size()) - 1;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < *axis; ++d) outer *= data.size(d);
  for (int64_t d = *axis + 1; d < data.dim(); ++d) inner *= data.size(d);
  Shape shape = data.sizes();
  shape[static_cast<size_t>(*axis)] = segments;
  const Tensor x = data.to(DType::Float64).contiguous();
  Tensor out = Tensor::zeros(DType::Float64, shape);
  const double inf = std::numeric_limits<double>::infinity();
  const double identity = reduce == "max" ? -inf : reduce == "min" ? inf : reduce == "prod" ? 1.0 : 0.0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t s = 0; s < segments; ++s)
      for (int64_t i = 0; i < inner; ++i) {
        double acc = initial.value_or(identity);
        for (int64_t j = bounds[static_cast<size_t>(s)]; j < bounds[static_cast<size_t>(s) + 1]; ++j) {
          const double v = x.data<double>()[(o * len + j) * inner + i];
          if (reduce == "max")
            acc = std::isnan(v) || v > acc ? v : acc;
          else if (reduce == "min")
            acc = std::isnan(v) || v < acc ? v : acc;
          else if (reduce == "prod")
            acc *= v;
          else
            acc += v;
        }
        const int64_t count = bounds[static_cast<size_t>(s) + 1] - bounds[static_cast<size_t>(s)];
        if (reduce == "mean")
          acc =
              count > 0 ? acc / static_cast<double>(count) : initial.value_or(std::numeric_limits<double>::quiet_NaN());
        out.data<double>()[(o * segments + s) * inner + i] = acc;
      }
  a.set_output(0, out.to(data.dtype()));
  return Status::ok();
}

}  // namespace

void register_reduction_kernels(KernelRegistry& r) {
  r.add(ir::OpKind::kSegmentReduce, &segment_reduce);
  r.add(ir::OpKind::kSumDimIntList, &sum_dim);
  r.add(ir::OpKind::kSum, &sum_all);
  r.add(ir::OpKind::kMeanDim, &mean_dim);
  r.add(ir::OpKind::kMean, &mean_all);
  r.add(ir::OpKind::kAmax, &amax);
  r.add(ir::OpKind::kAmin, &amin);
  r.add(ir::OpKind::kMaxDim, &max_dim);
  r.add(ir::OpKind::kMinDim, &min_dim);
  r.add(ir::OpKind::kAminmax, &aminmax);
  r.add(ir::OpKind::kMode, &mode);
  r.add(ir::OpKind::kArgmax, &argmax);
  r.add(ir::OpKind::kArgmin, &argmin);
  r.add(ir::OpKind::kVarCorrection, &var_correction);
  r.add(ir::OpKind::kVarMeanCorrection, &var_mean_correction);
  r.add(ir::OpKind::kAny, &any_all_every<false>);
  r.add(ir::OpKind::kAnyDim, &any_all_dim<false>);
  r.add(ir::OpKind::kAnyDims, &any_all_dims<false>);
  r.add(ir::OpKind::kAll, &any_all_every<true>);
  r.add(ir::OpKind::kAllDim, &any_all_dim<true>);
  r.add(ir::OpKind::kAllDims, &any_all_dims<true>);
  r.add(ir::OpKind::kMax, &extreme_all<true>);
  r.add(ir::OpKind::kMin, &extreme_all<false>);
  r.add(ir::OpKind::kProd, &prod_all);
  r.add(ir::OpKind::kProdDimInt, &prod_dim);
  r.add(ir::OpKind::kSoftmax, &softmax);
  r.add(ir::OpKind::kSoftmaxInternal, &softmax_internal_op);
  r.add(ir::OpKind::kLogSoftmax, &log_softmax);
  r.add(ir::OpKind::kLogSoftmaxInternal, &log_softmax_internal_op);
}

}  // namespace kiln::cpu
