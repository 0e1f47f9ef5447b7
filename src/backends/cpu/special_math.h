// Special functions of torch.special (and aten.i0, digamma, polygamma,
// erfinv, igamma, mvlgamma), in double, with the values PyTorch gives at the
// edges of each domain (NaN outside it, the limit at a pole or an infinity).
// J, Y and I come from the C++17 mathematical special functions; K, the
// scaled I and K, Ai, erfcx and log_ndtr are the ones the CUDA kernels use
// (backends/cuda/kernels/special_functions.cuh); the rest are written here
// from their series, continued fractions and recurrences.
#pragma once

#include <cstdint>

namespace kiln::cpu::special {

// Bessel functions of the first (J) and second (Y) kind of order 0 and 1.
double bessel_j0(double x);
double bessel_j1(double x);
double bessel_y0(double x);
double bessel_y1(double x);
// Modified Bessel functions I and K of order 0 and 1; i0e/i1e are
// exp(-|x|) I(x), the scaled k0/k1 exp(x) K(x).
double modified_bessel_i0(double x);
double modified_bessel_i1(double x);
double modified_bessel_k0(double x);
double modified_bessel_k1(double x);
double i0e(double x);
double i1e(double x);
double scaled_modified_bessel_k0(double x);
double scaled_modified_bessel_k1(double x);
// The Airy function Ai and the spherical Bessel function j0 (sin x / x).
double airy_ai(double x);
double spherical_bessel_j0(double x);

// exp(x^2) erfc(x), the standard normal CDF, its logarithm, its inverse, and
// the inverse error function.
double erfcx(double x);
double ndtr(double x);
double log_ndtr(double x);
double ndtri(double p);
double erfinv(double y);
// -x log x (0 at 0, -inf below).
double entr(double x);

// The digamma function, polygamma of order n, and Hurwitz's zeta(s, q).
double digamma(double x);
double polygamma(int64_t n, double x);
double hurwitz_zeta(double s, double q);
// The regularized lower (igamma) and upper (igammac) incomplete gamma functions.
double igamma(double a, double x);
double igammac(double a, double x);
// The multivariate log-gamma of dimension p.
double mvlgamma(double x, int64_t p);

// Orthogonal polynomials of degree n (n < 0 gives 0) at x: Chebyshev of the
// four kinds and their shifted forms on [0, 1], Hermite (physicists' H and
// probabilists' He), Laguerre and Legendre.
// In the order of special_functions::PolynomialKind (kernels/special_functions.cuh).
enum class Polynomial { kChebyshevT, kChebyshevU, kChebyshevV, kChebyshevW, kHermiteH, kHermiteHe, kLaguerre, kLegendre };
double polynomial(Polynomial kind, double x, int64_t n);
double shifted_chebyshev(Polynomial kind, double x, int64_t n);

}  // namespace kiln::cpu::special
