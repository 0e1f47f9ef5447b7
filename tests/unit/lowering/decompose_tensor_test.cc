// Tensor products, scatters into positions known at compile time and scalar
// overloads written in core ops: the graph after the pass holds only core
// ops, and running it gives each op's definition, computed here in double.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "decompose_helpers.h"

namespace kiln::lowering {
namespace {

Tensor float_tensor(const Shape& sizes, const std::vector<double>& v) {
  Tensor t = Tensor::zeros(DType::Float64, sizes);
  for (size_t i = 0; i < v.size(); ++i) t.data<double>()[i] = v[i];
  return t.to(DType::Float32);
}

Tensor int_tensor(const Shape& sizes, const std::vector<int64_t>& v) {
  Tensor t = Tensor::zeros(DType::Int64, sizes);
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

Tensor bool_tensor(const Shape& sizes, const std::vector<bool>& v) {
  Tensor t = Tensor::zeros(DType::Bool, sizes);
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i];
  return t;
}

// 0.1 * (i + 1) * (-1)^i: distinct values of both signs.
std::vector<double> ramp(int64_t n, double scale = 0.1) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(scale * static_cast<double>(i + 1) * (i % 2 ? -1 : 1));
  return v;
}

double f32(double x) { return static_cast<float>(x); }

TEST(DecomposeTensor, ScalarOverloadsTakeTheirNumbersAsTensors) {
  std::map<std::string, int> ops;
  ir::Module g = decomposed(R"(graph(%c: bool[2, 3], %x: float32[2, 3], %i: int64[2, 3], %v: float32[], %e: float32[3], %i2: int64[2, 3], %x2: float32[2, 3]) {
  %wo: float32[2, 3] = aten.where.ScalarOther(condition=%c, self=%x, other=-3.5)
  %ws: float32[2, 3] = aten.where.ScalarSelf(condition=%c, self=2, other=%x)
  %wb: float32[2, 3] = aten.where.Scalar(condition=%c, self=1.5, other=-1)
  %mn: int64[2, 3] = aten.min.other(self=%i, other=%i2)
  %mx: float32[2, 3] = aten.max.other(self=%x, other=%x2)
  %f: float32[2, 3] = aten.fill.Tensor(self=%x, value=%v)
  %p: float32[3] = aten.pow.Scalar(self=2.0, exponent=%e)
  return (%wo, %ws, %wb, %mn, %mx, %f, %p)
}
)",
                            &ops);
  expect_only_core_ops(ops, {"aten.maximum.default"});  // of floats: a core op
  const std::vector<bool> cs{true, false, false, true, true, false};
  const std::vector<double> xs = ramp(6), x2s{0.5, 0.5, 0.5, -0.5, -0.5, -0.5}, es{-1.0, 0.5, 3.0};
  const std::vector<int64_t> is{4, -2, 7, 0, 9, -5}, i2s{3, 3, 3, 3, 3, 3};
  auto out = run(g, {bool_tensor({2, 3}, cs), float_tensor({2, 3}, xs), int_tensor({2, 3}, is), float_tensor({}, {0.75}),
                     float_tensor({3}, es), int_tensor({2, 3}, i2s), float_tensor({2, 3}, x2s)});
  ASSERT_EQ(out.size(), 7u);
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(out[0].value_at(k), cs[k] ? f32(xs[k]) : -3.5);
    EXPECT_EQ(out[1].value_at(k), cs[k] ? 2.0 : f32(xs[k]));
    EXPECT_EQ(out[2].value_at(k), cs[k] ? 1.5 : -1.0);
    EXPECT_EQ(out[3].value_at(k), static_cast<double>(std::min(is[k], i2s[k])));
    EXPECT_EQ(out[4].value_at(k), std::max(f32(xs[k]), f32(x2s[k])));
    EXPECT_EQ(out[5].value_at(k), 0.75);
  }
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(out[6].value_at(k), std::pow(2.0, es[k]), 1e-6);
}

// masked_fill and full_like as where with a 0-d constant (an int64 value kept
// exact), bitwise_not, and integer minimum, maximum and abs as comparisons and
// where.
TEST(DecomposeTensor, MaskedFillFullLikeAndIntegerOpsAreWhere) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(
      R"(graph(%x: float32[2, 3], %m: bool[3], %i: int64[2, 3], %v: float32[], %j: int32[2, 3], %k: int32[3], %b: bool[2, 3]) {
  %mf: float32[2, 3] = aten.masked_fill.Scalar(self=%x, mask=%m, value=-inf)
  %mfi: int64[2, 3] = aten.masked_fill.Scalar(self=%i, mask=%m, value=-9223372036854775807)
  %mft: float32[2, 3] = aten.masked_fill.Tensor(self=%x, mask=%m, value=%v)
  %fl: float32[2, 3] = aten.full_like.default(self=%x, fill_value=2.5)
  %fli: int32[2, 3] = aten.full_like.default(self=%x, fill_value=-2.7, dtype=dtype.int32)
  %flb: bool[2, 3] = aten.full_like.default(self=%i, fill_value=true, dtype=dtype.bool)
  %nb: bool[2, 3] = aten.bitwise_not.default(self=%b)
  %ni: int64[2, 3] = aten.bitwise_not.default(self=%i)
  %mn: int32[2, 3] = aten.minimum.default(self=%j, other=%k)
  %mx: int64[2, 3] = aten.maximum.default(self=%i, other=%i)
  %ab: int64[2, 3] = aten.abs.default(self=%i)
  %abf: float32[2, 3] = aten.abs.default(self=%x)
  return (%mf, %mfi, %mft, %fl, %fli, %flb, %nb, %ni, %mn, %mx, %ab, %abf)
}
)",
      &ops);
  expect_only_core_ops(ops, {"aten.abs.default"});  // of floats: a core op
  EXPECT_EQ(ops["aten.abs.default"], 1);
  EXPECT_EQ(ops["aten.where.self"], 10);  // bitwise_not of an int64 tensor is a subtraction
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> xs{1.5, nan, -inf, 0.25, -3, 7};
  const std::vector<bool> ms{true, false, true}, bs{true, false, false, true, true, false};
  const int64_t lowest = std::numeric_limits<int64_t>::min();
  const std::vector<int64_t> is{lowest, -5, 0, 9, std::numeric_limits<int64_t>::max(), -1};
  const std::vector<int64_t> js{-4, 2, 8, 3, -7, 0}, ks{1, 1, -1};
  Tensor j = Tensor::zeros(DType::Int32, {2, 3}), k = Tensor::zeros(DType::Int32, {3});
  for (int e = 0; e < 6; ++e) j.data<int32_t>()[e] = static_cast<int32_t>(js[e]);
  for (int e = 0; e < 3; ++e) k.data<int32_t>()[e] = static_cast<int32_t>(ks[e]);
  auto out = run(m, {float_tensor({2, 3}, xs), bool_tensor({3}, ms), int_tensor({2, 3}, is), float_tensor({}, {-0.5}),
                     j, k, bool_tensor({2, 3}, bs)});
  ASSERT_EQ(out.size(), 12u);
  const std::vector<DType> dts{DType::Float32, DType::Int64, DType::Float32, DType::Float32,
                               DType::Int32,   DType::Bool,  DType::Bool,    DType::Int64,
                               DType::Int32,   DType::Int64, DType::Int64,   DType::Float32};
  for (size_t o = 0; o < dts.size(); ++o) EXPECT_EQ(out[o].dtype(), dts[o]) << o;
  auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
  for (int e = 0; e < 6; ++e) {
    const bool m_e = ms[e % 3];
    EXPECT_TRUE(same(out[0].value_at(e), m_e ? -inf : f32(xs[e]))) << e;
    EXPECT_EQ(out[1].data<int64_t>()[e], m_e ? -9223372036854775807 : is[e]) << e;
    EXPECT_TRUE(same(out[2].value_at(e), m_e ? -0.5 : f32(xs[e]))) << e;
    EXPECT_EQ(out[3].value_at(e), 2.5);
    EXPECT_EQ(out[4].value_at(e), -2.0);  // truncated toward zero, as torch converts
    EXPECT_EQ(out[5].value_at(e), 1.0);
    EXPECT_EQ(out[6].value_at(e), bs[e] ? 0.0 : 1.0);
    EXPECT_EQ(out[7].data<int64_t>()[e], ~is[e]);
    EXPECT_EQ(out[8].value_at(e), static_cast<double>(std::min(js[e], ks[e % 3])));
    EXPECT_EQ(out[9].data<int64_t>()[e], is[e]);
    // abs of the lowest int64 is itself in two's complement, as in ATen.
    EXPECT_EQ(out[10].data<int64_t>()[e], is[e] == lowest ? lowest : (is[e] < 0 ? -is[e] : is[e])) << e;
    EXPECT_TRUE(same(out[11].value_at(e), std::fabs(f32(xs[e])))) << e;
  }
}

TEST(DecomposeTensor, ProductsFollowTheirDefinitions) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%a: float32[2, 3, 4], %b: float32[4, 3, 5], %k1: float32[2, 3], %k2: float32[2, 2], %x1: float32[2, 3], %x2: float32[2, 4], %w: float32[5, 3, 4], %bias: float32[5], %v: float32[4, 2, 3], %g: float32[4, 1, 1]) {
  %td: float32[2, 5] = aten.tensordot.default(self=%a, other=%b, dims_self=[1, 2], dims_other=[1, 0])
  %kr: float32[4, 6] = aten.kron.default(self=%k1, other=%k2)
  %bl: float32[2, 5] = aten.bilinear.default(input1=%x1, input2=%x2, weight=%w, bias=%bias)
  %wn: float32[4, 2, 3] = aten._weight_norm.default(v=%v, g=%g, dim=0)
  return (%td, %kr, %bl, %wn)
}
)",
                            &ops);
  expect_only_core_ops(ops);
  const auto as = ramp(24), bs = ramp(60, 0.05), k1 = ramp(6), k2 = ramp(4), x1 = ramp(6), x2 = ramp(8, 0.2),
             ws = ramp(60, 0.03), biases = ramp(5), vs = ramp(24);
  const std::vector<double> gs{2.0, -1.0, 0.5, 3.0};
  auto out = run(m, {float_tensor({2, 3, 4}, as), float_tensor({4, 3, 5}, bs), float_tensor({2, 3}, k1),
                     float_tensor({2, 2}, k2), float_tensor({2, 3}, x1), float_tensor({2, 4}, x2),
                     float_tensor({5, 3, 4}, ws), float_tensor({5}, biases), float_tensor({4, 2, 3}, vs),
                     float_tensor({4, 1, 1}, gs)});
  ASSERT_EQ(out.size(), 4u);
  for (int i = 0; i < 2; ++i)
    for (int o = 0; o < 5; ++o) {
      double s = 0;  // sum over a's dims 1, 2 against b's dims 1, 0
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k) s += f32(as[i * 12 + j * 4 + k]) * f32(bs[k * 15 + j * 5 + o]);
      EXPECT_NEAR(out[0].value_at(i * 5 + o), s, 1e-5);
    }
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 6; ++c)
      EXPECT_NEAR(out[1].value_at(r * 6 + c), f32(k1[(r / 2) * 3 + c / 2]) * f32(k2[(r % 2) * 2 + c % 2]), 1e-7);
  for (int n = 0; n < 2; ++n)
    for (int o = 0; o < 5; ++o) {
      double s = f32(biases[o]);
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 4; ++j) s += f32(x1[n * 3 + i]) * f32(ws[o * 12 + i * 4 + j]) * f32(x2[n * 4 + j]);
      EXPECT_NEAR(out[2].value_at(n * 5 + o), s, 1e-5);
    }
  for (int r = 0; r < 4; ++r) {
    double sq = 0;
    for (int k = 0; k < 6; ++k) sq += f32(vs[r * 6 + k]) * f32(vs[r * 6 + k]);
    for (int k = 0; k < 6; ++k) EXPECT_NEAR(out[3].value_at(r * 6 + k), f32(vs[r * 6 + k]) * gs[r] / std::sqrt(sq), 1e-6);
  }
}

// By hand: A = [[2, 1], [0, 4]], B = [4, 8]^T. Upper: x2 = 2, x1 = (4 - 2) / 2 = 1.
// Transposed (A^T lower): x1 = 2, x2 = (8 - 2) / 4 = 1.5. The second result is A.
TEST(DecomposeTensor, TriangularSolveIsSolveTriangularOfAOrItsTranspose) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%b: float32[2, 1], %a: float32[2, 2]) {
  %s: float32[2, 1], %c: float32[2, 2] = aten.triangular_solve.default(self=%b, A=%a)
  %st: float32[2, 1], %ct: float32[2, 2] = aten.triangular_solve.default(self=%b, A=%a, upper=true, transpose=true)
  return (%s, %c, %st, %ct)
}
)",
                            &ops);
  expect_only_core_ops(ops);
  auto out = run(m, {float_tensor({2, 1}, {4, 8}), float_tensor({2, 2}, {2, 1, 0, 4})});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].value_at(0), 1);
  EXPECT_EQ(out[0].value_at(1), 2);
  EXPECT_EQ(out[2].value_at(0), 2);
  EXPECT_EQ(out[2].value_at(1), 1.5);
  for (int i : {1, 3})
    for (int k = 0; k < 4; ++k)
      EXPECT_EQ(out[static_cast<size_t>(i)].value_at(k), (std::vector<double>{2, 1, 0, 4})[static_cast<size_t>(k)]);
}

TEST(DecomposeTensor, FixedPositionsAreIndexTables) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%a: float32[2, 2], %b: float32[3], %c: float32[], %v: float32[4], %x: float32[2, 3, 4], %src: float32[3, 1], %p: float32[4, 3]) {
  %bd: float32[4, 6] = aten.block_diag.default(tensors=[%a, %b, %c])
  %cb: float32[6, 2] = aten.combinations.default(self=%v)
  %cr: float32[10, 2] = aten.combinations.default(self=%v, r=2, with_replacement=true)
  %ds: float32[2, 3, 4] = aten.diagonal_scatter.default(self=%x, src=%src, offset=1, dim1=2, dim2=0)
  %pd: float32[6] = aten.pdist.default(input=%p, p=2.0)
  %pd1: float32[6] = aten._pdist_forward.default(self=%p, p=1.0)
  return (%bd, %cb, %cr, %ds, %pd, %pd1)
}
)",
                            &ops);
  expect_only_core_ops(ops, {"aten.abs.default"});  // of floats: a core op
  const auto as = ramp(4), bs = ramp(3, 1.0), vs = ramp(4), xs = ramp(24), srcs = ramp(3, 10.0), ps = ramp(12);
  auto out = run(m, {float_tensor({2, 2}, as), float_tensor({3}, bs), float_tensor({}, {7.0}), float_tensor({4}, vs),
                     float_tensor({2, 3, 4}, xs), float_tensor({3, 1}, srcs), float_tensor({4, 3}, ps)});
  ASSERT_EQ(out.size(), 6u);
  // block_diag: a at rows 0-1 cols 0-1, b as a row at row 2 cols 2-4, c at row 3 col 5.
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 6; ++c) {
      double want = 0;
      if (r < 2 && c < 2) want = f32(as[r * 2 + c]);
      if (r == 2 && c >= 2 && c < 5) want = bs[c - 2];
      if (r == 3 && c == 5) want = 7.0;
      EXPECT_EQ(out[0].value_at(r * 6 + c), want) << r << "," << c;
    }
  int row = 0, row_r = 0;
  for (int i = 0; i < 4; ++i)
    for (int j = i; j < 4; ++j) {
      if (j > i) {
        EXPECT_EQ(out[1].value_at(row * 2), f32(vs[i]));
        EXPECT_EQ(out[1].value_at(row * 2 + 1), f32(vs[j]));
        ++row;
      }
      EXPECT_EQ(out[2].value_at(row_r * 2), f32(vs[i]));
      EXPECT_EQ(out[2].value_at(row_r * 2 + 1), f32(vs[j]));
      ++row_r;
    }
  // diagonal(x, offset 1, dim1 2, dim2 0) is [3, 1]: dim 1, then k with x index k along
  // dim 2 and k + 1 along dim 0, for k < min(4, 2 - 1).
  for (int i = 0; i < 24; ++i) {
    const int d0 = i / 12, d1 = (i / 4) % 3, d2 = i % 4;
    const bool on = d0 == d2 + 1;
    if (!on) EXPECT_EQ(out[3].value_at(i), f32(xs[i])) << i;
    if (on) EXPECT_EQ(out[3].value_at(i), f32(srcs[static_cast<size_t>(d1)])) << i;
  }
  int pair = 0;
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j, ++pair) {
      double l2 = 0, l1 = 0;
      for (int k = 0; k < 3; ++k) {
        const double d = f32(ps[i * 3 + k]) - f32(ps[j * 3 + k]);
        l2 += d * d;
        l1 += std::fabs(d);
      }
      EXPECT_NEAR(out[4].value_at(pair), std::sqrt(l2), 1e-6);
      EXPECT_NEAR(out[5].value_at(pair), l1, 1e-6);
    }
}

TEST(DecomposeTensor, ScattersAtDataDependentPositions) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[2, 3], %idx: int64[3], %src: float32[3], %mask: bool[3], %ms: float32[5]) {
  %p: float32[2, 3] = aten.put.default(self=%x, index=%idx, source=%src)
  %pa: float32[2, 3] = aten.put.default(self=%x, index=%idx, source=%src, accumulate=true)
  %m: float32[2, 3] = aten.masked_scatter.default(self=%x, mask=%mask, source=%ms)
  return (%p, %pa, %m)
}
)",
                            &ops);
  expect_only_core_ops(ops);
  const auto xs = ramp(6), srcs = ramp(3, 10.0), mss = ramp(5, 100.0);
  const std::vector<int64_t> idx{4, -1, 0};  // -1 is flat position 5
  const std::vector<bool> mask{true, false, true};
  auto out = run(m, {float_tensor({2, 3}, xs), int_tensor({3}, idx), float_tensor({3}, srcs), bool_tensor({3}, mask),
                     float_tensor({5}, mss)});
  ASSERT_EQ(out.size(), 3u);
  std::vector<double> put(xs.begin(), xs.end()), acc(xs.begin(), xs.end());
  for (auto* v : {&put, &acc})
    for (double& e : *v) e = f32(e);
  for (int k = 0; k < 3; ++k) {
    const int64_t at = idx[k] < 0 ? idx[k] + 6 : idx[k];
    put[at] = srcs[k];
    acc[at] += srcs[k];
  }
  int next = 0;
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(out[0].value_at(k), put[k]);
    EXPECT_NEAR(out[1].value_at(k), acc[k], 1e-5);
    EXPECT_EQ(out[2].value_at(k), mask[k % 3] ? mss[next++] : f32(xs[k])) << k;
  }
}

TEST(DecomposeTensor, CumulativeTrapezoidMarginLossAndOneDimPools) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%y: float32[2, 4], %x: float32[4], %s: float32[3, 4], %t: int64[3], %w: float32[4], %q: float32[1, 2, 7]) {
  %cx: float32[2, 3] = aten.cumulative_trapezoid.x(y=%y, x=%x)
  %cd: float32[1, 4] = aten.cumulative_trapezoid.dx(y=%y, dx=0.5, dim=0)
  %mm: float32[3] = aten.multi_margin_loss.default(self=%s, target=%t, p=2, margin=0.7, weight=%w, reduction=0)
  %mean: float32[] = aten.multi_margin_loss.default(self=%s, target=%t)
  %v: float32[1, 2, 3], %i: int64[1, 2, 3] = aten.max_pool1d_with_indices.default(self=%q, kernel_size=[3], stride=[2])
  %av: float32[1, 2, 3], %ai: int64[1, 2, 3] = aten.adaptive_max_pool1d.default(self=%q, output_size=[3])
  return (%cx, %cd, %mm, %mean, %v, %i, %av, %ai)
}
)",
                            &ops);
  // max_pool2d_with_indices is decomposed only when nothing reads its indices;
  // these are read, and it is a kernel.
  EXPECT_EQ(ops.erase("aten.max_pool2d_with_indices.default"), 1u);
  expect_only_core_ops(ops);
  const auto ys = ramp(8), ss = ramp(12);
  const std::vector<double> xs{0.0, 0.5, 2.0, 2.25}, ws{1.0, 2.0, 0.5, 1.5};
  const std::vector<int64_t> ts{0, 3, 2};
  const std::vector<double> qs{0.3, -1.0, 2.0, 0.1, 0.1, 5.0, -2.0, 1.0, 0.0, -1.0, 4.0, 4.0, 3.0, 9.0};
  auto out = run(m, {float_tensor({2, 4}, ys), float_tensor({4}, xs), float_tensor({3, 4}, ss), int_tensor({3}, ts),
                     float_tensor({4}, ws), float_tensor({1, 2, 7}, qs)});
  ASSERT_EQ(out.size(), 8u);
  for (int r = 0; r < 2; ++r) {
    double c = 0;
    for (int k = 0; k < 3; ++k) {
      c += (f32(ys[r * 4 + k + 1]) + f32(ys[r * 4 + k])) * (xs[k + 1] - xs[k]) / 2;
      EXPECT_NEAR(out[0].value_at(r * 3 + k), c, 1e-6);
    }
  }
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(out[1].value_at(k), 0.25 * (f32(ys[k]) + f32(ys[4 + k])), 1e-6);
  double mean = 0;
  for (int r = 0; r < 3; ++r) {
    double s2 = 0, s1 = 0;
    for (int j = 0; j < 4; ++j) {
      if (j == ts[r]) continue;
      const double z2 = std::max(0.0, 0.7 - f32(ss[r * 4 + ts[r]]) + f32(ss[r * 4 + j]));
      const double z1 = std::max(0.0, 1.0 - f32(ss[r * 4 + ts[r]]) + f32(ss[r * 4 + j]));
      s2 += z2 * z2 * ws[ts[r]];
      s1 += z1;
    }
    EXPECT_NEAR(out[2].value_at(r), s2 / 4, 1e-6);
    mean += s1 / 4 / 3;
  }
  EXPECT_NEAR(out[3].item(), mean, 1e-6);
  for (int c = 0; c < 2; ++c)
    for (int o = 0; o < 3; ++o) {
      // kernel 3 stride 2 over 7: windows [0, 3), [2, 5), [4, 7); adaptive over 7 -> 3: [0, 3), [2, 5), [4, 7).
      for (int which : {0, 1}) {
        int best = 2 * o;
        for (int k = 2 * o; k < 2 * o + 3; ++k)
          if (qs[c * 7 + k] > qs[c * 7 + best]) best = k;
        EXPECT_EQ(out[4 + 2 * which].value_at(c * 3 + o), f32(qs[c * 7 + best]));
        EXPECT_EQ(out[5 + 2 * which].value_at(c * 3 + o), best);
      }
    }
}

// The edges OpInfo's samples reach: a contracted dim of size 1 against one
// of size 2 (torch broadcasts it), pdist of one row (no pairs), the margin
// loss of a single score.
TEST(DecomposeTensor, BroadcastContractionNoPairsAndASingleScore) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%a: float32[1, 3], %b: float32[2, 3], %r: float32[1, 4], %s: float32[], %t: int64[]) {
  %td: float32[3, 3] = aten.tensordot.default(self=%a, other=%b, dims_self=[0], dims_other=[0])
  %pd: float32[0] = aten.pdist.default(input=%r)
  %mm: float32[] = aten.multi_margin_loss.default(self=%s, target=%t)
  return (%td, %pd, %mm)
}
)",
                            &ops);
  expect_only_core_ops(ops);
  const auto as = ramp(3), bs = ramp(6, 0.3);
  auto out = run(m, {float_tensor({1, 3}, as), float_tensor({2, 3}, bs), float_tensor({1, 4}, ramp(4)),
                     float_tensor({}, {0.5}), int_tensor({}, {0})});
  ASSERT_EQ(out.size(), 3u);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      EXPECT_NEAR(out[0].value_at(i * 3 + j), f32(as[i]) * (f32(bs[j]) + f32(bs[3 + j])), 1e-6);
  EXPECT_EQ(out[1].numel(), 0);
  EXPECT_EQ(out[2].item(), 0.0);  // the only class is the target: nothing to sum
}

}  // namespace
}  // namespace kiln::lowering

namespace kiln::lowering {
namespace {

TEST(DecomposeTensor, MaskedIndexChunkCatAndSoftmaxBackwardFollowTheirDefinitions) {
  std::map<std::string, int> ops;
  ir::Module g = decomposed(R"(graph(%x: float32[3, 4], %m: bool[2, 2], %i: int64[2, 2], %j: int64[2, 2], %v: float32[2, 2], %a: float32[2, 5], %b: float32[2, 3], %go: float32[2, 3], %y: float32[2, 3]) {
  %mi: float32[2, 2] = aten._unsafe_masked_index.default(self=%x, mask=%m, indices=?[%i, %j], fill=-7.5)
  %mp: float32[3, 4] = aten._unsafe_masked_index_put_accumulate.default(self=%x, mask=%m, indices=?[%i, %j], values=%v)
  %cc: float32[2, 2, 5] = aten._chunk_cat.default(tensors=[%a, %b], dim=1, num_chunks=2)
  %sb: float32[2, 3] = aten._softmax_backward_data.default(grad_output=%go, output=%y, dim=1, input_dtype=dtype.float32)
  return (%mi, %mp, %cc, %sb)
}
)",
                            &ops);
  expect_only_core_ops(ops);
  const std::vector<double> xs = ramp(12), vs{10, 20, 30, 40}, as = ramp(10), bs = ramp(6, 1.0), gs = ramp(6),
                            ys{0.2, 0.3, 0.5, 0.6, 0.1, 0.3};
  // Masked-off entries hold indices out of range: they must not be read.
  const std::vector<bool> ms{true, false, true, true};
  const std::vector<int64_t> is{2, 99, 0, 2}, js{1, -99, 3, 1};
  auto out = run(g, {float_tensor({3, 4}, xs), bool_tensor({2, 2}, ms), int_tensor({2, 2}, is), int_tensor({2, 2}, js),
                     float_tensor({2, 2}, vs), float_tensor({2, 5}, as), float_tensor({2, 3}, bs),
                     float_tensor({2, 3}, gs), float_tensor({2, 3}, ys)});
  ASSERT_EQ(out.size(), 4u);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(out[0].value_at(k), ms[k] ? f32(xs[is[k] * 4 + js[k]]) : -7.5);
  std::vector<double> put(xs.begin(), xs.end());
  for (int k = 0; k < 4; ++k)
    if (ms[k]) put[is[k] * 4 + js[k]] += vs[k];  // (2, 1) twice: accumulated
  for (int k = 0; k < 12; ++k) EXPECT_NEAR(out[1].value_at(k), put[k], 1e-5);
  // a [2, 5] cut in 2 chunks of 3 (the last padded with a zero), b [2, 3] in chunks of 2 (one zero).
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 2; ++c) {
      std::vector<double> want;
      for (int t = 0; t < 3; ++t) want.push_back(c * 3 + t < 5 ? f32(as[r * 5 + c * 3 + t]) : 0.0);
      for (int t = 0; t < 2; ++t) want.push_back(c * 2 + t < 3 ? f32(bs[r * 3 + c * 2 + t]) : 0.0);
      for (int t = 0; t < 5; ++t) EXPECT_EQ(out[2].value_at((r * 2 + c) * 5 + t), want[t]) << r << c << t;
    }
  for (int r = 0; r < 2; ++r) {
    double dot = 0;
    for (int c = 0; c < 3; ++c) dot += f32(gs[r * 3 + c]) * f32(ys[r * 3 + c]);
    for (int c = 0; c < 3; ++c)
      EXPECT_NEAR(out[3].value_at(r * 3 + c), f32(ys[r * 3 + c]) * (f32(gs[r * 3 + c]) - dot), 1e-6);
  }
}

}  // namespace
}  // namespace kiln::lowering

namespace kiln::lowering {
namespace {

// bilinear's ATen form: out[b, o] = sum_ij x1[b, i] W[o, i, j] x2[b, j].
TEST(DecomposeTensor, TrilinearIsAProductSummedOverItsDims) {
  std::map<std::string, int> ops;
  ir::Module g = decomposed(R"(graph(%x1: float32[2, 3], %w: float32[4, 3, 2], %x2: float32[2, 2]) {
  %t: float32[2, 4] = aten._trilinear.default(i1=%x1, i2=%w, i3=%x2, expand1=[3, 1], expand2=[0], expand3=[1, 2], sumdim=[2, 3], unroll_dim=1)
  return (%t)
}
)",
                            &ops);
  expect_only_core_ops(ops);
  const std::vector<double> x1 = ramp(6), w = ramp(24, 0.05), x2 = ramp(4, 0.3);
  auto out = run(g, {float_tensor({2, 3}, x1), float_tensor({4, 3, 2}, w), float_tensor({2, 2}, x2)});
  ASSERT_EQ(out.size(), 1u);
  for (int b = 0; b < 2; ++b)
    for (int o = 0; o < 4; ++o) {
      double want = 0;
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 2; ++j) want += f32(x1[b * 3 + i]) * f32(w[(o * 3 + i) * 2 + j]) * f32(x2[b * 2 + j]);
      EXPECT_NEAR(out[0].value_at(b * 4 + o), want, 1e-5) << b << o;
    }
}

}  // namespace
}  // namespace kiln::lowering

namespace kiln::lowering {
namespace {

TEST(DecomposeTensor, ShuffleFillTriangleExtremaAndLinalgCompositesFollowTheirDefinitions) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(
      R"(graph(%x: float32[1, 8, 2, 3], %a: float32[3, 3], %s: float32[3, 4], %y: float32[4], %v: float32[3]) {
  %ps: float32[1, 2, 4, 6] = aten.pixel_shuffle.default(self=%x, upscale_factor=2)
  %ld: float32[2] = aten.linalg_diagonal.default(A=%s, offset=1, dim1=-1, dim2=-2)
  %fl: float32[3, 3] = aten.fill.Scalar(self=%a, value=2.5)
  %z: float32[3, 3] = aten.zero.default(self=%a)
  %ss: float32[3, 4] = aten.select_scatter.default(self=%s, src=%y, dim=0, index=-1)
  %lo: float32[3, 4] = aten.tril.default(self=%s, diagonal=1)
  %up: float32[3, 4] = aten.triu.default(self=%s, diagonal=-1)
  %mx: float32[] = aten.max.default(self=%s)
  %mn: float32[] = aten.min.default(self=%s)
  %xl: float32[3, 4] = aten.special_xlog1py.default(self=%s, other=%y)
  %md: float32[4] = aten.linalg_multi_dot.default(tensors=[%v, %a, %s])
  %p0: float32[3, 3] = aten.linalg_matrix_power.default(self=%a, n=0)
  %p3: float32[3, 3] = aten.linalg_matrix_power.default(self=%a, n=3)
  %vd: float32[3, 4] = aten.linalg_vander.default(x=%v, N=4)
  %fr: float32[] = aten.linalg_matrix_norm.str_ord(self=%s, ord="fro")
  return (%ps, %ld, %fl, %z, %ss, %lo, %up, %mx, %mn, %xl, %md, %p0, %p3, %vd, %fr)
}
)",
      &ops);
  expect_only_core_ops(ops, {"aten.matmul.default"});  // of matrices: a core op
  const auto xs = ramp(48), as = ramp(9, 0.3), ss = ramp(12), vs = ramp(3, 0.7);
  std::vector<double> ys = {0.5, -0.25, 0.0, 2.0};
  auto out = run(m, {float_tensor({1, 8, 2, 3}, xs), float_tensor({3, 3}, as), float_tensor({3, 4}, ss),
                     float_tensor({4}, ys), float_tensor({3}, vs)});
  ASSERT_EQ(out.size(), 15u);
  // pixel_shuffle: out[0, c, h r + i, w r + j] = x[0, c r r + i r + j, h, w].
  for (int c = 0; c < 2; ++c)
    for (int oh = 0; oh < 4; ++oh)
      for (int ow = 0; ow < 6; ++ow) {
        const int src = ((c * 4 + (oh % 2) * 2 + ow % 2) * 2 + oh / 2) * 3 + ow / 2;
        EXPECT_EQ(out[0].value_at((c * 4 + oh) * 6 + ow), f32(xs[static_cast<size_t>(src)]));
      }
  // linalg_diagonal(offset 1, dim1 -1, dim2 -2) of [3, 4]: column k (dim1) with row k + 1 (dim2).
  ASSERT_EQ(out[1].numel(), 2);
  EXPECT_EQ(out[1].value_at(0), f32(ss[1 * 4 + 0]));
  EXPECT_EQ(out[1].value_at(1), f32(ss[2 * 4 + 1]));
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(out[2].value_at(i), 2.5);
    EXPECT_EQ(out[3].value_at(i), 0.0);
  }
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) {
      const double sv = f32(ss[static_cast<size_t>(r * 4 + c)]);
      EXPECT_EQ(out[4].value_at(r * 4 + c), r == 2 ? ys[static_cast<size_t>(c)] : sv);
      EXPECT_EQ(out[5].value_at(r * 4 + c), c - r <= 1 ? sv : 0.0);
      EXPECT_EQ(out[6].value_at(r * 4 + c), c - r >= -1 ? sv : 0.0);
      const double want =
          ys[static_cast<size_t>(c)] == 0 || sv == 0 ? 0.0 : sv * std::log1p(ys[static_cast<size_t>(c)]);
      EXPECT_NEAR(out[9].value_at(r * 4 + c), want, 1e-6);
    }
  double hi = -1e30, lo = 1e30, sq = 0;
  for (double v : ss) {
    hi = std::max(hi, f32(v));
    lo = std::min(lo, f32(v));
    sq += f32(v) * f32(v);
  }
  EXPECT_EQ(out[7].item(), hi);
  EXPECT_EQ(out[8].item(), lo);
  EXPECT_NEAR(out[14].item(), std::sqrt(sq), 1e-6);
  // multi_dot: (v a) s.
  for (int c = 0; c < 4; ++c) {
    double want = 0;
    for (int k = 0; k < 3; ++k) {
      double va = 0;
      for (int i = 0; i < 3; ++i) va += f32(vs[static_cast<size_t>(i)]) * f32(as[static_cast<size_t>(i * 3 + k)]);
      want += va * f32(ss[static_cast<size_t>(k * 4 + c)]);
    }
    EXPECT_NEAR(out[10].value_at(c), want, 1e-5);
  }
  // a^3 by three plain products.
  std::vector<double> a2(9, 0.0), a3(9, 0.0);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) a2[i * 3 + j] += f32(as[i * 3 + k]) * f32(as[k * 3 + j]);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) a3[i * 3 + j] += a2[i * 3 + k] * f32(as[k * 3 + j]);
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(out[11].value_at(i), i % 4 == 0 ? 1.0 : 0.0);
    EXPECT_NEAR(out[12].value_at(i), a3[static_cast<size_t>(i)], 1e-5);
  }
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      EXPECT_NEAR(out[13].value_at(i * 4 + j), std::pow(f32(vs[static_cast<size_t>(i)]), j), 1e-6);
}

}  // namespace
}  // namespace kiln::lowering

namespace kiln::lowering {
namespace {

// im2col: out[n, (c kh + i) kw + j, oh OW + ow] = the padded x at (oh sh + i dh, ow sw + j dw); an unbatched
// input the same without n; unfold of a 0-d tensor is that one entry.
TEST(DecomposeTensor, Im2colGathersEveryWindowAndUnfoldOfAScalarIsIt) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[2, 2, 4, 5], %u: float32[2, 4, 5], %s: float32[]) {
  %a: float32[2, 12, 3] = aten.im2col.default(self=%x, kernel_size=[2, 3], dilation=[1, 2], padding=[1, 0], stride=[2, 1])
  %b: float32[12, 3] = aten.im2col.default(self=%u, kernel_size=[2, 3], dilation=[1, 2], padding=[1, 0], stride=[2, 1])
  %c: float32[1] = aten.unfold.default(self=%s, dimension=0, size=1, step=1)
  return (%a, %b, %c)
}
)",
                            &ops);
  expect_only_core_ops(ops);
  const auto xs = ramp(80), us = ramp(40, 0.3);
  auto out = run(m, {float_tensor({2, 2, 4, 5}, xs), float_tensor({2, 4, 5}, us), float_tensor({}, {4.5})});
  ASSERT_EQ(out.size(), 3u);
  // Padded height 6 gives 3 window rows; width 5 with 3 taps 2 apart gives 1 window column.
  const int64_t H = 4, W = 5, kh = 2, kw = 3, dh = 1, dw = 2, ph = 1, pw = 0, sh = 2, sw = 1;
  const int64_t OH = (H + 2 * ph - dh * (kh - 1) - 1) / sh + 1, OW = (W + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  ASSERT_EQ(out[0].numel(), 2 * 2 * kh * kw * OH * OW);
  auto at = [&](const std::vector<double>& v, int64_t n, int64_t c, int64_t h, int64_t w) {
    h -= ph;
    w -= pw;
    if (h < 0 || h >= H || w < 0 || w >= W) return 0.0;
    return f32(v[static_cast<size_t>(((n * 2 + c) * H + h) * W + w)]);
  };
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = 0; j < kw; ++j)
          for (int64_t oh = 0; oh < OH; ++oh)
            for (int64_t ow = 0; ow < OW; ++ow) {
              const int64_t row = (c * kh + i) * kw + j, col = oh * OW + ow;
              EXPECT_EQ(out[0].value_at((n * 2 * kh * kw + row) * OH * OW + col),
                        at(xs, n, c, oh * sh + i * dh, ow * sw + j * dw));
              if (n == 0)
                EXPECT_EQ(out[1].value_at(row * OH * OW + col), at(us, 0, c, oh * sh + i * dh, ow * sw + j * dw));
            }
  EXPECT_EQ(out[2].value_at(0), 4.5);
}

}  // namespace
}  // namespace kiln::lowering

namespace kiln::lowering {
namespace {

// gradient along every dim (edge_order 2, spacing 0.5) and along one (edge_order 1): the central difference
// inside, one-sided differences of the order asked at the edges.
TEST(DecomposeTensor, GradientIsFiniteDifferencesOfItsEdgeOrder) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[3, 5]) {
  %a: float32[3, 5], %b: float32[3, 5] = aten.gradient.scalarint(self=%x, spacing=0.5, edge_order=2)
  %c: float32[3, 5] = aten.gradient.scalarint(self=%x, dim=1)
  return (%a, %b, %c)
}
)",
                            &ops);
  expect_only_core_ops(ops);
  std::vector<double> xs(15);
  for (size_t i = 0; i < xs.size(); ++i)
    xs[i] = std::sin(0.7 * static_cast<double>(i)) + 0.1 * static_cast<double>(i * i);
  auto out = run(m, {float_tensor({3, 5}, xs)});
  ASSERT_EQ(out.size(), 3u);
  auto x = [&](int64_t r, int64_t c) { return f32(xs[static_cast<size_t>(r * 5 + c)]); };
  // One line of `len` values read by v(j): the gradient at j.
  auto grad = [](auto v, int64_t len, int64_t j, int order, double h) {
    if (j > 0 && j + 1 < len) return (v(j + 1) - v(j - 1)) / (2 * h);
    if (order == 1) return j == 0 ? (v(1) - v(0)) / h : (v(len - 1) - v(len - 2)) / h;
    return j == 0 ? (-1.5 * v(0) + 2 * v(1) - 0.5 * v(2)) / h
                  : (1.5 * v(len - 1) - 2 * v(len - 2) + 0.5 * v(len - 3)) / h;
  };
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 5; ++c) {
      EXPECT_NEAR(out[0].value_at(r * 5 + c), grad([&](int64_t j) { return x(j, c); }, 3, r, 2, 0.5), 1e-5);
      EXPECT_NEAR(out[1].value_at(r * 5 + c), grad([&](int64_t j) { return x(r, j); }, 5, c, 2, 0.5), 1e-5);
      EXPECT_NEAR(out[2].value_at(r * 5 + c), grad([&](int64_t j) { return x(r, j); }, 5, c, 1, 1.0), 1e-5);
    }
}

}  // namespace
}  // namespace kiln::lowering
