// What a pointwise kernel (kernel_source.cc, pointwise_kernel) computes
// beyond C's operators and CUDA's math functions: ATen's definitions of
// floor division, Python's remainder, integer powers, NaN-propagating and
// NaN-ignoring extrema, copysign, logaddexp, heaviside, round to decimals
// and the floating classes, for a compute type C (double, float, long long
// or int; 16-bit floats are computed in float).
#pragma once

#include "kiln/prelude.cuh"
#include "kiln/special_functions.cuh"

namespace kiln {

template <typename C>
struct is_float_c {
  static constexpr bool value = false;
};
template <>
struct is_float_c<float> {
  static constexpr bool value = true;
};
template <>
struct is_float_c<double> {
  static constexpr bool value = true;
};

// Python's floor division: ATen's div_floor for floats, rounding toward
// -inf for integers (a zero divisor gives 0; PyTorch raises there on the CPU).
template <typename C>
__device__ __forceinline__ C pw_div_floor(C a, C b) {
  if constexpr (is_float_c<C>::value) {
    if (b == C(0)) return a / b;
    C mod = fmod(a, b);
    C div = (a - mod) / b;
    if (mod != C(0) && (b < C(0)) != (mod < C(0))) div -= C(1);
    if (div == C(0)) return copysign(C(0), a / b);
    C f = floor(div);
    if (div - f > C(0.5)) f += C(1);
    return f;
  } else {
    if (b == 0) return 0;
    if (b == C(-1)) return C(0ULL - (unsigned long long)a);  // the most negative value wraps, as on the CPU
    C q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
  }
}

// Truncating division (rounding_mode='trunc').
template <typename C>
__device__ __forceinline__ C pw_div_trunc(C a, C b) {
  if constexpr (is_float_c<C>::value) {
    return trunc(a / b);
  } else {
    if (b == C(-1)) return C(0ULL - (unsigned long long)a);
    return b == 0 ? C(0) : a / b;
  }
}

// Python's remainder: the sign of the divisor (ATen's remainder).
template <typename C>
__device__ __forceinline__ C pw_remainder(C a, C b) {
  if constexpr (is_float_c<C>::value) {
    C m = fmod(a, b);
    if (m != C(0) && ((b < C(0)) != (m < C(0)))) m += b;
    return m;
  } else {
    if (b == 0 || b == C(-1)) return 0;
    C m = a % b;
    if (m != 0 && ((b < 0) != (m < 0))) m += b;
    return m;
  }
}

// C's fmod: the sign of the dividend.
template <typename C>
__device__ __forceinline__ C pw_fmod(C a, C b) {
  if constexpr (is_float_c<C>::value) {
    return fmod(a, b);
  } else {
    return b == 0 || b == C(-1) ? C(0) : a % b;
  }
}

// pow: CUDA's for floats; by squaring with wrap-around for integers, a
// negative exponent as ATen's powi gives it.
template <typename C>
__device__ __forceinline__ C pw_pow(C base, C exp) {
  if constexpr (is_float_c<C>::value) {
    return pow(base, exp);
  } else {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp % 2 != 0) ? C(-1) : C(1);
      return 0;
    }
    unsigned long long r = 1, b = (unsigned long long)base;
    while (exp) {
      if (exp & 1) r *= b;
      exp /= 2;
      b *= b;
    }
    return (C)r;
  }
}

// minimum / maximum: NaN wins.
template <typename C>
__device__ __forceinline__ C pw_minimum(C a, C b) {
  return (a < b || a != a) ? a : b;
}
template <typename C>
__device__ __forceinline__ C pw_maximum(C a, C b) {
  return (a > b || a != a) ? a : b;
}
// fmin / fmax: NaN loses.
template <typename C>
__device__ __forceinline__ C pw_fmin(C a, C b) {
  if (a != a) return b;
  if (b != b) return a;
  return a < b ? a : b;
}
template <typename C>
__device__ __forceinline__ C pw_fmax(C a, C b) {
  if (a != a) return b;
  if (b != b) return a;
  return a > b ? a : b;
}

template <typename C>
__device__ __forceinline__ C pw_logaddexp(C a, C b) {
  if (a != a || b != b) return a + b;
  const C m = a > b ? a : b;
  if (isinf(m) && a == b) return a;
  return m + log1p(exp(-fabs(a - b)));
}
template <typename C>
__device__ __forceinline__ C pw_logaddexp2(C a, C b) {
  if (a != a || b != b) return a + b;
  const C m = a > b ? a : b;
  if (isinf(m) && a == b) return a;
  return m + log1p(exp2(-fabs(a - b))) / log(C(2));
}

// heaviside(x, values): 0 below zero, values at zero, 1 above (NaN stays).
template <typename C>
__device__ __forceinline__ C pw_heaviside(C x, C values) {
  return x == C(0) ? values : C(x > C(0));
}

// round(x, decimals) as ATen computes it.
template <typename C>
__device__ __forceinline__ C pw_round_decimals(C x, long long decimals) {
  const bool negative = decimals < 0;
  C ten = C(1);
  for (long long d = negative ? -decimals : decimals; d > 0; --d) ten *= C(10);
  return negative ? rint(x / ten) * ten : rint(x * ten) / ten;
}

// sign: -1, 0 or 1 (NaN for NaN); ints and bools too.
template <typename C>
__device__ __forceinline__ C pw_sign(C x) {
  if constexpr (is_float_c<C>::value) {
    if (x != x) return x;
  }
  return C((C(0) < x) - (x < C(0)));
}

template <typename C>
__device__ __forceinline__ C pw_abs(C x) {
  if constexpr (is_float_c<C>::value) {
    return fabs(x);
  } else {
    return x < 0 ? C(-x) : x;
  }
}

template <typename C>
__device__ __forceinline__ bool pw_isnan(C x) {
  return x != x;
}
template <typename C>
__device__ __forceinline__ bool pw_isinf(C x) {
  if constexpr (is_float_c<C>::value) {
    return isinf(x);
  } else {
    return false;
  }
}
template <typename C>
__device__ __forceinline__ bool pw_isfinite(C x) {
  if constexpr (is_float_c<C>::value) {
    return isfinite(x);
  } else {
    return true;
  }
}
template <typename C>
__device__ __forceinline__ bool pw_signbit(C x) {
  if constexpr (is_float_c<C>::value) {
    return signbit(x);
  } else {
    return x < 0;
  }
}

// elu as ATen computes it: x * scale above zero, else (exp(x * input_scale) - 1) * alpha * scale.
template <typename C>
__device__ __forceinline__ C pw_elu(C x, C alpha, C scale, C input_scale) {
  return x > C(0) ? x * scale : expm1(x * input_scale) * alpha * scale;
}

}  // namespace kiln
