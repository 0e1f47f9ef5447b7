// Special functions written once for both backends: the CPU kernels include
// this file as C++ (backends/cpu/special_math.cc), NVRTC compiles it for the
// CUDA pointwise layer (as "kiln/special_functions.cuh"). In double, with the
// values PyTorch gives at the edges of each domain: the digamma function,
// Hurwitz's zeta, polygamma, the incomplete gamma functions, the
// multivariate log-gamma, and the orthogonal polynomials of degree n
// (n < 0 gives 0). Only what both compilers take: no standard library on the
// device, the C math functions by their plain names.
#pragma once

#ifdef __CUDACC_RTC__
#define KILN_SPECIAL_FN __device__ __forceinline__
#else
#include <cmath>
#define KILN_SPECIAL_FN inline
#endif

namespace kiln::special_functions {

#ifndef __CUDACC_RTC__
using std::acos;
using std::cos;
using std::exp;
using std::fabs;
using std::floor;
using std::isfinite;
using std::isinf;
using std::isnan;
using std::lgamma;
using std::log;
using std::modf;
using std::pow;
using std::signbit;
using std::sin;
using std::tan;
using std::trunc;
#endif

constexpr double kPi = 3.14159265358979323846;

#ifdef __CUDACC_RTC__
KILN_SPECIAL_FN double inf() { return __longlong_as_double(0x7ff0000000000000LL); }
KILN_SPECIAL_FN double nan_value() { return __longlong_as_double(0x7ff8000000000000LL); }
#else
inline double inf() { return HUGE_VAL; }
inline double nan_value() { return std::nan(""); }
#endif

// digamma of x > 0: the recurrence up to x >= 10, then the asymptotic
// series log x - 1/(2x) - sum B_2k / (2k x^2k).
KILN_SPECIAL_FN double digamma_positive(double x) {
  if (isinf(x)) return x;
  double result = 0;
  while (x < 10) {
    result -= 1 / x;
    x += 1;
  }
  const double b2k_over_2k[7] = {1.0 / 12, -1.0 / 120, 1.0 / 252, -1.0 / 240, 1.0 / 132, -691.0 / 32760, 1.0 / 12};
  const double z = 1 / (x * x);
  double series = 0, zk = z;
  for (int k = 0; k < 7; ++k) {
    series += b2k_over_2k[k] * zk;
    zk *= z;
  }
  return result + log(x) - 0.5 / x - series;
}

// digamma, by reflection for negative x.
KILN_SPECIAL_FN double digamma(double x) {
  if (isnan(x)) return x;
  if (x == 0) return signbit(x) ? inf() : -inf();
  if (x < 0) {
    if (x == trunc(x)) return nan_value();
    double whole;
    const double frac = modf(x, &whole);
    return digamma_positive(1 - x) - kPi / tan(kPi * frac);
  }
  return digamma_positive(x);
}

// sum_{k<N} (q+k)^-s plus the Euler-Maclaurin tail at a = q + N, with a at
// least 10 and at least s so that the tail's terms shrink.
KILN_SPECIAL_FN double hurwitz_zeta(double s, double q) {
  if (isnan(s) || isnan(q)) return nan_value();
  if (s == 1) return inf();
  if (s < 1) return nan_value();
  if (q <= 0) {
    if (q == floor(q)) return inf();
    if (s != floor(s)) return nan_value();  // (q+k)^-s is not real
  }
  if (isinf(s)) return q == 1 ? 1 : (q > 1 ? 0 : inf());
  const double start = s > 10.0 ? s : 10.0;
  double sum = 0, a = q;
  while (a < start) {
    sum += pow(a, -s);
    a += 1;
  }
  // B_2j / (2j)! for j = 1..12
  const double b[12] = {1.0 / 6 / 2,
                        -1.0 / 30 / 24,
                        1.0 / 42 / 720,
                        -1.0 / 30 / 40320,
                        5.0 / 66 / 3628800,
                        -691.0 / 2730 / 479001600,
                        7.0 / 6 / 87178291200.0,
                        -3617.0 / 510 / 20922789888000.0,
                        43867.0 / 798 / 6402373705728000.0,
                        -174611.0 / 330 / 2432902008176640000.0,
                        854513.0 / 138 / 1.1240007277776077e21,
                        -236364091.0 / 2730 / 6.204484017332394e23};
  double tail = pow(a, 1 - s) / (s - 1) + 0.5 * pow(a, -s);
  double factor = s * pow(a, -s - 1);  // s (s+1) ... (s+2j-2) a^(-s-2j+1)
  for (int j = 0; j < 12; ++j) {
    const double term = b[j] * factor;
    tail += term;
    if (fabs(term) < 1e-17 * fabs(sum + tail)) break;
    factor *= (s + 2 * j + 1) * (s + 2 * j + 2) / (a * a);
  }
  return sum + tail;
}

KILN_SPECIAL_FN double polygamma(long long n, double x) {
  if (n < 0) return nan_value();
  if (n == 0) return digamma(x);
  const double sign = n % 2 == 1 ? 1 : -1;
  return sign * exp(lgamma(n + 1.0)) * hurwitz_zeta(static_cast<double>(n + 1), x);
}

// The regularized lower incomplete gamma by its series (x < a + 1).
KILN_SPECIAL_FN double igamma_series(double a, double x) {
  double term = 1 / a, sum = term;
  for (int k = 1; k < 2000; ++k) {
    term *= x / (a + k);
    sum += term;
    if (fabs(term) < 1e-17 * fabs(sum)) break;
  }
  return sum * exp(a * log(x) - x - lgamma(a));
}

// The regularized upper incomplete gamma by its continued fraction
// (x >= a + 1), evaluated by the modified Lentz method.
KILN_SPECIAL_FN double igammac_fraction(double a, double x) {
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int k = 1; k < 2000; ++k) {
    const double an = -k * (k - a);
    b += 2;
    d = an * d + b;
    if (fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (fabs(delta - 1) < 1e-16) break;
  }
  return h * exp(a * log(x) - x - lgamma(a));
}

// The regularized lower (igamma) and upper (igammac) incomplete gamma
// functions, with torch's values at the edges of the domain.
KILN_SPECIAL_FN double igamma(double a, double x) {
  if (isnan(a) || isnan(x) || x < 0 || a < 0) return nan_value();
  if (a == 0) return x > 0 ? 1 : nan_value();
  if (x == 0) return 0;
  if (isinf(a)) return isinf(x) ? nan_value() : 0;
  if (isinf(x)) return 1;
  return x < a + 1 ? igamma_series(a, x) : 1 - igammac_fraction(a, x);
}
KILN_SPECIAL_FN double igammac(double a, double x) {
  if (isnan(a) || isnan(x) || x < 0 || a < 0) return nan_value();
  if (a == 0) return x > 0 ? 0 : nan_value();
  if (x == 0) return 1;
  if (isinf(a)) return isinf(x) ? nan_value() : 1;
  if (isinf(x)) return 0;
  return x < a + 1 ? 1 - igamma_series(a, x) : igammac_fraction(a, x);
}

// The multivariate log-gamma function of dimension p.
KILN_SPECIAL_FN double mvlgamma(double x, long long p) {
  double sum = static_cast<double>(p) * static_cast<double>(p - 1) / 4 * log(kPi);
  for (long long i = 0; i < p; ++i) sum += lgamma(x - static_cast<double>(i) / 2);
  return sum;
}

// The kinds of orthogonal polynomials.
enum PolynomialKind {
  kChebyshevT = 0,
  kChebyshevU = 1,
  kChebyshevV = 2,
  kChebyshevW = 3,
  kHermiteH = 4,
  kHermiteHe = 5,
  kLaguerre = 6,
  kLegendre = 7
};

// The polynomial of `kind` and degree n at x, by its recurrence (and inside
// (-1, 1) a high-degree Chebyshev polynomial by its angle form).
KILN_SPECIAL_FN double polynomial(int kind, double x, long long n) {
  if (isnan(x)) return x;
  if (n < 0) return 0;
  const double nd = static_cast<double>(n);
  if (n > 6 && fabs(x) < 1 && kind <= kChebyshevW) {
    const double t = acos(x);
    switch (kind) {
      case kChebyshevT: return cos(nd * t);
      case kChebyshevU: return sin((nd + 1) * t) / sin(t);
      case kChebyshevV: return cos((nd + 0.5) * t) / cos(t / 2);
      default: return sin((nd + 0.5) * t) / sin(t / 2);
    }
  }
  double p0 = 1, p1 = x;
  switch (kind) {
    case kChebyshevU:
    case kHermiteH: p1 = 2 * x; break;
    case kChebyshevV: p1 = 2 * x - 1; break;
    case kChebyshevW: p1 = 2 * x + 1; break;
    case kLaguerre: p1 = 1 - x; break;
    default: break;  // T, He, P: x
  }
  if (n == 0) return p0;
  for (long long k = 1; k < n && isfinite(p1); ++k) {
    const double kd = static_cast<double>(k);
    double next;
    switch (kind) {
      case kHermiteH: next = 2 * x * p1 - 2 * kd * p0; break;
      case kHermiteHe: next = x * p1 - kd * p0; break;
      case kLaguerre: next = ((2 * kd + 1 - x) * p1 - kd * p0) / (kd + 1); break;
      case kLegendre: next = ((2 * kd + 1) * x * p1 - kd * p0) / (kd + 1); break;
      default: next = 2 * x * p1 - p0; break;  // every Chebyshev kind
    }
    p0 = p1;
    p1 = next;
  }
  return p1;
}

// The shifted Chebyshev polynomials, on [0, 1].
KILN_SPECIAL_FN double shifted_chebyshev(int kind, double x, long long n) { return polynomial(kind, 2 * x - 1, n); }

}  // namespace kiln::special_functions
