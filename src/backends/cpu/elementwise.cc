// Elementwise kernels: arithmetic, pow, comparisons, logical and bitwise ops,
// where, masked_fill, math functions, activations and clamps. Operands
// broadcast (NumPy rules) and promote with PyTorch's result_type; a "Tensor"
// overload also accepts a Python number for `other`. Math functions turn
// integer and bool inputs into float32 (the default dtype); 16-bit floats
// compute in float and round on store.
#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <numbers>
#include <string>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/elementwise_operands.h"
#include "backends/cpu/kernel.h"

namespace kiln::cpu {

Expected<Operand> read_operand(const KernelArgs& a, std::string_view name) {
  const ir::Arg* arg = a.node().find(name);
  if (arg != nullptr && std::holds_alternative<ir::Value*>(*arg)) {
    // A Value is a tensor, or a symbolic number (SymInt/SymFloat) handled below.
    auto t = a.tensor(name);
    if (t.has_value()) return Operand{std::move(*t), false};
  }
  KILN_ASSIGN_OR_RETURN(Scalar s, a.scalar(name));
  return Operand{scalar_to_tensor(s), true};
}

Expected<Shape> broadcast_operands(const KernelArgs& a, std::initializer_list<NamedTensor> operands) {
  Shape shape;
  std::string seen;
  for (const NamedTensor& op : operands) {
    if (!seen.empty()) seen += ", ";
    seen += "'" + std::string(op.name) + "' " + op.tensor->type_string();
    auto s = broadcast_shapes(shape, op.tensor->sizes());
    if (!s) return a.error("operands cannot be broadcast together: " + seen);
    shape = std::move(*s);
  }
  if (auto n = checked_numel(shape); !n.has_value())
    return a.error("broadcasting " + seen + ": " + n.status().message());
  return shape;
}

Tensor prepare(const Tensor& t, DType dtype, const Shape& shape) { return expand_to(cast_to(t, dtype), shape); }

namespace {

template <typename T>
T wrapping_add(T x, T y) {
  return static_cast<T>(static_cast<uint64_t>(x) + static_cast<uint64_t>(y));
}
template <typename T>
T wrapping_sub(T x, T y) {
  return static_cast<T>(static_cast<uint64_t>(x) - static_cast<uint64_t>(y));
}
template <typename T>
T wrapping_mul(T x, T y) {
  return static_cast<T>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y));
}

// Python's floor division for floats, as ATen computes it (div_floor_floating).
template <typename C>
C div_floor_floating(C x, C y) {
  if (y == 0) return x / y;
  C mod = std::fmod(x, y);
  C div = (x - mod) / y;
  if (mod != 0 && (y < 0) != (mod < 0)) div -= C(1);
  if (div == 0) return std::copysign(C(0), x / y);
  C floordiv = std::floor(div);
  if (div - floordiv > C(0.5)) floordiv += C(1);
  return floordiv;
}

// Integer power by squaring with wrap-around; negative exponents follow ATen's powi.
template <typename T>
T int_pow(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp % 2 != 0) ? T(-1) : T(1);
      return 0;
    }
  }
  T result = 1;
  while (exp) {
    if (exp & 1) result = wrapping_mul(result, base);
    exp = static_cast<T>(exp / 2);
    base = wrapping_mul(base, base);
  }
  return result;
}

// ---- add / sub / mul / div

enum class Arith { kAdd, kSub, kMul, kDiv, kDivTrunc, kDivFloor };

Status binary_arith(KernelArgs& a, Arith op, bool reversed) {
  KILN_ASSIGN_OR_RETURN(Operand lhs, read_operand(a, "self"));
  KILN_ASSIGN_OR_RETURN(Operand rhs, read_operand(a, "other"));
  std::string_view lhs_name = "self", rhs_name = "other";
  if (reversed) {  // rsub(self, other, alpha) = other - alpha * self
    std::swap(lhs, rhs);
    std::swap(lhs_name, rhs_name);
  }
  const bool has_alpha = op == Arith::kAdd || op == Arith::kSub;
  Scalar alpha = Scalar::of_int(1);
  if (has_alpha) {
    KILN_ASSIGN_OR_RETURN(alpha, a.scalar("alpha"));
  }

  const DType common = result_type(promo(lhs, rhs));
  if (op == Arith::kSub && (lhs.t.dtype() == DType::Bool || rhs.t.dtype() == DType::Bool))
    return a.error(
        "subtraction with a bool tensor is not supported; to invert a mask use logical_not(), for two masks use "
        "logical_xor()");
  if (has_alpha && alpha.kind == Scalar::Kind::kBool && common != DType::Bool)
    return a.error("a bool alpha is only supported for bool results");
  if (has_alpha && !is_floating(common) && alpha.kind == Scalar::Kind::kFloat)
    return a.error("for integral input tensors, argument alpha must not be a floating point number");
  if ((op == Arith::kDivTrunc || op == Arith::kDivFloor) && common == DType::Bool)
    return a.error("division with a rounding mode is not supported for bool tensors");

  const DType out_dtype = (op == Arith::kDiv && !is_floating(common)) ? DType::Float32 : common;
  // Alpha in the result's dtype (ATen rounds it to a 16-bit float type too).
  auto alpha_value = scalar_to_dtype(alpha, out_dtype);
  if (!alpha_value.has_value()) return a.error("alpha: " + alpha_value.status().message());
  const Tensor alpha_t = *alpha_value;
  KILN_ASSIGN_OR_RETURN(Shape shape, broadcast_operands(a, {{lhs_name, &lhs.t}, {rhs_name, &rhs.t}}));
  // ATen's mul/div on a 16-bit float tensor read a one-element right operand at
  // full precision (not rounded to the 16-bit type first).
  const bool exact_rhs =
      !has_alpha && (out_dtype == DType::Float16 || out_dtype == DType::BFloat16) && rhs.t.numel() == 1;
  Tensor l = prepare(lhs.t, out_dtype, shape);
  Tensor r = prepare(rhs.t, exact_rhs ? DType::Float32 : out_dtype, shape);
  Tensor out = Tensor::zeros(out_dtype, shape);
  bool div_by_zero = false;

  visit_dtype(out_dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = opmath_t<T>;
    auto run = [&](auto f) {
      if constexpr (is_reduced_float_v<T>) {
        if (exact_rhs) return map_binary<T, T, float>(l, r, out, f);
      }
      map_binary<T, T, T>(l, r, out, f);
    };
    const T al = *alpha_t.data<T>();
    if constexpr (std::is_same_v<T, bool>) {
      if (op == Arith::kAdd) run([al](bool x, bool y) { return x || (al && y); });
      if (op == Arith::kMul) run([](bool x, bool y) { return x && y; });
    } else if constexpr (std::is_integral_v<T>) {
      switch (op) {
        case Arith::kAdd: run([al](T x, T y) { return wrapping_add(x, wrapping_mul(al, y)); }); break;
        case Arith::kSub: run([al](T x, T y) { return wrapping_sub(x, wrapping_mul(al, y)); }); break;
        case Arith::kMul: run([](T x, T y) { return wrapping_mul(x, y); }); break;
        case Arith::kDiv: break;  // true division always produces a floating dtype
        case Arith::kDivTrunc:
        case Arith::kDivFloor: {
          const bool floor = op == Arith::kDivFloor;
          run([&div_by_zero, floor](T x, T y) -> T {
            if (y == 0) {
              div_by_zero = true;
              return 0;
            }
            if constexpr (std::is_signed_v<T>) {
              if (y == -1) return wrapping_sub(T(0), x);  // INT_MIN / -1 wraps
              T q = static_cast<T>(x / y);
              if (floor && x % y != 0 && ((x % y < 0) != (y < 0))) --q;
              return q;
            } else {
              return static_cast<T>(x / y);
            }
          });
          break;
        }
      }
    } else {
      // ATen's vectorized add is a fused multiply-add (the same as x + y when alpha is 1).
      const C c_al = load(al);
      switch (op) {
        case Arith::kAdd:
          if (c_al == C(1)) {
            run([](C x, C y) { return x + y; });
          } else {
            run([c_al](C x, C y) { return std::fma(c_al, y, x); });
          }
          break;
        case Arith::kSub:
          if (c_al == C(1)) {
            run([](C x, C y) { return x - y; });
          } else {
            run([c_al](C x, C y) { return std::fma(-c_al, y, x); });
          }
          break;
        case Arith::kMul: run([](C x, C y) { return x * y; }); break;
        case Arith::kDiv: run([](C x, C y) { return x / y; }); break;
        case Arith::kDivTrunc: run([](C x, C y) { return std::trunc(x / y); }); break;
        case Arith::kDivFloor: run([](C x, C y) { return div_floor_floating(x, y); }); break;
      }
    }
  });
  if (div_by_zero) return a.error("integer division by zero");
  a.set_output(0, out);
  return Status::ok();
}

Status add(KernelArgs& a) { return binary_arith(a, Arith::kAdd, false); }
Status sub(KernelArgs& a) { return binary_arith(a, Arith::kSub, false); }
Status rsub(KernelArgs& a) { return binary_arith(a, Arith::kSub, true); }
Status mul(KernelArgs& a) { return binary_arith(a, Arith::kMul, false); }
Status div(KernelArgs& a) { return binary_arith(a, Arith::kDiv, false); }

Status div_mode(KernelArgs& a) {
  if (!a.has("rounding_mode")) return binary_arith(a, Arith::kDiv, false);
  KILN_ASSIGN_OR_RETURN(std::string mode, a.string_arg("rounding_mode"));
  if (mode == "trunc") return binary_arith(a, Arith::kDivTrunc, false);
  if (mode == "floor") return binary_arith(a, Arith::kDivFloor, false);
  return a.error("rounding_mode must be None, 'trunc' or 'floor', got '" + mode + "'");
}

// ---- pow

Status pow_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Operand base, read_operand(a, "self"));
  KILN_ASSIGN_OR_RETURN(Operand exp, read_operand(a, "exponent"));
  const DType common = result_type(promo(base, exp));
  if (common == DType::Bool) return a.error("pow is not supported for bool tensors");
  if (exp.wrapped && !is_floating(common) && exp.t.int_at(0) < 0)
    return a.error("integers to negative integer powers are not allowed");
  KILN_ASSIGN_OR_RETURN(Shape shape, broadcast_operands(a, {{"self", &base.t}, {"exponent", &exp.t}}));
  // Unlike mul/div, ATen rounds a scalar exponent to a 16-bit self's dtype first.
  Tensor l = prepare(base.t, common, shape);
  Tensor r = prepare(exp.t, common, shape);
  Tensor out = Tensor::zeros(common, shape);
  // ATen's special cases for a scalar exponent.
  const std::optional<double> e = exp.wrapped ? std::optional<double>(exp.t.item()) : std::nullopt;
  visit_dtype(common, [&](auto tag) {
    using T = decltype(tag);
    using C = opmath_t<T>;
    auto run = [&](auto f) { map_binary<T, T, T>(l, r, out, f); };
    if constexpr (std::is_same_v<T, bool>) {
      // ruled out above
    } else if constexpr (std::is_integral_v<T>) {
      run([](T x, T y) { return int_pow(x, y); });
    } else if (e == 2.0) {
      run([](C x, C) { return x * x; });
    } else if (e == 3.0) {
      run([](C x, C) { return x * x * x; });
    } else if (e == 0.5) {
      run([](C x, C) { return std::sqrt(x); });
    } else if (e == -0.5) {
      run([](C x, C) { return C(1) / std::sqrt(x); });
    } else if (e == -1.0) {
      run([](C x, C) { return C(1) / x; });
    } else if (e == -2.0) {
      run([](C x, C) { return C(1) / (x * x); });
    } else {
      run([](C x, C y) { return std::pow(x, y); });
    }
  });
  a.set_output(0, out);
  return Status::ok();
}

// ---- comparisons

enum class Cmp { kEq, kNe, kLt, kLe, kGt, kGe };

template <Cmp kOp>
Status compare(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Operand lhs, read_operand(a, "self"));
  KILN_ASSIGN_OR_RETURN(Operand rhs, read_operand(a, "other"));
  const DType common = result_type(promo(lhs, rhs));
  KILN_ASSIGN_OR_RETURN(Shape shape, broadcast_operands(a, {{"self", &lhs.t}, {"other", &rhs.t}}));
  Tensor l = prepare(lhs.t, common, shape);
  Tensor r = prepare(rhs.t, common, shape);
  Tensor out = Tensor::zeros(DType::Bool, shape);
  visit_dtype(common, [&](auto tag) {
    using T = decltype(tag);
    map_binary<bool, T, T>(l, r, out, [](auto x, auto y) {
      if constexpr (kOp == Cmp::kEq) return x == y;
      if constexpr (kOp == Cmp::kNe) return x != y;
      if constexpr (kOp == Cmp::kLt) return x < y;
      if constexpr (kOp == Cmp::kLe) return x <= y;
      if constexpr (kOp == Cmp::kGt) return x > y;
      if constexpr (kOp == Cmp::kGe) return x >= y;
    });
  });
  a.set_output(0, out);
  return Status::ok();
}

// ---- logical and bitwise

// logical_and / or / xor: both operands as bool (nonzero is true), broadcast, a bool result.
template <typename F>
Status logical_binary(KernelArgs& a, F f) {
  KILN_ASSIGN_OR_RETURN(Operand lhs, read_operand(a, "self"));
  KILN_ASSIGN_OR_RETURN(Operand rhs, read_operand(a, "other"));
  KILN_ASSIGN_OR_RETURN(Shape shape, broadcast_operands(a, {{"self", &lhs.t}, {"other", &rhs.t}}));
  Tensor out = Tensor::zeros(DType::Bool, shape);
  map_binary<bool, bool, bool>(prepare(lhs.t, DType::Bool, shape), prepare(rhs.t, DType::Bool, shape), out, f);
  a.set_output(0, out);
  return Status::ok();
}
Status logical_and(KernelArgs& a) {
  return logical_binary(a, [](bool x, bool y) { return x && y; });
}
Status logical_or(KernelArgs& a) {
  return logical_binary(a, [](bool x, bool y) { return x || y; });
}
Status logical_xor(KernelArgs& a) {
  return logical_binary(a, [](bool x, bool y) { return x != y; });
}

Status atan2_kernel(KernelArgs& a) {
  return floating_binary(a, "atan2", false, [](auto x, auto y) -> decltype(x) { return std::atan2(x, y); });
}
Status hypot_kernel(KernelArgs& a) {
  return floating_binary(a, "hypot", false, [](auto x, auto y) -> decltype(x) { return std::hypot(x, y); });
}
Status copysign_kernel(KernelArgs& a) {
  return floating_binary(a, "copysign", false, [](auto x, auto y) -> decltype(x) { return std::copysign(x, y); });
}
Status nextafter_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (!is_floating(self.dtype()) || self.dtype() == DType::Float16 || self.dtype() == DType::BFloat16)
    return a.error("nextafter takes float32 or float64 tensors, got " + self.type_string());
  return floating_binary(a, "nextafter", false, [](auto x, auto y) -> decltype(x) { return std::nextafter(x, y); });
}
// max + log1p(exp(-|x - y|)); equal infinities give themselves (the difference would be NaN).
Status logaddexp_kernel(KernelArgs& a) {
  return floating_binary(a, "logaddexp", false, [](auto x, auto y) -> decltype(x) {
    using C = decltype(x);
    if (std::isinf(x) && x == y) return x;
    const C m = std::max(x, y);
    return std::isnan(x) || std::isnan(y) ? x + y : m + std::log1p(std::exp(-std::abs(x - y)));
  });
}
Status logaddexp2_kernel(KernelArgs& a) {
  return floating_binary(a, "logaddexp2", false, [](auto x, auto y) -> decltype(x) {
    using C = decltype(x);
    if (std::isinf(x) && x == y) return x;
    const C m = std::max(x, y);
    return std::isnan(x) || std::isnan(y) ? x + y : m + std::log1p(std::exp2(-std::abs(x - y))) / C(std::numbers::ln2);
  });
}
template <bool kMax>
Status fextremum_kernel(KernelArgs& a) {
  return floating_binary(a, kMax ? "fmax" : "fmin", true, [](auto x, auto y) -> decltype(x) {
    using C = decltype(x);
    if constexpr (std::is_floating_point_v<C>) {
      return kMax ? std::fmax(x, y) : std::fmin(x, y);
    } else {
      return kMax ? std::max(x, y) : std::min(x, y);
    }
  });
}
Status heaviside_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor values, a.tensor("values"));
  if (self.dtype() != values.dtype())
    return a.error("heaviside takes tensors of one dtype, got " + self.type_string() + " and " + values.type_string());
  if (self.dtype() == DType::Bool) return a.error("heaviside is not supported for bool tensors");
  KILN_ASSIGN_OR_RETURN(Shape shape, broadcast_operands(a, {{"self", &self}, {"values", &values}}));
  Tensor l = prepare(self, self.dtype(), shape);
  Tensor r = prepare(values, self.dtype(), shape);
  Tensor out = Tensor::zeros(self.dtype(), shape);
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>)
      map_binary<T, T, T>(l, r, out, [](auto x, auto v) {
        using C = decltype(x);
        return x == C(0) ? v : static_cast<C>(x > C(0));
      });
  });
  a.set_output(0, out);
  return Status::ok();
}

template <bool kOr>
Status bitwise_binary(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Operand lhs, read_operand(a, "self"));
  KILN_ASSIGN_OR_RETURN(Operand rhs, read_operand(a, "other"));
  const DType common = result_type(promo(lhs, rhs));
  if (is_floating(common))
    return a.error(std::string(kOr ? "bitwise_or" : "bitwise_and") +
                   " is only supported for integer and bool tensors, got " + std::string(dtype_name(common)));
  KILN_ASSIGN_OR_RETURN(Shape shape, broadcast_operands(a, {{"self", &lhs.t}, {"other", &rhs.t}}));
  Tensor l = prepare(lhs.t, common, shape);
  Tensor r = prepare(rhs.t, common, shape);
  Tensor out = Tensor::zeros(common, shape);
  visit_dtype(common, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T>) {
      map_binary<T, T, T>(l, r, out, [](T x, T y) -> T {
        if constexpr (kOr) return static_cast<T>(x | y);
        return static_cast<T>(x & y);
      });
    }
  });
  a.set_output(0, out);
  return Status::ok();
}

// ---- where / masked_fill

Status where_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor cond, a.tensor("condition"));
  // uint8 conditions are deprecated in PyTorch but still accepted.
  if (cond.dtype() != DType::Bool && cond.dtype() != DType::UInt8)
    return a.error("where expects a bool condition tensor, got " + cond.type_string());
  KILN_ASSIGN_OR_RETURN(Operand x, read_operand(a, "self"));
  KILN_ASSIGN_OR_RETURN(Operand y, read_operand(a, "other"));
  const DType common = result_type(promo(x, y));
  KILN_ASSIGN_OR_RETURN(Shape shape, broadcast_operands(a, {{"condition", &cond}, {"self", &x.t}, {"other", &y.t}}));
  Tensor out = Tensor::zeros(common, shape);
  visit_dtype(common, [&](auto tag) {
    using T = decltype(tag);
    map_ternary<T, bool, T, T>(expand_to(cast_to(cond, DType::Bool), shape), prepare(x.t, common, shape),
                               prepare(y.t, common, shape), out, [](bool c, auto p, auto q) { return c ? p : q; });
  });
  a.set_output(0, out);
  return Status::ok();
}

template <bool kTensorValue>
Status masked_fill(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Tensor mask, a.tensor("mask"));
  if (mask.dtype() != DType::Bool) return a.error("masked_fill only supports bool masks, got " + mask.type_string());
  Tensor value;
  if constexpr (kTensorValue) {
    KILN_ASSIGN_OR_RETURN(Operand v, read_operand(a, "value"));
    if (v.t.dim() != 0)
      return a.error("masked_fill only supports a 0-dimensional value tensor, got " + v.t.type_string());
    value = v.t;
  } else {
    KILN_ASSIGN_OR_RETURN(Scalar s, a.scalar("value"));
    value = scalar_to_tensor(s);
  }
  KILN_ASSIGN_OR_RETURN(Shape shape, broadcast_operands(a, {{"self", &self}, {"mask", &mask}}));
  const DType dtype = self.dtype();
  const Scalar v = is_floating(value.dtype())     ? Scalar::of_float(value.item())
                   : value.dtype() == DType::Bool ? Scalar::of_bool(value.item_int() != 0)
                                                  : Scalar::of_int(value.item_int());
  auto fill_value = scalar_to_dtype(v, dtype);
  if (!fill_value.has_value()) return a.error(fill_value.status().message());
  const Tensor& fill = *fill_value;
  Tensor out = Tensor::zeros(dtype, shape);
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto f = load(*fill.data<T>());
    map_binary<T, T, bool>(expand_to(self, shape), expand_to(mask, shape), out,
                           [f](auto x, bool m) { return m ? f : x; });
  });
  a.set_output(0, out);
  return Status::ok();
}

// ---- unary

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
Status log1p_kernel(KernelArgs& a) {
  return floating_unary(a, "log1p", true, [](auto x) { return std::log1p(x); });
}
Status expm1_kernel(KernelArgs& a) {
  return floating_unary(a, "expm1", true, [](auto x) { return std::expm1(x); });
}

// floor, ceil, trunc, round and sign keep the dtype; on integers the first
// four are the identity (as in ATen).
template <typename F>
Status same_dtype_unary(KernelArgs& a, std::string_view op, bool identity_on_integers, F f) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (self.dtype() == DType::Bool) return a.error(std::string(op) + " is not supported for bool tensors");
  if (!is_floating(self.dtype()) && identity_on_integers) {
    a.set_output(0, self.clone());
    return Status::ok();
  }
  Tensor out = Tensor::zeros(self.dtype(), self.sizes());
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      using C = opmath_t<T>;
      map_unary<T, T>(self, out, [f](auto x) { return f(static_cast<C>(x)); });
    }
  });
  a.set_output(0, out);
  return Status::ok();
}
Status floor_kernel(KernelArgs& a) {
  return same_dtype_unary(a, "floor", true, [](auto x) { return std::floor(x); });
}
Status ceil_kernel(KernelArgs& a) {
  return same_dtype_unary(a, "ceil", true, [](auto x) { return std::ceil(x); });
}
Status trunc_kernel(KernelArgs& a) {
  return same_dtype_unary(a, "trunc", true, [](auto x) { return std::trunc(x); });
}
Status round_kernel(KernelArgs& a) {
  return same_dtype_unary(a, "round", true, [](auto x) { return std::nearbyint(x); });
}
Status sign_kernel(KernelArgs& a) {
  return same_dtype_unary(a, "sign", false, [](auto x) {
    using C = decltype(x);
    return static_cast<C>((C(0) < x) - (x < C(0)));
  });
}

// round(self, decimals) as ATen: x * 10^d rounded half to even, / 10^d (for
// negative d: x / 10^-d rounded, * 10^-d), in the tensor's floating type.
Status round_decimals_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(int64_t decimals, a.int_arg("decimals", 0));
  return same_dtype_unary(a, "round", false, [decimals](auto x) {
    using C = decltype(x);
    const bool neg = decimals < 0;
    const C ten_pow = static_cast<C>(std::pow(C(10), static_cast<C>(neg ? -decimals : decimals)));
    return neg ? std::nearbyint(x / ten_pow) * ten_pow : std::nearbyint(x * ten_pow) / ten_pow;
  });
}

// The sign bit of x (float and 16-bit values widen to double exactly, sign
// and NaN sign kept). Not inlined: GCC 12 at -O3 stops with an internal
// compiler error vectorizing std::signbit over a loop of floats.
[[gnu::noinline]] bool sign_bit(double x) { return std::signbit(x); }

// signbit: the sign bit of floats (-0.0 and negative NaNs too), x < 0 for integers, false for bools.
Status signbit_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  Tensor out = Tensor::zeros(DType::Bool, self.sizes());
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      // all false
    } else if constexpr (std::is_integral_v<T>) {
      map_unary<bool, T>(self, out, [](auto x) { return x < 0; });
    } else {
      map_unary<bool, T>(self, out, [](auto x) { return sign_bit(static_cast<double>(x)); });
    }
  });
  a.set_output(0, out);
  return Status::ok();
}

// frexp(self) -> (mantissa, exponent): x = mantissa * 2^exponent with
// |mantissa| in [0.5, 1) (0 for 0), exponent int32; floating tensors only.
// The mantissa of a 16-bit float is exact in its own dtype.
Status frexp_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (!is_floating(self.dtype()))
    return a.error("frexp is only supported for floating tensors, got " + self.type_string());
  Tensor in = self.contiguous();
  Tensor mantissa = Tensor::zeros(self.dtype(), self.sizes());
  Tensor exponent = Tensor::zeros(DType::Int32, self.sizes());
  int32_t* e = exponent.data<int32_t>();
  visit_floating(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = in.data<T>();
    T* m = mantissa.data<T>();
    for (int64_t i = 0; i < in.numel(); ++i) {
      int ex = 0;
      if constexpr (std::is_same_v<T, double>) {
        m[i] = std::frexp(x[i], &ex);
      } else {
        m[i] = T(std::frexp(static_cast<float>(x[i]), &ex));
      }
      e[i] = ex;
    }
  });
  a.set_output(0, mantissa);
  a.set_output(1, exponent);
  return Status::ok();
}

// isnan / isinf: bool results; integers are never either.
template <bool kInf>
Status float_class_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  Tensor out = Tensor::zeros(DType::Bool, self.sizes());
  if (is_floating(self.dtype())) {
    visit_floating(self.dtype(), [&](auto tag) {
      using T = decltype(tag);
      map_unary<bool, T>(self, out, [](auto x) { return kInf ? std::isinf(x) : std::isnan(x); });
    });
  }
  a.set_output(0, out);
  return Status::ok();
}

// minimum / maximum: the promoted dtype, broadcasting; a NaN in either operand wins.
// The elementwise maximum (kMax) or minimum of `lhs` and `rhs` in their promoted dtype, broadcast.
template <bool kMax>
Expected<Tensor> extremum(const KernelArgs& a, const Operand& lhs, std::string_view lhs_name, const Operand& rhs,
                          std::string_view rhs_name) {
  const DType common = result_type(promo(lhs, rhs));
  Tensor lt = lhs.t, rt = rhs.t;
  KILN_ASSIGN_OR_RETURN(Shape shape, broadcast_operands(a, {{lhs_name, &lt}, {rhs_name, &rt}}));
  Tensor l = prepare(lt, common, shape);
  Tensor r = prepare(rt, common, shape);
  Tensor out = Tensor::zeros(common, shape);
  visit_dtype(common, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      map_binary<T, T, T>(l, r, out, [](bool x, bool y) { return kMax ? (x || y) : (x && y); });
    } else if constexpr (std::is_integral_v<T>) {
      map_binary<T, T, T>(l, r, out, [](T x, T y) { return kMax ? std::max(x, y) : std::min(x, y); });
    } else {
      using C = opmath_t<T>;
      map_binary<T, T, T>(l, r, out, [](C x, C y) {
        if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<C>::quiet_NaN();
        return kMax ? std::max(x, y) : std::min(x, y);
      });
    }
  });
  return out;
}

template <bool kMax>
Status extremum_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Operand lhs, read_operand(a, "self"));
  KILN_ASSIGN_OR_RETURN(Operand rhs, read_operand(a, "other"));
  KILN_ASSIGN_OR_RETURN(Tensor out, extremum<kMax>(a, lhs, "self", rhs, "other"));
  a.set_output(0, out);
  return Status::ok();
}

// clamp with tensor bounds: max with `min`, then min with `max`, each
// broadcast and promoted; a NaN value or bound gives NaN (as ATen).
Status clamp_tensor_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Operand self, read_operand(a, "self"));
  const ir::Arg* lo_arg = a.node().find("min");
  const ir::Arg* hi_arg = a.node().find("max");
  const bool has_lo = lo_arg && std::holds_alternative<ir::Value*>(*lo_arg);
  const bool has_hi = hi_arg && std::holds_alternative<ir::Value*>(*hi_arg);
  if (!has_lo && !has_hi) return a.error("clamp needs at least one of 'min' and 'max'");
  std::vector<PromotionOperand> ops = {self.promo()};
  Operand lo, hi;
  if (has_lo) {
    KILN_ASSIGN_OR_RETURN(lo, read_operand(a, "min"));
    ops.push_back(lo.promo());
  }
  if (has_hi) {
    KILN_ASSIGN_OR_RETURN(hi, read_operand(a, "max"));
    ops.push_back(hi.promo());
  }
  if (result_type(ops) == DType::Bool) return a.error("clamp is not supported for bool tensors");
  Operand x = self;
  if (has_lo) {
    KILN_ASSIGN_OR_RETURN(x.t, extremum<true>(a, x, "self", lo, "min"));
  }
  if (has_hi) {
    KILN_ASSIGN_OR_RETURN(x.t, extremum<false>(a, x, "self", hi, "max"));
  }
  // The dtype of all three operands together, even when one bound alone would promote less.
  a.set_output(0, cast_to(x.t, result_type(ops)));
  return Status::ok();
}

template <bool kMax>
Status clamp_bound_tensor_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Operand self, read_operand(a, "self"));
  const char* name = kMax ? "min" : "max";
  KILN_ASSIGN_OR_RETURN(Operand bound, read_operand(a, name));
  if (result_type(promo(self, bound)) == DType::Bool) return a.error("clamp is not supported for bool tensors");
  KILN_ASSIGN_OR_RETURN(Tensor out, extremum<kMax>(a, self, "self", bound, name));
  a.set_output(0, out);
  return Status::ok();
}

// fmod (kFloored false): the remainder of truncated division, with self's
// sign; remainder (true): of floored division, with other's sign. Integers
// divided by zero are an error (ATen raises ZeroDivisionError).
template <bool kFloored>
Status modulo_kernel(KernelArgs& a) {
  const char* op = kFloored ? "remainder" : "fmod";
  KILN_ASSIGN_OR_RETURN(Operand lhs, read_operand(a, "self"));
  KILN_ASSIGN_OR_RETURN(Operand rhs, read_operand(a, "other"));
  const DType common = result_type(promo(lhs, rhs));
  if (common == DType::Bool) return a.error(std::string(op) + " is not supported for bool tensors");
  KILN_ASSIGN_OR_RETURN(Shape shape, broadcast_operands(a, {{"self", &lhs.t}, {"other", &rhs.t}}));
  Tensor l = prepare(lhs.t, common, shape);
  Tensor r = prepare(rhs.t, common, shape);
  Tensor out = Tensor::zeros(common, shape);
  bool by_zero = false;
  visit_dtype(common, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      map_binary<T, T, T>(l, r, out, [&by_zero](T x, T y) -> T {
        if (y == 0) {
          by_zero = true;
          return 0;
        }
        if (y == -1) return 0;  // also the one quotient that overflows
        T m = static_cast<T>(x % y);
        if (kFloored && m != 0 && ((m < 0) != (y < 0))) m = static_cast<T>(m + y);
        return m;
      });
    } else if constexpr (!std::is_same_v<T, bool>) {
      using C = opmath_t<T>;
      map_binary<T, T, T>(l, r, out, [](C x, C y) {
        C m = std::fmod(x, y);
        if (kFloored && m != 0 && ((m < 0) != (y < 0))) m += y;
        return m;
      });
    }
  });
  if (by_zero) return a.error(std::string(op) + ": integer division by zero");
  a.set_output(0, out);
  return Status::ok();
}

// leaky_relu(x) = x > 0 ? x : x * negative_slope, in floating types.
Status leaky_relu_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Scalar slope, a.scalar("negative_slope"));
  const double s = slope.to_double();
  return floating_unary(a, "leaky_relu", false, [s](auto x) {
    using C = decltype(x);
    return x > C(0) ? x : x * static_cast<C>(s);
  });
}

// elu(x) = x > 0 ? scale * x : scale * alpha * (exp(x * input_scale) - 1).
Status elu_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Scalar alpha, a.scalar("alpha"));
  KILN_ASSIGN_OR_RETURN(Scalar scale, a.scalar("scale"));
  KILN_ASSIGN_OR_RETURN(Scalar input_scale, a.scalar("input_scale"));
  const double al = alpha.to_double(), sc = scale.to_double(), is = input_scale.to_double();
  return floating_unary(a, "elu", false, [al, sc, is](auto x) {
    using C = decltype(x);
    return x > C(0) ? x * static_cast<C>(sc)
                    : static_cast<C>(sc) * static_cast<C>(al) * std::expm1(x * static_cast<C>(is));
  });
}

Status erf_kernel(KernelArgs& a) {
  return floating_unary(a, "erf", true, [](auto x) { return std::erf(x); });
}
Status acos_kernel(KernelArgs& a) {
  return floating_unary(a, "acos", true, [](auto x) { return std::acos(x); });
}
Status asin_kernel(KernelArgs& a) {
  return floating_unary(a, "asin", true, [](auto x) { return std::asin(x); });
}
Status atan_kernel(KernelArgs& a) {
  return floating_unary(a, "atan", true, [](auto x) { return std::atan(x); });
}
Status tan_kernel(KernelArgs& a) {
  return floating_unary(a, "tan", true, [](auto x) { return std::tan(x); });
}
Status sinh_kernel(KernelArgs& a) {
  return floating_unary(a, "sinh", true, [](auto x) { return std::sinh(x); });
}
Status cosh_kernel(KernelArgs& a) {
  return floating_unary(a, "cosh", true, [](auto x) { return std::cosh(x); });
}
Status acosh_kernel(KernelArgs& a) {
  return floating_unary(a, "acosh", true, [](auto x) { return std::acosh(x); });
}
Status asinh_kernel(KernelArgs& a) {
  return floating_unary(a, "asinh", true, [](auto x) { return std::asinh(x); });
}
Status atanh_kernel(KernelArgs& a) {
  return floating_unary(a, "atanh", true, [](auto x) { return std::atanh(x); });
}
Status erfc_kernel(KernelArgs& a) {
  return floating_unary(a, "erfc", true, [](auto x) { return std::erfc(x); });
}
Status exp2_kernel(KernelArgs& a) {
  return floating_unary(a, "exp2", true, [](auto x) { return std::exp2(x); });
}
Status log2_kernel(KernelArgs& a) {
  return floating_unary(a, "log2", true, [](auto x) { return std::log2(x); });
}
Status log10_kernel(KernelArgs& a) {
  return floating_unary(a, "log10", true, [](auto x) { return std::log10(x); });
}
Status lgamma_kernel(KernelArgs& a) {
  return floating_unary(a, "lgamma", true, [](auto x) { return std::lgamma(x); });
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
  auto arg = a.string_arg("approximate");
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

// Clamps self to [lo, hi] (either bound optional) in `dtype`. As in recent
// PyTorch, integer bounds compare by value (a negative bound does not wrap
// into an unsigned type), and a NaN value or bound gives NaN.
Status clamp_to(KernelArgs& a, const Tensor& self, DType dtype, const std::optional<Scalar>& lo,
                const std::optional<Scalar>& hi) {
  if (dtype == DType::Bool) return a.error("clamp is not supported for bool tensors");
  Tensor lo_t, hi_t;
  for (auto [bound, t] : {std::pair{&lo, &lo_t}, std::pair{&hi, &hi_t}}) {
    if (!*bound) continue;
    auto v = scalar_to_dtype(**bound, dtype);
    if (!v.has_value()) return a.error(v.status().message());
    *t = *v;
  }
  Tensor in = cast_to(self, dtype);
  Tensor out = Tensor::zeros(dtype, self.sizes());
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = opmath_t<T>;
    if constexpr (std::is_integral_v<T>) {
      // Integer bounds (float bounds truncate, as ATen's Scalar::to does).
      const std::optional<int64_t> l = lo ? std::optional<int64_t>(lo->i) : std::nullopt;
      const std::optional<int64_t> h = hi ? std::optional<int64_t>(hi->i) : std::nullopt;
      map_unary<T, T>(in, out, [l, h](C v) {
        int64_t x = static_cast<int64_t>(v);
        if (l) x = std::max(x, *l);
        if (h) x = std::min(x, *h);
        return static_cast<T>(x);
      });
    } else {
      const std::optional<C> l = lo ? std::optional<C>(load(*lo_t.data<T>())) : std::nullopt;
      const std::optional<C> h = hi ? std::optional<C>(load(*hi_t.data<T>())) : std::nullopt;
      map_unary<T, T>(in, out, [l, h](C x) {
        if (std::isnan(x)) return x;
        if (l) x = std::isnan(*l) ? *l : std::max(x, *l);
        if (h) x = std::isnan(*h) ? *h : std::min(x, *h);
        return x;
      });
    }
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

Status clamp_max_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Scalar hi, a.scalar("max"));
  const std::array<PromotionOperand, 2> ops = {PromotionOperand{self.dtype(), self.dim() == 0, false},
                                               PromotionOperand{scalar_dtype(hi), true, true}};
  return clamp_to(a, self, result_type(ops), std::nullopt, hi);
}

Status clamp_min_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Scalar lo, a.scalar("min"));
  const std::array<PromotionOperand, 2> ops = {PromotionOperand{self.dtype(), self.dim() == 0, false},
                                               PromotionOperand{scalar_dtype(lo), true, true}};
  return clamp_to(a, self, result_type(ops), lo, std::nullopt);
}

// hardtanh keeps self's dtype.
Status hardtanh_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Scalar lo, a.scalar("min_val"));
  KILN_ASSIGN_OR_RETURN(Scalar hi, a.scalar("max_val"));
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

void register_elementwise_kernels(KernelRegistry& r) {
  r.add(ir::OpKind::kFrexpTensor, &frexp_kernel);
  using ir::OpKind;
  r.add(OpKind::kAddTensor, &add);
  r.add(OpKind::kAddScalar, &add);
  r.add(OpKind::kSubTensor, &sub);
  r.add(OpKind::kSubScalar, &sub);
  r.add(OpKind::kRsubTensor, &rsub);
  r.add(OpKind::kRsubScalar, &rsub);
  r.add(OpKind::kMulTensor, &mul);
  r.add(OpKind::kMulScalar, &mul);
  r.add(OpKind::kDivTensor, &div);
  r.add(OpKind::kDivScalar, &div);
  r.add(OpKind::kDivTensorMode, &div_mode);
  r.add(OpKind::kPowTensorScalar, &pow_kernel);
  r.add(OpKind::kPowTensorTensor, &pow_kernel);
  r.add(OpKind::kEqScalar, &compare<Cmp::kEq>);
  r.add(OpKind::kEqTensor, &compare<Cmp::kEq>);
  r.add(OpKind::kNeScalar, &compare<Cmp::kNe>);
  r.add(OpKind::kNeTensor, &compare<Cmp::kNe>);
  r.add(OpKind::kLtScalar, &compare<Cmp::kLt>);
  r.add(OpKind::kLtTensor, &compare<Cmp::kLt>);
  r.add(OpKind::kLeScalar, &compare<Cmp::kLe>);
  r.add(OpKind::kLeTensor, &compare<Cmp::kLe>);
  r.add(OpKind::kGtScalar, &compare<Cmp::kGt>);
  r.add(OpKind::kGtTensor, &compare<Cmp::kGt>);
  r.add(OpKind::kGeScalar, &compare<Cmp::kGe>);
  r.add(OpKind::kGeTensor, &compare<Cmp::kGe>);
  r.add(OpKind::kLogicalAnd, &logical_and);
  r.add(OpKind::kLogicalOr, &logical_or);
  r.add(OpKind::kLogicalXor, &logical_xor);
  r.add(OpKind::kAtan2, &atan2_kernel);
  r.add(OpKind::kHypot, &hypot_kernel);
  r.add(OpKind::kCopysignTensor, &copysign_kernel);
  r.add(OpKind::kNextafter, &nextafter_kernel);
  r.add(OpKind::kLogaddexp, &logaddexp_kernel);
  r.add(OpKind::kLogaddexp2, &logaddexp2_kernel);
  r.add(OpKind::kFmax, &fextremum_kernel<true>);
  r.add(OpKind::kFmin, &fextremum_kernel<false>);
  r.add(OpKind::kHeaviside, &heaviside_kernel);
  r.add(OpKind::kAcos, &acos_kernel);
  r.add(OpKind::kAsin, &asin_kernel);
  r.add(OpKind::kAtan, &atan_kernel);
  r.add(OpKind::kTan, &tan_kernel);
  r.add(OpKind::kSinh, &sinh_kernel);
  r.add(OpKind::kCosh, &cosh_kernel);
  r.add(OpKind::kAcosh, &acosh_kernel);
  r.add(OpKind::kAsinh, &asinh_kernel);
  r.add(OpKind::kAtanh, &atanh_kernel);
  r.add(OpKind::kErfc, &erfc_kernel);
  r.add(OpKind::kExp2, &exp2_kernel);
  r.add(OpKind::kLog2, &log2_kernel);
  r.add(OpKind::kLog10, &log10_kernel);
  r.add(OpKind::kLgamma, &lgamma_kernel);
  r.add(OpKind::kBitwiseAndTensor, &bitwise_binary<false>);
  r.add(OpKind::kAndTensor, &bitwise_binary<false>);  // Python's `&` on tensors
  r.add(OpKind::kBitwiseOrTensor, &bitwise_binary<true>);
  r.add(OpKind::kWhere, &where_kernel);
  r.add(OpKind::kMaskedFillScalar, &masked_fill<false>);
  r.add(OpKind::kMaskedFillTensor, &masked_fill<true>);
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
  r.add(OpKind::kLog1p, &log1p_kernel);
  r.add(OpKind::kExpm1, &expm1_kernel);
  r.add(OpKind::kFloor, &floor_kernel);
  r.add(OpKind::kCeil, &ceil_kernel);
  r.add(OpKind::kTrunc, &trunc_kernel);
  r.add(OpKind::kRound, &round_kernel);
  r.add(OpKind::kSign, &sign_kernel);
  r.add(OpKind::kSignbit, &signbit_kernel);
  r.add(OpKind::kRoundDecimals, &round_decimals_kernel);
  r.add(OpKind::kIsnan, &float_class_kernel<false>);
  r.add(OpKind::kIsinf, &float_class_kernel<true>);
  r.add(OpKind::kMinimum, &extremum_kernel<false>);
  r.add(OpKind::kMaximum, &extremum_kernel<true>);
  r.add(OpKind::kSigmoid, &sigmoid_kernel);
  r.add(OpKind::kRelu, &relu_kernel);
  r.add(OpKind::kGelu, &gelu_kernel);
  r.add(OpKind::kSilu, &silu_kernel);
  r.add(OpKind::kHardtanh, &hardtanh_kernel);
  r.add(OpKind::kHardswish, &hardswish_kernel);
  r.add(OpKind::kHardsigmoid, &hardsigmoid_kernel);
  r.add(OpKind::kClamp, &clamp_kernel);
  r.add(OpKind::kClampMin, &clamp_min_kernel);
  r.add(OpKind::kClampMax, &clamp_max_kernel);
  r.add(OpKind::kClampTensor, &clamp_tensor_kernel);
  r.add(OpKind::kClampMinTensor, &clamp_bound_tensor_kernel<true>);
  r.add(OpKind::kClampMaxTensor, &clamp_bound_tensor_kernel<false>);
  r.add(OpKind::kFmodTensor, &modulo_kernel<false>);
  r.add(OpKind::kFmodScalar, &modulo_kernel<false>);
  r.add(OpKind::kRemainderTensor, &modulo_kernel<true>);
  r.add(OpKind::kRemainderScalar, &modulo_kernel<true>);
  r.add(OpKind::kLeakyRelu, &leaky_relu_kernel);
  r.add(OpKind::kElu, &elu_kernel);
  r.add(OpKind::kLogicalNot, &logical_not_kernel);
  r.add(OpKind::kBitwiseNot, &bitwise_not_kernel);
}

}  // namespace kiln::cpu
