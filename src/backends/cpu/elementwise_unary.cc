// Elementwise unary kernels: math functions, activations, clamps and the
// logical/bitwise not. Math functions turn integer and bool inputs into
// float32 (the default dtype), as PyTorch does; 16-bit floats compute in float.
#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <string>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/kernel.h"

namespace kiln::cpu {

namespace {

// Applies f to every element in the compute type of a floating dtype. Integer
// and bool inputs become float32 first when `promote_integers`, else are an error.
template <typename F>
Status floating_unary(KernelArgs& a, std::string_view op, bool promote_integers, F f) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (!promote_integers && !is_floating(self.dtype()))
    return a.error(std::string(op) + " is only supported for floating tensors, got " + self.type_string());
  const DType dtype = is_floating(self.dtype()) ? self.dtype() : DType::Float32;
  Tensor in = cast_to(self, dtype);
  Tensor out = Tensor::zeros(dtype, self.sizes());
  visit_floating(dtype, [&](auto tag) {
    using T = decltype(tag);
    map_unary<T, T>(in, out, f);
  });
  a.set_output(0, out);
  return Status::ok();
}

Status exp_kernel(KernelArgs& a) {
  return floating_unary(a, "exp", true, [](auto x) { return std::exp(x); });
}
Status log_kernel(KernelArgs& a) {
  return floating_unary(a, "log", true, [](auto x) { return std::log(x); });
}
Status sqrt_kernel(KernelArgs& a) {
  return floating_unary(a, "sqrt", true, [](auto x) { return std::sqrt(x); });
}
Status rsqrt_kernel(KernelArgs& a) {
  return floating_unary(a, "rsqrt", true, [](auto x) { return decltype(x)(1) / std::sqrt(x); });
}
Status reciprocal_kernel(KernelArgs& a) {
  return floating_unary(a, "reciprocal", true, [](auto x) { return decltype(x)(1) / x; });
}
Status sin_kernel(KernelArgs& a) {
  return floating_unary(a, "sin", true, [](auto x) { return std::sin(x); });
}
Status cos_kernel(KernelArgs& a) {
  return floating_unary(a, "cos", true, [](auto x) { return std::cos(x); });
}
Status tanh_kernel(KernelArgs& a) {
  return floating_unary(a, "tanh", true, [](auto x) { return std::tanh(x); });
}
Status erf_kernel(KernelArgs& a) {
  return floating_unary(a, "erf", true, [](auto x) { return std::erf(x); });
}
Status sigmoid_kernel(KernelArgs& a) {
  return floating_unary(a, "sigmoid", true, [](auto x) {
    using C = decltype(x);
    return C(1) / (C(1) + std::exp(-x));
  });
}
Status silu_kernel(KernelArgs& a) {
  return floating_unary(a, "silu", false, [](auto x) {
    using C = decltype(x);
    return x / (C(1) + std::exp(-x));
  });
}
Status hardswish_kernel(KernelArgs& a) {
  return floating_unary(a, "hardswish", false, [](auto x) {
    using C = decltype(x);
    return x * std::min(std::max(x + C(3), C(0)), C(6)) / C(6);
  });
}
Status hardsigmoid_kernel(KernelArgs& a) {
  return floating_unary(a, "hardsigmoid", false, [](auto x) {
    using C = decltype(x);
    return std::min(std::max(x + C(3), C(0)), C(6)) / C(6);
  });
}

Status gelu_kernel(KernelArgs& a) {
  auto arg = a.string_arg("approximate", std::string("none"));
  if (!arg.has_value()) return arg.status();
  const std::string& approximate = arg.value();
  if (approximate == "none") {
    return floating_unary(a, "gelu", false, [](auto x) {
      using C = decltype(x);
      return x * C(0.5) * (C(1) + std::erf(x * C(std::numbers::sqrt2 / 2)));
    });
  }
  if (approximate == "tanh") {
    return floating_unary(a, "gelu", false, [](auto x) {
      using C = decltype(x);
      const C beta = C(std::numbers::sqrt2 * (2 * std::numbers::inv_sqrtpi) * 0.5);  // sqrt(2 / pi)
      const C kappa = C(0.044715);
      return C(0.5) * x * (C(1) + std::tanh(beta * (x + kappa * x * x * x)));
    });
  }
  return a.error("gelu approximate must be 'none' or 'tanh', got '" + approximate + "'");
}

// ---- same-dtype unary ops

Status neg_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (self.dtype() == DType::Bool)
    return a.error("negation of a bool tensor is not supported; use logical_not() to invert a mask");
  Tensor out = Tensor::zeros(self.dtype(), self.sizes());
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      map_unary<T, T>(self, out, [](T x) { return static_cast<T>(uint64_t{0} - static_cast<uint64_t>(x)); });
    } else if constexpr (!std::is_same_v<T, bool>) {
      map_unary<T, T>(self, out, [](auto x) { return -x; });
    }
  });
  a.set_output(0, out);
  return Status::ok();
}

Status abs_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (self.dtype() == DType::Bool) return a.error("abs is not supported for bool tensors");
  Tensor out = Tensor::zeros(self.dtype(), self.sizes());
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      map_unary<T, T>(self, out, [](T x) {
        return x < 0 ? static_cast<T>(uint64_t{0} - static_cast<uint64_t>(x)) : x;  // INT_MIN stays INT_MIN
      });
    } else if constexpr (!std::is_same_v<T, bool>) {
      map_unary<T, T>(self, out, [](auto x) { return std::abs(x); });
    }
  });
  a.set_output(0, out);
  return Status::ok();
}

// Clamps self to [lo, hi] (either bound optional) in `dtype`; NaN stays NaN.
Status clamp_to(KernelArgs& a, const Tensor& self, DType dtype, const std::optional<Scalar>& lo,
                const std::optional<Scalar>& hi) {
  Tensor in = cast_to(self, dtype);
  Tensor out = Tensor::zeros(dtype, self.sizes());
  Tensor lo_t = lo ? cast_to(scalar_to_tensor(*lo), dtype) : Tensor();
  Tensor hi_t = hi ? cast_to(scalar_to_tensor(*hi), dtype) : Tensor();
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = opmath_t<T>;
    const std::optional<C> l = lo ? std::optional<C>(load(*lo_t.data<T>())) : std::nullopt;
    const std::optional<C> h = hi ? std::optional<C>(load(*hi_t.data<T>())) : std::nullopt;
    map_unary<T, T>(in, out, [l, h](C x) {
      if constexpr (is_float_v<T>) {
        if (std::isnan(x)) return x;
      }
      if (l) x = std::max(x, *l);
      if (h) x = std::min(x, *h);
      return x;
    });
  });
  a.set_output(0, out);
  return Status::ok();
}

// clamp / clamp_min promote self with the bounds (int tensor, float bound -> float32).
Status clamp_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::optional<Scalar> lo, a.optional_scalar("min"));
  KILN_ASSIGN_OR_RETURN(std::optional<Scalar> hi, a.optional_scalar("max"));
  if (!lo && !hi) return a.error("clamp needs at least one of 'min' and 'max'");
  std::vector<PromotionOperand> ops = {{self.dtype(), self.dim() == 0, false}};
  if (lo) ops.push_back({scalar_dtype(*lo), true, true});
  if (hi) ops.push_back({scalar_dtype(*hi), true, true});
  return clamp_to(a, self, result_type(ops), lo, hi);
}

Status clamp_min_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Scalar lo, a.scalar("min"));
  const std::array<PromotionOperand, 2> ops = {
      PromotionOperand{self.dtype(), self.dim() == 0, false}, PromotionOperand{scalar_dtype(lo), true, true}};
  return clamp_to(a, self, result_type(ops), lo, std::nullopt);
}

// hardtanh keeps self's dtype.
Status hardtanh_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Scalar lo, a.scalar("min_val", Scalar::of_int(-1)));
  KILN_ASSIGN_OR_RETURN(Scalar hi, a.scalar("max_val", Scalar::of_int(1)));
  if (self.dtype() == DType::Bool) return a.error("hardtanh is not supported for bool tensors");
  return clamp_to(a, self, self.dtype(), lo, hi);
}

Status relu_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (self.dtype() == DType::Bool) return a.error("relu is not supported for bool tensors");
  return clamp_to(a, self, self.dtype(), Scalar::of_int(0), std::nullopt);
}

// ---- logical / bitwise not

Status logical_not_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  Tensor out = Tensor::zeros(DType::Bool, self.sizes());
  map_unary<bool, bool>(cast_to(self, DType::Bool), out, [](bool x) { return !x; });
  a.set_output(0, out);
  return Status::ok();
}

Status bitwise_not_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (is_floating(self.dtype()))
    return a.error("bitwise_not is only supported for integer and bool tensors, got " + self.type_string());
  Tensor out = Tensor::zeros(self.dtype(), self.sizes());
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      map_unary<bool, bool>(self, out, [](bool x) { return !x; });
    } else if constexpr (std::is_integral_v<T>) {
      map_unary<T, T>(self, out, [](T x) { return static_cast<T>(~x); });
    }
  });
  a.set_output(0, out);
  return Status::ok();
}

}  // namespace

void register_unary_kernels(KernelRegistry& r) {
  using ir::OpKind;
  r.add(OpKind::kNeg, &neg_kernel);
  r.add(OpKind::kAbs, &abs_kernel);
  r.add(OpKind::kExp, &exp_kernel);
  r.add(OpKind::kLog, &log_kernel);
  r.add(OpKind::kSqrt, &sqrt_kernel);
  r.add(OpKind::kRsqrt, &rsqrt_kernel);
  r.add(OpKind::kReciprocal, &reciprocal_kernel);
  r.add(OpKind::kSin, &sin_kernel);
  r.add(OpKind::kCos, &cos_kernel);
  r.add(OpKind::kTanh, &tanh_kernel);
  r.add(OpKind::kErf, &erf_kernel);
  r.add(OpKind::kSigmoid, &sigmoid_kernel);
  r.add(OpKind::kRelu, &relu_kernel);
  r.add(OpKind::kGelu, &gelu_kernel);
  r.add(OpKind::kSilu, &silu_kernel);
  r.add(OpKind::kHardtanh, &hardtanh_kernel);
  r.add(OpKind::kHardswish, &hardswish_kernel);
  r.add(OpKind::kHardsigmoid, &hardsigmoid_kernel);
  r.add(OpKind::kClamp, &clamp_kernel);
  r.add(OpKind::kClampMin, &clamp_min_kernel);
  r.add(OpKind::kLogicalNot, &logical_not_kernel);
  r.add(OpKind::kBitwiseNot, &bitwise_not_kernel);
}

}  // namespace kiln::cpu
