// Complex values split into real and imaginary parts: after the pass no value
// is complex, and running the graph gives each transform's defining sum,
// computed here in double; complex values at a program's edges and ops the
// pass does not split are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <numbers>

#include "decompose_helpers.h"

namespace kiln::lowering {
namespace {

using cd = std::complex<double>;

// The module of `text` with every value whose name starts with "c_" made
// complex64 (the graph text, like kiln's files, has no complex types), after
// split-complex.
Expected<ir::Module> split(const std::string& text) {
  auto g = ir::parse_graph(text);
  if (!g) return g.status();
  ir::Module m;
  m.graph = std::move(*g);
  for (size_t i = 0; i < m.graph.num_values(); ++i) {
    ir::Value* v = m.graph.value(i);
    if (v->name.starts_with("c_")) v->type.dtype = DType::Complex64;
  }
  for (size_t i = 0; i < m.graph.inputs().size(); ++i)
    m.input_specs.push_back({ir::InputSpec::Kind::kUserInput, "", true});
  for (size_t i = 0; i < m.graph.outputs().size(); ++i)
    m.output_specs.push_back({ir::OutputSpec::Kind::kUserOutput, ""});
  KILN_TRY(split_complex(m));
  return m;
}

Tensor row_major(const Shape& sizes, const std::vector<double>& v) {
  Tensor t = Tensor::zeros(DType::Float64, sizes);
  for (size_t i = 0; i < v.size(); ++i) t.data<double>()[i] = v[i];
  return t.to(DType::Float32);
}

// sum_t x[t] e^{sign 2 pi i k t / n} over the first min(size, n) entries.
cd dft_at(const std::vector<cd>& x, int64_t n, int64_t k, double sign) {
  cd s = 0;
  for (int64_t t = 0; t < std::min<int64_t>(static_cast<int64_t>(x.size()), n); ++t)
    s += x[static_cast<size_t>(t)] * std::polar(1.0, sign * 2 * std::numbers::pi * static_cast<double>(k * t) / n);
  return s;
}

TEST(SplitComplex, TransformsGiveTheirDefiningSums) {
  auto m = split(R"(graph(%x: float32[2, 8]) {
  %c_f: float32[2, 8] = aten.fft_fft.default(self=%x)
  %re: float32[2, 8] = aten.real.default(self=%c_f)
  %c_r: float32[2, 3] = aten.fft_rfft.default(self=%x, n=4, norm="forward")
  %im: float32[2, 3] = aten.imag.default(self=%c_r)
  %ir: float32[2, 10] = aten.fft_irfft.default(self=%x, n=10, dim=-1, norm="ortho")
  %h: float32[2, 6] = aten.fft_hfft.default(self=%c_r, n=6)
  return (%re, %im, %ir, %h)
}
)");
  ASSERT_TRUE(m.has_value()) << m.status().message();
  for (const auto& n : m->graph.nodes())
    for (const ir::Value* v : n->outputs) EXPECT_FALSE(is_complex(v->type.dtype)) << n->describe();
  std::vector<double> xs(16);
  for (int i = 0; i < 16; ++i) xs[static_cast<size_t>(i)] = std::sin(1.3 * i) + 0.1 * i;
  auto out = run(*m, {row_major({2, 8}, xs)});
  ASSERT_EQ(out.size(), 4u);
  for (int r = 0; r < 2; ++r) {
    std::vector<cd> x(xs.begin() + 8 * r, xs.begin() + 8 * r + 8);
    for (int k = 0; k < 8; ++k) EXPECT_NEAR(out[0].value_at(r * 8 + k), dft_at(x, 8, k, -1).real(), 1e-4);
    std::vector<cd> spec;  // rfft(n=4, forward): the first 4 entries, scaled by 1/4
    for (int k = 0; k < 3; ++k) spec.push_back(dft_at(x, 4, k, -1) / 4.0);
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(out[1].value_at(r * 3 + k), spec[static_cast<size_t>(k)].imag(), 1e-5);
    // irfft(n=10): the Hermitian extension of the first 6 entries (imaginary parts zero), 1/sqrt(10)
    std::vector<cd> full(10);
    for (int k = 0; k < 10; ++k)
      full[static_cast<size_t>(k)] = k <= 5 ? x[static_cast<size_t>(k)] : x[static_cast<size_t>(10 - k)];
    for (int t = 0; t < 10; ++t)
      EXPECT_NEAR(out[2].value_at(r * 10 + t), dft_at(full, 10, t, 1).real() / std::sqrt(10.0), 1e-4);
    // hfft(n=6) of the rfft: the Hermitian extension of conj(spec[0..3]), unscaled
    std::vector<cd> hx(6);
    for (int k = 0; k < 6; ++k)
      hx[static_cast<size_t>(k)] =
          k <= 3 ? std::conj(spec[static_cast<size_t>(std::min(k, 2))]) : spec[static_cast<size_t>(6 - k)];
    hx[3] = 0;  // spec has 3 entries: the 4th is zero padding
    for (int t = 0; t < 6; ++t) EXPECT_NEAR(out[3].value_at(r * 6 + t), dft_at(hx, 6, t, 1).real(), 1e-4);
  }
}

TEST(SplitComplex, ProductsOfComplexValuesAndTheirRealResults) {
  // view_as_complex(q) * polar(1, angle) -> view_as_real, abs and angle
  auto m = split(R"(graph(%q: float32[3, 2], %a: float32[3]) {
  %c_q: float32[3] = aten.view_as_complex.default(self=%q)
  %one: float32[3] = aten.ones_like.default(self=%a)
  %c_w: float32[3] = aten.polar.default(abs=%one, angle=%a)
  %c_p: float32[3] = aten.mul.Tensor(self=%c_q, other=%c_w)
  %r: float32[3, 2] = aten.view_as_real.default(self=%c_p)
  %c_s: float32[3] = aten.sub.Tensor(self=%c_p, other=%a)
  %m: float32[3] = aten.abs.default(self=%c_s)
  %ph: float32[3] = aten.angle.default(self=%c_s)
  return (%r, %m, %ph)
}
)");
  ASSERT_TRUE(m.has_value()) << m.status().message();
  const std::vector<double> qs{1, 2, -0.5, 0.25, 3, -1}, as{0.3, -1.2, 2.5};
  Tensor a = Tensor::zeros(DType::Float64, {3});
  for (int i = 0; i < 3; ++i) a.data<double>()[i] = as[static_cast<size_t>(i)];
  auto out = run(*m, {row_major({3, 2}, qs), a.to(DType::Float32)});
  ASSERT_EQ(out.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const cd p = cd(qs[2 * i], qs[2 * i + 1]) * std::polar(1.0, as[static_cast<size_t>(i)]);
    EXPECT_NEAR(out[0].value_at(2 * i), p.real(), 1e-5);
    EXPECT_NEAR(out[0].value_at(2 * i + 1), p.imag(), 1e-5);
    const cd s = p - as[static_cast<size_t>(i)];
    EXPECT_NEAR(out[1].value_at(i), std::abs(s), 1e-5);
    EXPECT_NEAR(out[2].value_at(i), std::arg(s), 1e-5);
  }
}

TEST(SplitComplex, ComplexValuesAtTheEdgesOrInOpsItDoesNotSplitAreRefusedByName) {
  auto out = split(R"(graph(%x: float32[4]) {
  %c_f: float32[4] = aten.fft_fft.default(self=%x)
  return (%c_f)
}
)");
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.status().message().find("output 0 ('c_f') is complex64"), std::string::npos) << out.status().message();
  EXPECT_NE(out.status().message().find("view_as_real"), std::string::npos);

  auto in = split(R"(graph(%c_x: float32[4]) {
  %r: float32[4] = aten.real.default(self=%c_x)
  return (%r)
}
)");
  ASSERT_FALSE(in.has_value());
  EXPECT_NE(in.status().message().find("input 'c_x' is complex64"), std::string::npos) << in.status().message();

  auto op = split(R"(graph(%x: float32[4]) {
  %c_f: float32[4] = aten.fft_fft.default(self=%x)
  %c_e: float32[4] = aten.exp.default(self=%c_f)
  %r: float32[4] = aten.real.default(self=%c_e)
  return (%r)
}
)");
  ASSERT_FALSE(op.has_value());
  EXPECT_NE(op.status().message().find("node 'c_e' (aten.exp.default)"), std::string::npos) << op.status().message();

  auto big = split(R"(graph(%x: float32[20000]) {
  %c_f: float32[20000] = aten.fft_fft.default(self=%x)
  %r: float32[20000] = aten.real.default(self=%c_f)
  return (%r)
}
)");
  ASSERT_FALSE(big.has_value());
  EXPECT_NE(big.status().message().find("20000 points"), std::string::npos) << big.status().message();
}

}  // namespace
}  // namespace kiln::lowering
