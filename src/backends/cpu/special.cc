// Kernels of torch.special and the special functions of aten (Bessel and
// Airy functions, the normal distribution's functions, gamma-family
// functions, orthogonal polynomials): elementwise, computed in double
// (special_math.cc) and rounded to the result dtype; integer and bool
// inputs promote to float32 as PyTorch has it.
#include <cmath>
#include <string>

#include "backends/cpu/elementwise_operands.h"
#include "backends/cpu/kernel.h"
#include "backends/cpu/special_math.h"

namespace kiln::cpu {

namespace {

using special::Polynomial;

template <double (*F)(double)>
Status special_unary(KernelArgs& a) {
  // Arguments are named `self`, except in the few schemas that name it `x`.
  const std::string_view arg = a.has("self") ? "self" : "x";
  return floating_unary(
      a, ir::op_target(a.node().op), true, [](auto v) { return static_cast<decltype(v)>(F(static_cast<double>(v))); }, arg);
}

template <double (*F)(double, double)>
Status special_binary(KernelArgs& a) {
  return floating_binary(a, ir::op_target(a.node().op), false, [](auto x, auto y) {
    return static_cast<decltype(x)>(F(static_cast<double>(x), static_cast<double>(y)));
  });
}

// x * log1p(y), 0 where x is 0 and y is not NaN.
double xlog1py(double x, double y) {
  if (std::isnan(y)) return y;
  if (x == 0) return 0;
  return x * std::log1p(y);
}

// polynomial(x, n): n is truncated to an integer degree, as ATen casts it.
template <Polynomial K, bool kShifted>
Status polynomial_kernel(KernelArgs& a) {
  return floating_binary(
      a, ir::op_target(a.node().op), false,
      [](auto x, auto n) {
        using C = decltype(x);
        if (std::isnan(static_cast<double>(n))) return static_cast<C>(NAN);
        const auto degree = static_cast<int64_t>(n);
        const double v = kShifted ? special::shifted_chebyshev(K, static_cast<double>(x), degree)
                                  : special::polynomial(K, static_cast<double>(x), degree);
        return static_cast<C>(v);
      },
      "x", "n");
}

Status polygamma_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(int64_t n, a.int_arg("n"));
  if (n < 0) return a.error("polygamma takes an order n >= 0, got " + std::to_string(n));
  return floating_unary(a, "polygamma", true, [n](auto v) {
    return static_cast<decltype(v)>(special::polygamma(n, static_cast<double>(v)));
  });
}

// mvlgamma(self, p): every element must exceed (p - 1) / 2, as PyTorch checks.
Status mvlgamma_kernel(KernelArgs& a) {
  KILN_ASSIGN_OR_RETURN(int64_t p, a.int_arg("p"));
  if (p < 1) return a.error("mvlgamma takes a dimension p >= 1, got " + std::to_string(p));
  KILN_ASSIGN_OR_RETURN(Tensor self, a.tensor("self"));
  if (!is_floating(self.dtype())) return a.error("mvlgamma takes a floating tensor, got " + self.type_string());
  const double bound = static_cast<double>(p - 1) / 2;
  bool in_domain = true;
  visit_floating(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Tensor c = self.contiguous();
    const T* d = c.data<T>();
    for (int64_t i = 0; i < c.numel(); ++i) in_domain = in_domain && static_cast<double>(load(d[i])) > bound;
  });
  if (!in_domain) return a.error("mvlgamma: every element must be greater than (p-1)/2 = " + std::to_string(bound));
  return floating_unary(a, "mvlgamma", false, [p](auto v) {
    return static_cast<decltype(v)>(special::mvlgamma(static_cast<double>(v), p));
  });
}

}  // namespace

void register_special_kernels(KernelRegistry& r) {
  using ir::OpKind;
  r.add(OpKind::kSpecialBesselJ0, &special_unary<special::bessel_j0>);
  r.add(OpKind::kSpecialBesselJ1, &special_unary<special::bessel_j1>);
  r.add(OpKind::kSpecialBesselY0, &special_unary<special::bessel_y0>);
  r.add(OpKind::kSpecialBesselY1, &special_unary<special::bessel_y1>);
  r.add(OpKind::kSpecialModifiedBesselI0, &special_unary<special::modified_bessel_i0>);
  r.add(OpKind::kI0, &special_unary<special::modified_bessel_i0>);
  r.add(OpKind::kSpecialModifiedBesselI1, &special_unary<special::modified_bessel_i1>);
  r.add(OpKind::kSpecialI1, &special_unary<special::modified_bessel_i1>);
  r.add(OpKind::kSpecialModifiedBesselK0, &special_unary<special::modified_bessel_k0>);
  r.add(OpKind::kSpecialModifiedBesselK1, &special_unary<special::modified_bessel_k1>);
  r.add(OpKind::kSpecialScaledModifiedBesselK0, &special_unary<special::scaled_modified_bessel_k0>);
  r.add(OpKind::kSpecialScaledModifiedBesselK1, &special_unary<special::scaled_modified_bessel_k1>);
  r.add(OpKind::kSpecialI0e, &special_unary<special::i0e>);
  r.add(OpKind::kSpecialI1e, &special_unary<special::i1e>);
  r.add(OpKind::kSpecialAiryAi, &special_unary<special::airy_ai>);
  r.add(OpKind::kSpecialSphericalBesselJ0, &special_unary<special::spherical_bessel_j0>);
  r.add(OpKind::kSpecialErfcx, &special_unary<special::erfcx>);
  r.add(OpKind::kSpecialNdtr, &special_unary<special::ndtr>);
  r.add(OpKind::kSpecialLogNdtr, &special_unary<special::log_ndtr>);
  r.add(OpKind::kSpecialNdtri, &special_unary<special::ndtri>);
  r.add(OpKind::kErfinv, &special_unary<special::erfinv>);
  r.add(OpKind::kSpecialEntr, &special_unary<special::entr>);
  r.add(OpKind::kDigamma, &special_unary<special::digamma>);
  r.add(OpKind::kPolygamma, &polygamma_kernel);
  r.add(OpKind::kSpecialPolygamma, &polygamma_kernel);
  r.add(OpKind::kMvlgamma, &mvlgamma_kernel);
  r.add(OpKind::kSpecialZeta, &special_binary<special::hurwitz_zeta>);
  r.add(OpKind::kSpecialXlog1py, &special_binary<xlog1py>);
  r.add(OpKind::kIgamma, &special_binary<special::igamma>);
  r.add(OpKind::kIgammac, &special_binary<special::igammac>);
  r.add(OpKind::kSpecialChebyshevPolynomialT, &polynomial_kernel<Polynomial::kChebyshevT, false>);
  r.add(OpKind::kSpecialChebyshevPolynomialU, &polynomial_kernel<Polynomial::kChebyshevU, false>);
  r.add(OpKind::kSpecialChebyshevPolynomialV, &polynomial_kernel<Polynomial::kChebyshevV, false>);
  r.add(OpKind::kSpecialChebyshevPolynomialW, &polynomial_kernel<Polynomial::kChebyshevW, false>);
  r.add(OpKind::kSpecialShiftedChebyshevPolynomialT, &polynomial_kernel<Polynomial::kChebyshevT, true>);
  r.add(OpKind::kSpecialShiftedChebyshevPolynomialU, &polynomial_kernel<Polynomial::kChebyshevU, true>);
  r.add(OpKind::kSpecialShiftedChebyshevPolynomialV, &polynomial_kernel<Polynomial::kChebyshevV, true>);
  r.add(OpKind::kSpecialShiftedChebyshevPolynomialW, &polynomial_kernel<Polynomial::kChebyshevW, true>);
  r.add(OpKind::kSpecialHermitePolynomialH, &polynomial_kernel<Polynomial::kHermiteH, false>);
  r.add(OpKind::kSpecialHermitePolynomialHe, &polynomial_kernel<Polynomial::kHermiteHe, false>);
  r.add(OpKind::kSpecialLaguerrePolynomialL, &polynomial_kernel<Polynomial::kLaguerre, false>);
  r.add(OpKind::kSpecialLegendrePolynomialP, &polynomial_kernel<Polynomial::kLegendre, false>);
}

}  // namespace kiln::cpu
