#include "backends/cpu/special_math.h"

#include <array>
#include <cmath>
#include <limits>
#include <numbers>

#include "backends/cuda/kernels/special_functions.cuh"

namespace kiln::cpu::special {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kPi = std::numbers::pi;

// Past this, I overflows double.
constexpr double kLargeArgument = 600;

// Refines y0, a root of f, by Halley's method given f(y) / f'(y) and f''(y) / f'(y).
template <typename Step>
double halley(double y, Step step) {
  for (int i = 0; i < 50; ++i) {
    auto [ratio, curvature] = step(y);
    const double next = y - ratio / (1 - 0.5 * ratio * curvature);
    if (!std::isfinite(next)) return y;
    const bool done = std::abs(next - y) <= 1e-16 * std::abs(next);
    y = next;
    if (done) break;
  }
  return y;
}

}  // namespace

double bessel_j0(double x) {
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return 0;
  return std::cyl_bessel_j(0.0, std::abs(x));
}
double bessel_j1(double x) {
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return 0;
  const double v = std::cyl_bessel_j(1.0, std::abs(x));
  return x < 0 ? -v : v;
}
double bessel_y0(double x) {
  if (std::isnan(x) || x < 0) return kNaN;
  if (x == 0) return -kInf;
  if (std::isinf(x)) return 0;
  return std::cyl_neumann(0.0, x);
}
double bessel_y1(double x) {
  if (std::isnan(x) || x < 0) return kNaN;
  if (x == 0) return -kInf;
  if (std::isinf(x)) return 0;
  return std::cyl_neumann(1.0, x);
}

double modified_bessel_i0(double x) {
  if (std::isnan(x)) return x;
  const double ax = std::abs(x);
  if (ax > kLargeArgument) return kInf;
  return std::cyl_bessel_i(0.0, ax);
}
double modified_bessel_i1(double x) {
  if (std::isnan(x)) return x;
  const double ax = std::abs(x);
  const double v = ax > kLargeArgument ? kInf : std::cyl_bessel_i(1.0, ax);
  return x < 0 ? -v : v;
}
double i0e(double x) { return special_functions::i0e(x); }
double i1e(double x) { return special_functions::i1e(x); }
double modified_bessel_k0(double x) { return special_functions::modified_bessel_k(0, x, false); }
double modified_bessel_k1(double x) { return special_functions::modified_bessel_k(1, x, false); }
double scaled_modified_bessel_k0(double x) { return special_functions::modified_bessel_k(0, x, true); }
double scaled_modified_bessel_k1(double x) { return special_functions::modified_bessel_k(1, x, true); }

double airy_ai(double x) { return special_functions::airy_ai(x); }

double spherical_bessel_j0(double x) {
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return 0;
  if (std::abs(x) < 1e-4) return 1 - x * x / 6;
  return std::sin(x) / x;
}

double erfcx(double x) { return special_functions::scaled_erfc(x); }

double ndtr(double x) { return 0.5 * std::erfc(-x / std::numbers::sqrt2); }

double log_ndtr(double x) { return special_functions::log_ndtr(x); }

// The root of ndtr(y) = p from a rational first guess (Abramowitz and Stegun
// 26.2.23, error below 4.5e-4), refined by Halley's method on the tail that
// keeps p's digits.
double ndtri(double p) {
  if (std::isnan(p) || p < 0 || p > 1) return kNaN;
  if (p == 0) return -kInf;
  if (p == 1) return kInf;
  const double q = std::min(p, 1 - p);
  const double t = std::sqrt(-2 * std::log(q));
  double y = t - (2.515517 + 0.802853 * t + 0.010328 * t * t) / (1 + 1.432788 * t + 0.189269 * t * t + 0.001308 * t * t * t);
  // Solve for the lower tail value -y with ndtr(-y) = q, then mirror when p > 1/2.
  y = halley(-y, [q](double v) {
    const double f = ndtr(v) - q;
    const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2 * kPi);
    return std::pair{f / pdf, -v};
  });
  return p > 0.5 ? -y : y;
}

double erfinv(double y) {
  if (std::isnan(y) || y < -1 || y > 1) return kNaN;
  if (y == 1) return kInf;
  if (y == -1) return -kInf;
  if (y == 0) return y;
  const double ay = std::abs(y);
  double x;
  if (ay <= 0.5) {
    // Newton-Halley on erf(x) = y from its first Taylor term.
    x = halley(ay * std::sqrt(kPi) / 2, [ay](double v) {
      const double f = std::erf(v) - ay;
      const double d = 2 / std::sqrt(kPi) * std::exp(-v * v);
      return std::pair{f / d, -2 * v};
    });
  } else {
    // On the complement, erfc(x) = 1 - |y|, which keeps its digits near 1.
    const double c = 1 - ay;
    x = -ndtri(c / 2) / std::numbers::sqrt2;
    x = halley(x, [c](double v) {
      const double f = std::erfc(v) - c;
      const double d = -2 / std::sqrt(kPi) * std::exp(-v * v);
      return std::pair{f / d, -2 * v};
    });
  }
  return y < 0 ? -x : x;
}

double entr(double x) {
  if (std::isnan(x)) return x;
  if (x > 0) return -x * std::log(x);
  if (x == 0) return 0;
  return -kInf;
}

// Written once for both backends (kernels/special_functions.cuh).
double digamma(double x) { return special_functions::digamma(x); }
double hurwitz_zeta(double s, double q) { return special_functions::hurwitz_zeta(s, q); }
double polygamma(int64_t n, double x) { return special_functions::polygamma(n, x); }

double igamma(double a, double x) { return special_functions::igamma(a, x); }
double igammac(double a, double x) { return special_functions::igammac(a, x); }
double mvlgamma(double x, int64_t p) { return special_functions::mvlgamma(x, p); }

double polynomial(Polynomial kind, double x, int64_t n) {
  return special_functions::polynomial(static_cast<int>(kind), x, n);
}

double shifted_chebyshev(Polynomial kind, double x, int64_t n) {
  return special_functions::shifted_chebyshev(static_cast<int>(kind), x, n);
}

}  // namespace kiln::cpu::special
