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
using std::ceil;
using std::cosh;
using std::erfc;
using std::exp;
using std::fabs;
using std::floor;
using std::fmin;
using std::isfinite;
using std::isinf;
using std::isnan;
using std::lgamma;
using std::log;
using std::log1p;
using std::modf;
using std::pow;
using std::signbit;
using std::sin;
using std::sinh;
using std::sqrt;
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

// ---- modified Bessel functions of order 0 and 1, the Airy function Ai

// exp(-x) I_nu(x) for nu 0 or 1 and x >= 0: the power series
// sum (x/2)^(2k+nu) / (k! (k+nu)!) up to x = 30, Hankel's expansion past it.
KILN_SPECIAL_FN double scaled_bessel_i(int nu, double x) {
  if (x > 30) {
    const double mu = 4.0 * nu * nu;
    double term = 1, sum = 1;
    for (int k = 1; k < 40; ++k) {
      term *= -(mu - (2.0 * k - 1) * (2.0 * k - 1)) / (8.0 * k * x);
      sum += term;
      if (fabs(term) < 1e-17 * fabs(sum)) break;
    }
    return sum / sqrt(2 * kPi * x);
  }
  const double q = x * x / 4;
  double term = nu == 0 ? 1.0 : x / 2, sum = term;
  for (int k = 1; k < 200 && term > 1e-17 * sum; ++k) {
    term *= q / (static_cast<double>(k) * (k + nu));
    sum += term;
  }
  return sum * exp(-x);
}

// K_nu(x) for nu 0 or 1 and 0 < x <= 2, from its series (Abramowitz and
// Stegun 9.6.11): K0 = -log(x/2) I0 + sum psi(k+1) q^k / k!^2 and
// K1 = 1/x + log(x/2) I1 - x/4 sum (psi(k+1) + psi(k+2)) q^k / (k! (k+1)!),
// q = x^2 / 4, psi(k+1) = H_k - gamma.
KILN_SPECIAL_FN double bessel_k_series(int nu, double x) {
  const double euler_gamma = 0.57721566490153286061;
  const double q = x * x / 4, l = log(x / 2);
  double term = 1, psi = -euler_gamma, sum = 0;  // q^k / (k! (k+nu)!), psi(k+1)
  for (int k = 0; k < 60; ++k) {
    const double psi_next = psi + 1.0 / (k + 1);
    const double add = term * (nu == 0 ? psi : psi + psi_next);
    sum += add;
    term *= q / ((k + 1.0) * (k + 1.0 + nu));
    psi = psi_next;
    if (k > 2 && fabs(add) < 1e-18 * fabs(sum)) break;
  }
  const double i = scaled_bessel_i(nu, x) * exp(x);
  if (nu == 0) return -l * i + sum;
  return 1 / x + l * i - x / 4 * sum;
}

// exp(x) K_nu(x) for x > 0 and any order nu: the integral
// int_0^inf exp(-x (cosh t - 1)) cosh(nu t) dt by the trapezoid rule, which
// converges geometrically in the step for this analytic, doubly exponentially
// decaying integrand (step 0.05, or 0.1 / sqrt(x) where the peak narrows).
KILN_SPECIAL_FN double scaled_bessel_k_integral(double nu, double x) {
  const double h = fmin(0.05, 0.1 / sqrt(x));
  double sum = 0.5;  // t = 0, half weight
  for (int i = 1; i < 4000; ++i) {
    const double t = i * h, s = sinh(t / 2);
    const double f = exp(-2 * x * s * s) * (nu == 0 ? 1.0 : cosh(nu * t));
    sum += f;
    if (f < 1e-18 * sum) break;
  }
  return sum * h;
}

// exp(x) K_nu(x), nu 0 or 1, x > 0.
KILN_SPECIAL_FN double scaled_bessel_k(int nu, double x) {
  return x <= 2 ? exp(x) * bessel_k_series(nu, x) : scaled_bessel_k_integral(nu, x);
}

KILN_SPECIAL_FN double i0e(double x) {
  if (isnan(x)) return x;
  return scaled_bessel_i(0, fabs(x));
}
KILN_SPECIAL_FN double i1e(double x) {
  if (isnan(x)) return x;
  const double v = scaled_bessel_i(1, fabs(x));
  return x < 0 ? -v : v;
}
// K0 and K1 (scaled: times exp(x)): NaN below 0, infinite at 0.
KILN_SPECIAL_FN double modified_bessel_k(int nu, double x, bool scaled) {
  if (isnan(x) || x < 0) return nan_value();
  if (x == 0) return inf();
  if (isinf(x)) return 0;
  if (scaled) return scaled_bessel_k(nu, x);
  if (x <= 2) return bessel_k_series(nu, x);
  if (x > 710) return 0;  // below double's smallest value
  return scaled_bessel_k_integral(nu, x) * exp(-x);
}

KILN_SPECIAL_FN double k0(double x) { return modified_bessel_k(0, x, false); }
KILN_SPECIAL_FN double k1(double x) { return modified_bessel_k(1, x, false); }
KILN_SPECIAL_FN double k0e(double x) { return modified_bessel_k(0, x, true); }
KILN_SPECIAL_FN double k1e(double x) { return modified_bessel_k(1, x, true); }

// The Airy function Ai: for x > 1, sqrt(x / 3) / pi K_{1/3}(zeta) with
// zeta = 2/3 x^(3/2); on [-2, 1] its Maclaurin series Ai(0) f(x) + Ai'(0) g(x);
// on [-8, -2) steps along Airy's equation; below -8 the asymptotic expansion of Ai(-z) (DLMF 9.7.9).
KILN_SPECIAL_FN double airy_ai(double x) {
  if (isnan(x)) return x;
  if (isinf(x)) return x > 0 ? 0.0 : nan_value();
  if (x > 104) return 0;  // below double's smallest value
  const double ai0 = 0.35502805388781723926, dai0 = -0.25881940379280679840;
  if (x > 1) {
    const double zeta = 2.0 / 3 * x * sqrt(x);
    return sqrt(x / 3) / kPi * scaled_bessel_k_integral(1.0 / 3, zeta) * exp(-zeta);
  }
  if (x >= -2) {
    const double x3 = x * x * x;
    double f = 1, g = x, tf = 1, tg = x;
    for (int k = 0; k < 200; ++k) {
      tf *= x3 / ((3.0 * k + 2) * (3.0 * k + 3));
      tg *= x3 / ((3.0 * k + 3) * (3.0 * k + 4));
      f += tf;
      g += tg;
      if (fabs(tf) < 1e-18 * fabs(f) && fabs(tg) < 1e-18 * (fabs(g) + 1e-300)) break;
    }
    return ai0 * f + dai0 * g;
  }
  if (x >= -8) {
    // Steps of at most 1 from 0 along Airy's equation y'' = x y, each by the Taylor series at its start a:
    // c0 = y, c1 = y', c2 = a c0 / 2, c(n+2) = (a c(n) + c(n-1)) / ((n+2)(n+1)). The oscillating side
    // is stable to step through; the series at 0 alone would lose digits to terms as large as exp(zeta).
    const int steps = static_cast<int>(ceil(-x));
    const double h = x / steps;
    double y = ai0, dy = dai0;
    for (int s = 0; s < steps; ++s) {
      const double a = s * h;
      double c_km2 = y, c_km1 = dy, c_k = a * y / 2;  // c(k-2), c(k-1), c(k) for k = 2
      double hk = h * h, value = y + dy * h + c_k * hk, slope = dy + 2 * c_k * h;
      int small = 0;  // consecutive negligible terms (at a = 0 two in three vanish)
      for (int k = 2; k < 80 && small < 3; ++k) {
        const double next = (a * c_km1 + c_km2) / ((k + 1.0) * k);  // c(k+1)
        slope += (k + 1) * next * hk;
        hk *= h;
        value += next * hk;
        c_km2 = c_km1;
        c_km1 = c_k;
        c_k = next;
        small = fabs(next * hk) < 1e-18 ? small + 1 : 0;
      }
      y = value;
      dy = slope;
    }
    return y;
  }
  const double z = -x, zeta = 2.0 / 3 * z * sqrt(z);
  // u_k = u_{k-1} (6k-5)(6k-3)(6k-1) / (216 k (2k-1)); P sums the even terms, Q the odd, alternating.
  // The series diverges: stop at its smallest term.
  double u = 1, p = 1, q = 0, zpow = 1, last = 1;
  for (int k = 1; k < 60; ++k) {
    u *= (6.0 * k - 5) * (6.0 * k - 3) * (6.0 * k - 1) / (216.0 * k * (2.0 * k - 1));
    zpow /= zeta;
    const double term = u * zpow;
    if (term >= last || term < 1e-18) break;
    last = term;
    const double signed_term = (k / 2) % 2 ? -term : term;
    if (k % 2)
      q += signed_term;
    else
      p += signed_term;
  }
  const double phase = zeta - kPi / 4;
  return (cos(phase) * p + sin(phase) * q) / (sqrt(kPi) * sqrt(sqrt(z)));
}

// ---- the normal distribution

// exp(x^2) erfc(x): directly up to 26, then its asymptotic series; for
// negative x from erfc's reflection.
KILN_SPECIAL_FN double scaled_erfc(double x) {
  if (isnan(x)) return x;
  if (x < 0) {
    if (x < -26.7) return inf();
    return 2 * exp(x * x) - scaled_erfc(-x);
  }
  if (x < 26) return exp(x * x) * erfc(x);
  if (isinf(x)) return 0;
  // 1 / (x sqrt(pi)) * (1 - 1/(2x^2) + 3/(2x^2)^2 - 15/(2x^2)^3 + ...)
  const double t = 1 / (2 * x * x);
  double term = 1, sum = 1;
  for (int k = 1; k < 8; ++k) {
    term *= -(2 * k - 1) * t;
    sum += term;
  }
  return sum / (x * sqrt(kPi));
}

// log of the standard normal CDF: through scaled_erfc in the lower tail, where
// the CDF itself underflows.
KILN_SPECIAL_FN double log_ndtr(double x) {
  if (isnan(x)) return x;
  const double t = x * 0.70710678118654752440;
  if (x < -1) return log(0.5 * scaled_erfc(-t)) - t * t;
  return log1p(-0.5 * erfc(t));
}

}  // namespace kiln::special_functions
