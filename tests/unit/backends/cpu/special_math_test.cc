// The special functions against values computed another way: their integral
// representations integrated numerically, identities between them (the
// Wronskian, round trips through inverses, differential equations), closed
// forms of low-degree polynomials and classical constants.
#include "backends/cpu/special_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <numbers>

namespace kiln::cpu::special {
namespace {

constexpr double kPi = std::numbers::pi;

// Composite Simpson's rule over [a, b] with n (even) panels.
double simpson(const std::function<double(double)>& f, double a, double b, int n = 20000) {
  const double h = (b - a) / n;
  double s = f(a) + f(b);
  for (int i = 1; i < n; ++i) s += (i % 2 == 1 ? 4 : 2) * f(a + i * h);
  return s * h / 3;
}

void expect_rel(double got, double want, double rel, const char* what, double x) {
  EXPECT_NEAR(got, want, rel * std::max(1.0, std::abs(want))) << what << " at " << x;
}

TEST(SpecialMath, BesselFunctionsMatchTheirIntegrals) {
  for (double x : {-7.5, -1.0, 0.0, 0.3, 1.0, 2.405, 6.0, 14.2}) {
    const double j0 = simpson([x](double t) { return std::cos(x * std::sin(t)); }, 0, kPi) / kPi;
    const double j1 = simpson([x](double t) { return std::cos(t - x * std::sin(t)); }, 0, kPi) / kPi;
    expect_rel(bessel_j0(x), j0, 1e-12, "J0", x);
    expect_rel(bessel_j1(x), j1, 1e-12, "J1", x);
    const double i0 = simpson([x](double t) { return std::exp(x * std::cos(t)); }, 0, kPi) / kPi;
    const double i1 = simpson([x](double t) { return std::exp(x * std::cos(t)) * std::cos(t); }, 0, kPi) / kPi;
    EXPECT_NEAR(modified_bessel_i0(x), i0, 1e-12 * i0) << x;
    EXPECT_NEAR(modified_bessel_i1(x), i1, 1e-12 * std::max(1.0, std::abs(i1))) << x;
    EXPECT_NEAR(i0e(x), std::exp(-std::abs(x)) * i0, 1e-12) << x;
    EXPECT_NEAR(i1e(x), std::exp(-std::abs(x)) * i1, 1e-12) << x;
  }
  for (double x : {0.05, 0.7, 1.0, 3.0, 9.0, 40.0}) {
    // K_nu(x) = int_0^inf exp(-x cosh t) cosh(nu t) dt; its scaled form integrates exp(-x (cosh t - 1)).
    const double upper = std::acosh(1 + 800 / x);
    const double k0s = simpson([x](double t) { return std::exp(-x * (std::cosh(t) - 1)); }, 0, upper);
    const double k1s = simpson([x](double t) { return std::exp(-x * (std::cosh(t) - 1)) * std::cosh(t); }, 0, upper);
    EXPECT_NEAR(scaled_modified_bessel_k0(x), k0s, 1e-10 * k0s) << x;
    EXPECT_NEAR(scaled_modified_bessel_k1(x), k1s, 1e-10 * k1s) << x;
    EXPECT_NEAR(modified_bessel_k0(x), std::exp(-x) * k0s, 1e-10 * std::exp(-x) * k0s) << x;
    EXPECT_NEAR(modified_bessel_k1(x), std::exp(-x) * k1s, 1e-10 * std::exp(-x) * k1s) << x;
    // The Wronskian J1 Y0 - J0 Y1 = 2 / (pi x) ties Y to the J checked above.
    EXPECT_NEAR(bessel_j1(x) * bessel_y0(x) - bessel_j0(x) * bessel_y1(x), 2 / (kPi * x), 1e-12 / x) << x;
  }
  // Past double's range of K and I, the scaled forms from their asymptotic series.
  for (double x : {650.0, 2000.0}) {
    const double upper = std::acosh(1 + 800 / x);
    EXPECT_NEAR(scaled_modified_bessel_k0(x), simpson([x](double t) { return std::exp(-x * (std::cosh(t) - 1)); }, 0, upper),
                1e-12);
    const double i0s = simpson([x](double t) { return std::exp(x * (std::cos(t) - 1)); }, 0, kPi) / kPi;
    EXPECT_NEAR(i0e(x), i0s, 1e-12) << x;
  }
  EXPECT_EQ(bessel_y0(0), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(bessel_y1(-1)));
  EXPECT_TRUE(std::isnan(modified_bessel_k0(-1)));
  EXPECT_EQ(modified_bessel_k1(0), std::numeric_limits<double>::infinity());
  EXPECT_DOUBLE_EQ(spherical_bessel_j0(2.0), std::sin(2.0) / 2);
  EXPECT_DOUBLE_EQ(spherical_bessel_j0(0.0), 1.0);
}

// The scaled I and K and Ai (series, a trapezoid integral and an asymptotic
// expansion, written for the device) beside the C++17 library's Bessel
// functions, across every branch's range and its edges.
TEST(SpecialMath, ModifiedBesselAndAiryMatchTheStandardLibrary) {
  for (double x = 1e-6; x < 700; x *= 1.07) {
    const double i0 = std::cyl_bessel_i(0.0, x), i1 = std::cyl_bessel_i(1.0, x);
    const double k0 = std::cyl_bessel_k(0.0, x), k1 = std::cyl_bessel_k(1.0, x);
    EXPECT_NEAR(i0e(x), std::exp(-x) * i0, 1e-14 * std::exp(-x) * i0) << x;
    EXPECT_NEAR(i1e(-x), -std::exp(-x) * i1, 1e-14 * std::exp(-x) * i1) << x;
    EXPECT_NEAR(modified_bessel_k0(x), k0, 1e-13 * k0) << x;
    EXPECT_NEAR(modified_bessel_k1(x), k1, 1e-13 * k1) << x;
    EXPECT_NEAR(scaled_modified_bessel_k0(x), std::exp(x) * k0, 1e-13 * std::exp(x) * k0) << x;
    EXPECT_NEAR(scaled_modified_bessel_k1(x), std::exp(x) * k1, 1e-13 * std::exp(x) * k1) << x;
  }
  for (double x = -30; x < 30; x += 0.0371) {
    const double ax = std::abs(x), zeta = 2.0 / 3 * ax * std::sqrt(ax);
    const double want =
        x > 0
            ? std::sqrt(ax / 3) / kPi * std::cyl_bessel_k(1.0 / 3, zeta)
            : std::sqrt(ax) / 2 * (std::cyl_bessel_j(1.0 / 3, zeta) - std::cyl_neumann(1.0 / 3, zeta) / std::sqrt(3.0));
    // Absolute beside the oscillation's amplitude (|x|^(-1/4) / sqrt(pi)) for negative x: near a root relative
    // error means nothing.
    const double scale = x < 0 ? std::pow(ax, -0.25) / std::sqrt(kPi) : std::abs(want);
    EXPECT_NEAR(airy_ai(x), want, 1e-12 * std::max(scale, 1e-300)) << x;
  }
}

TEST(SpecialMath, AiryAiSolvesAirysEquation) {
  // Ai(0) and Ai'(0) from the gamma function, Ai'' = x Ai by central differences.
  EXPECT_NEAR(airy_ai(0), 1 / (std::pow(3.0, 2.0 / 3) * std::tgamma(2.0 / 3)), 1e-15);
  const double h = 1e-3;
  EXPECT_NEAR((airy_ai(h) - airy_ai(-h)) / (2 * h), -1 / (std::pow(3.0, 1.0 / 3) * std::tgamma(1.0 / 3)), 1e-7);
  for (double x : {-9.0, -4.2, -1.5, -0.2, 0.5, 1.7, 4.0, 8.0}) {
    const double second = (airy_ai(x + h) - 2 * airy_ai(x) + airy_ai(x - h)) / (h * h);
    EXPECT_NEAR(second, x * airy_ai(x), 1e-6 * std::max(1.0, std::abs(x))) << x;
  }
  EXPECT_GT(airy_ai(5.0), 0);
  EXPECT_EQ(airy_ai(200.0), 0);
}

TEST(SpecialMath, NormalDistributionFunctionsInvertEachOther) {
  // (Not far in the upper tail: there p rounds to 1 and x is lost.)
  for (double x : {-37.0, -20.0, -5.0, -1.0, -1e-9, 0.0, 0.4, 3.0, 5.0}) {
    const double p = ndtr(x);
    EXPECT_NEAR(ndtri(p), x, 1e-9 * std::max(1.0, std::abs(x))) << x;
    if (x > -30) {
      EXPECT_NEAR(log_ndtr(x), std::log(p), 1e-12 * std::max(1.0, std::abs(std::log(p)))) << x;
    }
  }
  // Far in the lower tail, log ndtr(x) = -x^2/2 - log(-x sqrt(2 pi)) + log(1 - 1/x^2 + 3/x^4 - ...).
  const double x = -60;
  EXPECT_NEAR(log_ndtr(x), -x * x / 2 - std::log(-x * std::sqrt(2 * kPi)) + std::log1p(-1 / (x * x) + 3 / std::pow(x, 4)),
              1e-9);
  for (double v : {-2.5, -0.7, -1e-12, 1e-30, 0.2, 1.1, 3.9}) {
    EXPECT_NEAR(erfinv(std::erf(v)), v, 1e-9 * std::max(1e-20, std::abs(v)) + 1e-300) << v;
  }
  EXPECT_EQ(erfinv(1.0), std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(erfinv(1.5)));
  EXPECT_EQ(ndtri(0.0), -std::numeric_limits<double>::infinity());
  for (double v : {-3.0, -0.5, 0.0, 2.0, 10.0}) {
    EXPECT_NEAR(erfcx(v), std::exp(v * v) * std::erfc(v), 1e-13 * erfcx(v)) << v;
  }
  // erfcx' = 2x erfcx - 2/sqrt(pi): checks the asymptotic branch past x = 26.
  for (double v : {27.0, 100.0, 1e4}) {
    const double h = v * 1e-5;
    const double d = (erfcx(v + h) - erfcx(v - h)) / (2 * h);
    EXPECT_NEAR(d, 2 * v * erfcx(v) - 2 / std::sqrt(kPi), 1e-6 * std::abs(d)) << v;
  }
  EXPECT_DOUBLE_EQ(entr(0.5), 0.5 * std::log(2.0));
  EXPECT_EQ(entr(0.0), 0.0);
  EXPECT_EQ(entr(-1.0), -std::numeric_limits<double>::infinity());
}

TEST(SpecialMath, GammaFamilyFollowsItsDefinitions) {
  constexpr double kEulerGamma = 0.57721566490153286061;
  EXPECT_NEAR(digamma(1), -kEulerGamma, 1e-15);
  for (double x : {-3.7, -0.4, 0.01, 0.5, 3.3, 12.0, 250.0}) {
    const double h = 1e-5 * std::abs(x);  // relative: psi'' grows as 1/x^3 near 0
    const double d = (std::lgamma(x + h) - std::lgamma(x - h)) / (2 * h);
    EXPECT_NEAR(digamma(x), d, 1e-7 * std::max(1.0, std::abs(d))) << x;
  }
  EXPECT_TRUE(std::isnan(digamma(-2.0)));
  EXPECT_EQ(digamma(0.0), -std::numeric_limits<double>::infinity());
  EXPECT_NEAR(hurwitz_zeta(2, 1), kPi * kPi / 6, 1e-15);
  EXPECT_NEAR(hurwitz_zeta(4, 1), std::pow(kPi, 4) / 90, 1e-15);
  EXPECT_NEAR(polygamma(1, 1), kPi * kPi / 6, 1e-14);
  EXPECT_NEAR(polygamma(2, 1), -2 * 1.2020569031595942854, 1e-14);
  // zeta(s, q) against a long direct sum plus its integral tail.
  for (auto [s, q] : {std::pair{2.5, 0.3}, {3.0, -1.5}, {7.0, 4.2}, {1.5, 20.0}}) {
    double sum = 0;
    const int n = 200000;
    for (int k = 0; k < n; ++k) sum += std::pow(q + k, -s);
    sum += std::pow(q + n, 1 - s) / (s - 1) + 0.5 * std::pow(q + n, -s);
    EXPECT_NEAR(hurwitz_zeta(s, q), sum, 1e-11 * std::abs(sum)) << s << ", " << q;
  }
  EXPECT_EQ(hurwitz_zeta(2, -3), std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(hurwitz_zeta(0.5, 2)));
  // P(a, x) = int_0^x t^(a-1) e^-t dt / Gamma(a); below a = 1, where t^(a-1)
  // is singular at 0, as (1/a) int_0^(x^a) exp(-u^(1/a)) du (t = u^(1/a)).
  for (auto [a, x] : {std::pair{0.7, 0.2}, {2.0, 1.0}, {3.5, 6.0}, {10.0, 4.0}, {30.0, 41.0}}) {
    const double integral =
        a < 1 ? simpson([a = a](double u) { return std::exp(-std::pow(u, 1 / a)); }, 0, std::pow(x, a), 200000) / a
              : simpson([a = a](double t) { return t == 0 ? 0 : std::exp((a - 1) * std::log(t) - t); }, 0, x, 200000);
    const double p = integral / std::tgamma(a);
    EXPECT_NEAR(igamma(a, x), p, 1e-11) << a << ", " << x;
    EXPECT_NEAR(igammac(a, x), 1 - p, 1e-11) << a << ", " << x;
  }
  EXPECT_EQ(igamma(0, 1), 1);
  EXPECT_TRUE(std::isnan(igammac(-1, 1)));
  EXPECT_NEAR(mvlgamma(2.5, 1), std::lgamma(2.5), 1e-15);
  EXPECT_NEAR(mvlgamma(2.5, 3), 1.5 * std::log(kPi) + std::lgamma(2.5) + std::lgamma(2.0) + std::lgamma(1.5), 1e-14);
}

TEST(SpecialMath, PolynomialsMatchTheirClosedForms) {
  using enum Polynomial;
  for (double x : {-1.3, -1.0, -0.6, 0.0, 0.25, 0.9, 1.0, 2.2}) {
    EXPECT_NEAR(polynomial(kHermiteH, x, 3), 8 * x * x * x - 12 * x, 1e-12) << x;
    EXPECT_NEAR(polynomial(kHermiteHe, x, 4), std::pow(x, 4) - 6 * x * x + 3, 1e-12) << x;
    EXPECT_NEAR(polynomial(kLaguerre, x, 3), (-x * x * x + 9 * x * x - 18 * x + 6) / 6, 1e-12) << x;
    EXPECT_NEAR(polynomial(kLegendre, x, 4), (35 * std::pow(x, 4) - 30 * x * x + 3) / 8, 1e-12) << x;
    EXPECT_NEAR(polynomial(kChebyshevV, x, 2), 4 * x * x - 2 * x - 1, 1e-12) << x;
    EXPECT_NEAR(polynomial(kChebyshevW, x, 2), 4 * x * x + 2 * x - 1, 1e-12) << x;
    EXPECT_NEAR(shifted_chebyshev(kChebyshevT, x, 2), 8 * x * x - 8 * x + 1, 1e-12) << x;
    EXPECT_EQ(polynomial(kLegendre, x, -1), 0);
  }
  // T_n(cos t) = cos(n t), U_n(cos t) = sin((n+1) t) / sin t; T_n(cosh u) = cosh(n u):
  // the angle forms above degree 6 and the recurrences agree with them.
  for (int64_t n : {0, 1, 5, 7, 12, 40}) {
    for (double t : {0.3, 1.1, 2.9}) {
      const double nd = static_cast<double>(n);
      EXPECT_NEAR(polynomial(kChebyshevT, std::cos(t), n), std::cos(nd * t), 1e-11) << n << ", " << t;
      EXPECT_NEAR(polynomial(kChebyshevU, std::cos(t), n), std::sin((nd + 1) * t) / std::sin(t), 1e-10 * (nd + 1))
          << n;
      EXPECT_NEAR(polynomial(kChebyshevV, std::cos(t), n), std::cos((nd + 0.5) * t) / std::cos(t / 2), 1e-9 * (nd + 1))
          << n;
      EXPECT_NEAR(polynomial(kChebyshevW, std::cos(t), n), std::sin((nd + 0.5) * t) / std::sin(t / 2), 1e-9 * (nd + 1))
          << n;
    }
    const double u = 0.4;
    const double want = std::cosh(static_cast<double>(n) * u);
    EXPECT_NEAR(polynomial(kChebyshevT, std::cosh(u), n), want, 1e-11 * want) << n;
  }
}

}  // namespace
}  // namespace kiln::cpu::special
