// Composite ops of the default dialect written in core ops: the graph after
// the pass holds only core ops, and running it gives what each op's
// definition gives, computed here in double on the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "decompose_helpers.h"

namespace kiln::lowering {
namespace {

TEST(Decompose, SquareIsAProductAndConstantPadIsConstantPadNd) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[2, 3]) {
  %s: float32[2, 3] = aten.square.default(self=%x)
  %p: float32[2, 6] = aten.pad.default(self=%x, pad=[1, 2], mode="constant", value=7.0)
  %r: float32[2, 5] = aten.pad.default(self=%x, pad=[1, 1], mode="reflect")
  return (%s, %p, %r)
}
)",
                           &ops);
  EXPECT_EQ(ops["aten.square.default"], 0);
  EXPECT_EQ(ops["aten.mul.Tensor"], 1);
  EXPECT_EQ(ops["aten.constant_pad_nd.default"], 1);
  EXPECT_EQ(ops["aten.pad.default"], 1);  // reflect is not decomposed here: it stays, named
  m.graph.outputs().pop_back();  // (and has no kernel to run)
  m.output_specs.pop_back();
  const Tensor x = matrix(2, 3, {1, -2, 3, 0.5, 4, -6});
  auto out = run(m, {x});
  ASSERT_EQ(out.size(), 2u);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(out[0].value_at(i), x.value_at(i) * x.value_at(i));
  ASSERT_EQ(out[1].sizes(), (Shape{2, 6}));
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 6; ++c)
      EXPECT_EQ(out[1].value_at(r * 6 + c), c >= 1 && c < 4 ? x.value_at(r * 3 + c - 1) : 7.0) << r << "," << c;
}

TEST(Decompose, LogsumexpIsStableAndKeepsInfinities) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[4, 3]) {
  %a: float32[4] = aten.logsumexp.default(self=%x, dim=[1])
  %b: float32[1, 3] = aten.logsumexp.default(self=%x, dim=[0], keepdim=true)
  return (%a, %b)
}
)",
                           &ops);
  EXPECT_EQ(ops["aten.logsumexp.default"], 0);
  const double inf = std::numeric_limits<double>::infinity();
  // Large values (exp overflows in float32 without the shift), -inf rows, an inf.
  const Tensor x = matrix(4, 3, {100, 101, 99, -inf, -inf, -inf, 1, inf, 2, -3, 0.5, 2});
  auto out = run(m, {x});
  ASSERT_EQ(out.size(), 2u);
  auto lse = [](std::vector<double> v) {
    double m = -std::numeric_limits<double>::infinity();
    for (double e : v) m = std::max(m, e);
    if (std::isinf(m)) return m;
    double s = 0;
    for (double e : v) s += std::exp(e - m);
    return m + std::log(s);
  };
  for (int64_t r = 0; r < 4; ++r) {
    const double want = lse({x.value_at(r * 3), x.value_at(r * 3 + 1), x.value_at(r * 3 + 2)});
    if (std::isinf(want))
      EXPECT_EQ(out[0].value_at(r), want) << r;
    else
      EXPECT_NEAR(out[0].value_at(r), want, 1e-4 * std::abs(want)) << r;
  }
  ASSERT_EQ(out[1].sizes(), (Shape{1, 3}));
  for (int64_t c = 0; c < 3; ++c) {
    const double want = lse({x.value_at(c), x.value_at(3 + c), x.value_at(6 + c), x.value_at(9 + c)});
    if (std::isinf(want))
      EXPECT_EQ(out[1].value_at(c), want) << c;
    else
      EXPECT_NEAR(out[1].value_at(c), want, 1e-4 * std::abs(want)) << c;
  }
}

TEST(Decompose, VectorNormsOfEachOrder) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[2, 3]) {
  %two: float32[2] = aten.linalg_vector_norm.default(self=%x, dim=[1])
  %one: float32[2, 1] = aten.linalg_vector_norm.default(self=%x, ord=1, dim=[1], keepdim=true)
  %big: float32[3] = aten.linalg_vector_norm.default(self=%x, ord=inf, dim=[0])
  %small: float32[3] = aten.linalg_vector_norm.default(self=%x, ord=-inf, dim=[0])
  %three: float32[] = aten.linalg_vector_norm.default(self=%x, ord=3.0)
  %zero: float32[2] = aten.linalg_vector_norm.default(self=%x, ord=0, dim=[1])
  %wide: float64[] = aten.linalg_vector_norm.default(self=%x, dtype=dtype.float64)
  %fro: float32[] = aten.linalg_norm.default(self=%x)
  %rows: float32[2] = aten.linalg_norm.default(self=%x, ord=1, dim=[1])
  return (%two, %one, %big, %small, %three, %zero, %wide, %fro, %rows)
}
)",
                            &ops);
  EXPECT_EQ(ops["aten.linalg_vector_norm.default"], 0);  // every order, and a dtype
  EXPECT_EQ(ops["aten.linalg_norm.default"], 0);         // its vector forms
  const Tensor x = matrix(2, 3, {3, -4, 0, 1, 2, -2});
  auto out = run(m, {x});
  ASSERT_EQ(out.size(), 9u);
  // linalg_norm without an order: the 2-norm of every element; with order 1 over dim 1: each row's.
  EXPECT_NEAR(out[7].value_at(0), std::sqrt(9.0 + 16 + 0 + 1 + 4 + 4), 1e-5);
  EXPECT_EQ(out[8].value_at(0), 7.0);
  EXPECT_EQ(out[8].value_at(1), 5.0);
  // Order 0 counts the nonzero elements of each row; a dtype converts the input first.
  EXPECT_EQ(out[5].dtype(), DType::Float32);
  EXPECT_EQ(out[5].value_at(0), 2.0);
  EXPECT_EQ(out[5].value_at(1), 3.0);
  EXPECT_EQ(out[6].dtype(), DType::Float64);
  EXPECT_NEAR(out[6].value_at(0), std::sqrt(9.0 + 16 + 0 + 1 + 4 + 4), 1e-12);
  EXPECT_NEAR(out[0].value_at(0), 5.0, 1e-6);
  EXPECT_NEAR(out[0].value_at(1), 3.0, 1e-6);
  ASSERT_EQ(out[1].sizes(), (Shape{2, 1}));
  EXPECT_EQ(out[1].value_at(0), 7.0);
  EXPECT_EQ(out[1].value_at(1), 5.0);
  const double big[] = {3, 4, 2}, small[] = {1, 2, 0};
  for (int64_t c = 0; c < 3; ++c) {
    EXPECT_EQ(out[2].value_at(c), big[c]);
    EXPECT_EQ(out[3].value_at(c), small[c]);
  }
  EXPECT_NEAR(out[4].value_at(0), std::cbrt(27.0 + 64 + 0 + 1 + 8 + 8), 1e-5);
}

// matmul with a vector on either side (or both): a row, a column, a dot
// product, each against sums computed here; no 1-D matmul is left.
TEST(Decompose, MatmulOfVectorsIsARowAColumnOrADotProduct) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%a: float32[2, 3], %v: float32[3], %u: float32[2], %b: float32[4, 2, 3]) {
  %row: float32[3] = aten.matmul.default(self=%u, other=%a)
  %col: float32[2] = aten.matmul.default(self=%a, other=%v)
  %dot: float32[] = aten.matmul.default(self=%v, other=%v)
  %batched: float32[4, 2] = aten.matmul.default(self=%b, other=%v)
  return (%row, %col, %dot, %batched)
}
)",
                            &ops);
  EXPECT_EQ(ops["aten.matmul.default"], 3);  // the row, column and batched products, each 2-D or more
  const Tensor a = matrix(2, 3, {1, -2, 3, 0.5, 4, -6});
  Tensor v = Tensor::zeros(DType::Float32, {3}), u = Tensor::zeros(DType::Float32, {2});
  Tensor b = Tensor::zeros(DType::Float32, {4, 2, 3});
  for (int64_t i = 0; i < 3; ++i) v.data<float>()[i] = static_cast<float>(i + 1) * 0.5f;
  u.data<float>()[0] = 2;
  u.data<float>()[1] = -1;
  for (int64_t i = 0; i < 24; ++i) b.data<float>()[i] = static_cast<float>(i % 7) - 3;
  auto out = run(m, {a, v, u, b});
  ASSERT_EQ(out.size(), 4u);
  ASSERT_EQ(out[0].sizes(), Shape{3});
  for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(out[0].value_at(j), 2 * a.value_at(j) - a.value_at(3 + j)) << j;
  ASSERT_EQ(out[1].sizes(), Shape{2});
  double dot = 0;
  for (int64_t k = 0; k < 3; ++k) dot += v.value_at(k) * v.value_at(k);
  for (int64_t i = 0; i < 2; ++i) {
    double want = 0;
    for (int64_t k = 0; k < 3; ++k) want += a.value_at(i * 3 + k) * v.value_at(k);
    EXPECT_NEAR(out[1].value_at(i), want, 1e-6) << i;
  }
  ASSERT_EQ(out[2].sizes(), Shape{});
  EXPECT_NEAR(out[2].value_at(0), dot, 1e-6);
  ASSERT_EQ(out[3].sizes(), (Shape{4, 2}));
  for (int64_t r = 0; r < 8; ++r) {
    double want = 0;
    for (int64_t k = 0; k < 3; ++k) want += b.value_at(r * 3 + k) * v.value_at(k);
    EXPECT_NEAR(out[3].value_at(r), want, 1e-6) << r;
  }
}

// addmm where the GEMM's bias epilogue cannot take it (beta other than 1, a
// matrix bias; beta 0 drops self, NaN included) as a product and a sum; the
// row-bias form with beta 1 left for the GEMM.
TEST(Decompose, AddmmBeyondARowBiasIsAProductAndASum) {
  std::map<std::string, int> ops;
  ir::Module m =
      decomposed(R"(graph(%s: float32[2, 2], %a: float32[2, 3], %b: float32[3, 2], %r: float32[2], %one: float32[1]) {
  %scaled: float32[2, 2] = aten.addmm.default(self=%s, mat1=%a, mat2=%b, beta=0.5, alpha=2)
  %dropped: float32[2, 2] = aten.addmm.default(self=%s, mat1=%a, mat2=%b, beta=0)
  %row: float32[2, 2] = aten.addmm.default(self=%r, mat1=%a, mat2=%b)
  %single: float32[2, 2] = aten.addmm.default(self=%one, mat1=%a, mat2=%b)
  return (%scaled, %dropped, %row, %single)
}
)",
                 &ops);
  EXPECT_EQ(ops["aten.addmm.default"], 1);  // the row bias
  EXPECT_EQ(ops["aten.mm.default"], 3);     // one value broadcast is no row of the output's width
  const Tensor a = matrix(2, 3, {1, -2, 3, 0.5, 4, -6});
  const Tensor b = matrix(3, 2, {2, 1, 0, -1, 1, 3});
  const Tensor self = matrix(2, 2, {1, std::nan(""), -2, 4});
  const Tensor r = matrix(1, 2, {10, 20}).reshape({2});
  const Tensor one = matrix(1, 1, {7}).reshape({1});
  auto out = run(m, {self, a, b, r, one});
  ASSERT_EQ(out.size(), 4u);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      double p = 0;
      for (int64_t k = 0; k < 3; ++k) p += a.value_at(i * 3 + k) * b.value_at(k * 2 + j);
      const int64_t e = i * 2 + j;
      if (e == 1) {
        EXPECT_TRUE(std::isnan(out[0].value_at(e)));
      } else {
        EXPECT_NEAR(out[0].value_at(e), 0.5 * self.value_at(e) + 2 * p, 1e-5) << e;
      }
      EXPECT_NEAR(out[1].value_at(e), p, 1e-5) << e;  // beta 0: self's NaN not read
      EXPECT_NEAR(out[2].value_at(e), r.value_at(j) + p, 1e-5) << e;
      EXPECT_NEAR(out[3].value_at(e), 7 + p, 1e-5) << e;
    }
}

// The elementwise composites of torch.nn.functional and torch, each against
// its definition computed here in double, over values that reach every
// branch: signs, zero, values beyond each threshold, infinities and NaN.
TEST(Decompose, ElementwiseCompositesFollowTheirDefinitions) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%x: float32[2, 8], %y: float32[2, 8], %w: float32[2, 8]) {
  %addcmul: float32[2, 8] = aten.addcmul.default(self=%x, tensor1=%x, tensor2=%y, value=0.5)
  %addcdiv: float32[2, 8] = aten.addcdiv.default(self=%x, tensor1=%x, tensor2=%y, value=2)
  %lerp_near: float32[2, 8] = aten.lerp.Scalar(self=%x, end=%y, weight=0.3)
  %lerp_far: float32[2, 8] = aten.lerp.Scalar(self=%x, end=%y, weight=0.8)
  %lerp_tensor: float32[2, 8] = aten.lerp.Tensor(self=%x, end=%y, weight=%w)
  %logit: float32[2, 8] = aten.logit.default(self=%w, eps=0.1)
  %softplus: float32[2, 8] = aten.softplus.default(self=%x, beta=2, threshold=3)
  %mish: float32[2, 8] = aten.mish.default(self=%x)
  %celu: float32[2, 8] = aten.celu.default(self=%x, alpha=1.5)
  %selu: float32[2, 8] = aten.selu.default(self=%x)
  %relu6: float32[2, 8] = aten.relu6.default(self=%x)
  %hardshrink: float32[2, 8] = aten.hardshrink.default(self=%x)
  %softshrink: float32[2, 8] = aten.softshrink.default(self=%x, lambd=0.5)
  %threshold: float32[2, 8] = aten.threshold.default(self=%x, threshold=0.3, value=-7)
  %log_sigmoid: float32[2, 8] = aten.log_sigmoid.default(self=%x)
  %sinc: float32[2, 8] = aten.sinc.default(self=%x)
  %xlogy: float32[2, 8] = aten.xlogy.Tensor(self=%x, other=%y)
  %deg2rad: float32[2, 8] = aten.deg2rad.default(self=%x)
  %rad2deg: float32[2, 8] = aten.rad2deg.default(self=%x)
  %frac: float32[2, 8] = aten.frac.default(self=%x)
  %positive: float32[2, 8] = aten.positive.default(self=%x)
  %nan_to_num: float32[2, 8] = aten.nan_to_num.default(self=%x)
  %nan_to_num_given: float32[2, 8] = aten.nan_to_num.default(self=%x, nan=1, posinf=2, neginf=-2)
  %glu: float32[2, 4] = aten.glu.default(self=%x, dim=1)
  %isposinf: bool[2, 8] = aten.isposinf.default(self=%x)
  %isneginf: bool[2, 8] = aten.isneginf.default(self=%x)
  %isfinite: bool[2, 8] = aten.isfinite.default(self=%x)
  return (%addcmul, %addcdiv, %lerp_near, %lerp_far, %lerp_tensor, %logit, %softplus, %mish, %celu, %selu, %relu6, %hardshrink, %softshrink, %threshold, %log_sigmoid, %sinc, %xlogy, %deg2rad, %rad2deg, %frac, %positive, %nan_to_num, %nan_to_num_given, %glu, %isposinf, %isneginf, %isfinite)
}
)",
                            &ops);
  expect_only_core_ops(ops, {"aten.abs.default"});  // of floating tensors: a core op
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> xs{-3.5, -1, -0.25, 0, 0.3, 0.75, 2, 25, -inf, inf, nan, -0.5, 0.5, 1e-3, -21, 6.5};
  const std::vector<double> ys{0.5, 2, 3, 1, 0.25, 4, 1.5, 0.1, 2, 0.5, 1, nan, 3, 0, 2, 5};
  const std::vector<double> ws{0.05, 0.2, 0.45, 0.5, 0.55, 0.9, 0.95, 0.01, 0.3, 0.7, 0.5, 0.2, 0.6, 0.99, 0.1, 0.4};
  auto out = run(m, {matrix(2, 8, xs), matrix(2, 8, ys), matrix(2, 8, ws)});
  ASSERT_EQ(out.size(), 27u);
  const double pi = 3.14159265358979323846;
  auto softplus = [](double v, double beta, double th) {
    return v * beta > th ? v : std::log1p(std::exp(v * beta)) / beta;
  };
  auto elu = [](double v, double alpha, double scale, double in) {
    return v > 0 ? scale * v : scale * alpha * (std::exp(v * in) - 1);
  };
  auto lerp = [](double a, double b, double w) { return std::fabs(w) < 0.5 ? a + w * (b - a) : b - (b - a) * (1 - w); };
  const std::vector<std::function<double(double, double, double)>> want{
      [](double x, double y, double) { return x + 0.5 * x * y; },
      [](double x, double y, double) { return x + 2 * x / y; },
      [&](double x, double y, double) { return lerp(x, y, 0.3); },
      [&](double x, double y, double) { return lerp(x, y, 0.8); },
      [&](double x, double y, double w) { return lerp(x, y, w); },
      [](double, double, double w) {
        const double z = std::clamp(w, 0.1, 0.9);
        return std::log(z / (1 - z));
      },
      [&](double x, double, double) { return softplus(x, 2, 3); },
      [&](double x, double, double) { return x * std::tanh(softplus(x, 1, 20)); },
      [&](double x, double, double) { return elu(x, 1.5, 1, 1 / 1.5); },
      [&](double x, double, double) { return elu(x, 1.6732632423543772, 1.0507009873554805, 1); },
      [](double x, double, double) { return std::isnan(x) ? x : std::min(std::max(x, 0.0), 6.0); },
      [](double x, double, double) { return x >= -0.5 && x <= 0.5 ? 0.0 : x; },
      [](double x, double, double) { return x > 0.5 ? x - 0.5 : (x < -0.5 ? x + 0.5 : 0.0); },
      [](double x, double, double) { return x <= 0.3 ? -7.0 : x; },
      [](double x, double, double) { return std::min(x, 0.0) - std::log1p(std::exp(-std::fabs(x))); },
      [&](double x, double, double) { return x == 0 ? 1.0 : std::sin(pi * x) / (pi * x); },
      [](double x, double y, double) { return std::isnan(y) ? y : (x == 0 ? 0.0 : x * std::log(y)); },
      [&](double x, double, double) { return x * (pi / 180); },
      [&](double x, double, double) { return x * (180 / pi); },
      [](double x, double, double) { return x - std::trunc(x); },
      [](double x, double, double) { return x; },
      [](double x, double, double) {
        return std::isnan(x) ? 0.0 : std::isinf(x) ? std::copysign(std::numeric_limits<float>::max(), x) : x;
      },
      [](double x, double, double) { return std::isnan(x)   ? 1.0
                                            : std::isinf(x) ? std::copysign(2.0, x)
                                                            : x; },
  };
  auto same = [](double got, double w) {
    if (std::isnan(w)) return std::isnan(got);
    if (std::isinf(w)) return got == w;
    return std::fabs(got - w) <= 1e-6 + 1e-5 * std::fabs(w);
  };
  for (size_t o = 0; o < want.size(); ++o)
    for (int64_t i = 0; i < 16; ++i) {
      // log1p/exp of float32 NaN and infinities aside, every element in float32 as the reference in double.
      const double w = want[o](xs[i], ys[i], ws[i]);
      const double got = out[o].value_at(i);
      EXPECT_TRUE(same(got, static_cast<float>(w)))
          << "output " << o << " element " << i << ": got " << got << ", want " << w;
    }
  // glu: the first half times the sigmoid of the second, per row.
  ASSERT_EQ(out[23].sizes(), (Shape{2, 4}));
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 4; ++c) {
      const double a = xs[r * 8 + c], g = xs[r * 8 + c + 4];
      const double w = a / (1 + std::exp(-g));
      EXPECT_TRUE(same(out[23].value_at(r * 4 + c), static_cast<float>(w))) << "glu " << r << "," << c;
    }
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(out[24].value_at(i) != 0, xs[i] == inf) << i;
    EXPECT_EQ(out[25].value_at(i) != 0, xs[i] == -inf) << i;
    EXPECT_EQ(out[26].value_at(i) != 0, std::isfinite(xs[i])) << i;
  }
}

// floor_divide is division rounded down, in the operands' dtype (integers too);
// view_as, reshape_as and ravel take the sizes they give.
TEST(Decompose, FloorDivideAndReshapesLikeAnotherTensor) {
  std::map<std::string, int> ops;
  ir::Module m =
      decomposed(R"(graph(%a: float32[2, 3], %b: float32[2, 3], %i: int64[2, 3], %j: int64[2, 3], %o: float32[3, 2]) {
  %f: float32[2, 3] = aten.floor_divide.default(self=%a, other=%b)
  %g: int64[2, 3] = aten.floor_divide.default(self=%i, other=%j)
  %v: float32[3, 2] = aten.view_as.default(self=%a, other=%o)
  %r: float32[3, 2] = aten.reshape_as.default(self=%b, other=%o)
  %l: float32[6] = aten.ravel.default(self=%a)
  return (%f, %g, %v, %r, %l)
}
)",
                 &ops);
  for (const char* op :
       {"aten.floor_divide.default", "aten.view_as.default", "aten.reshape_as.default", "aten.ravel.default"})
    EXPECT_EQ(ops[op], 0) << op;
  const std::vector<double> a{7, -7, 7.5, -0.5, 9, 1}, b{2, 2, -2, 3, 3, -4};
  Tensor i = Tensor::zeros(DType::Int64, {2, 3}), j = Tensor::zeros(DType::Int64, {2, 3});
  const int64_t iv[] = {7, -7, 7, -1, 9, 1}, jv[] = {2, 2, -2, 3, 3, -4};
  for (int k = 0; k < 6; ++k) {
    i.data<int64_t>()[k] = iv[k];
    j.data<int64_t>()[k] = jv[k];
  }
  auto out = run(m, {matrix(2, 3, a), matrix(2, 3, b), i, j, matrix(3, 2, {0, 0, 0, 0, 0, 0})});
  ASSERT_EQ(out.size(), 5u);
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(out[0].value_at(k), std::floor(a[k] / b[k])) << k;
    EXPECT_EQ(out[1].value_at(k), std::floor(static_cast<double>(iv[k]) / static_cast<double>(jv[k]))) << k;
  }
  EXPECT_EQ(out[2].sizes(), (Shape{3, 2}));
  EXPECT_EQ(out[3].sizes(), (Shape{3, 2}));
  EXPECT_EQ(out[4].sizes(), (Shape{6}));
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(out[2].value_at(k), a[k]);
    EXPECT_EQ(out[3].value_at(k), b[k]);
    EXPECT_EQ(out[4].value_at(k), a[k]);
  }
}

// Products of vectors, moved, flipped and tiled dims, broadcast_tensors, and
// the variance family, against their definitions computed here.
TEST(Decompose, VectorProductsMovedDimsAndVariancesFollowTheirDefinitions) {
  std::map<std::string, int> ops;
  ir::Module m = decomposed(R"(graph(%a: float32[3], %b: float32[3], %A: float32[2, 3], %x: float32[2, 3, 4]) {
  %outer: float32[3, 3] = aten.outer.default(self=%a, vec2=%b)
  %dot: float32[] = aten.dot.default(self=%a, tensor=%b)
  %vdot: float32[] = aten.vdot.default(self=%a, other=%b)
  %inner: float32[] = aten.inner.default(self=%a, other=%b)
  %mv: float32[2] = aten.mv.default(self=%A, vec=%b)
  %moved: float32[3, 4, 2] = aten.movedim.intlist(self=%x, source=[0], destination=[2])
  %moved1: float32[4, 2, 3] = aten.movedim.int(self=%x, source=-1, destination=0)
  %lr: float32[2, 3] = aten.fliplr.default(self=%A)
  %ud: float32[2, 3] = aten.flipud.default(self=%A)
  %tile: float32[2, 6] = aten.tile.default(self=%A, dims=[2])
  %bt: float32[2, 3], %bt_a: float32[2, 3] = aten.broadcast_tensors.default(tensors=[%b, %A])
  %var: float32[2, 4] = aten.var.dim(self=%x, dim=[1], unbiased=false)
  %std: float32[] = aten.std.default(self=%x)
  %stdc: float32[2, 1, 4] = aten.std.correction(self=%x, dim=[1], correction=2, keepdim=true)
  return (%outer, %dot, %vdot, %inner, %mv, %moved, %moved1, %lr, %ud, %tile, %bt, %var, %std, %stdc)
}
)",
                            &ops);
  for (const auto& [op, count] : ops) {
    const ir::OpKind k = ir::op_from_target(op).value_or(ir::OpKind::kUnknown);
    for (ir::OpKind d : decomposed_ops()) EXPECT_NE(k, d) << op << " is left after the pass";
  }
  const std::vector<double> av{1.5, -2, 0.25}, bv{3, 0.5, -4}, Av{1, 2, 3, -1, 0.5, 4};
  Tensor a = Tensor::zeros(DType::Float64, {3}), b = Tensor::zeros(DType::Float64, {3});
  for (int i = 0; i < 3; ++i) {
    a.data<double>()[i] = av[i];
    b.data<double>()[i] = bv[i];
  }
  std::vector<double> xv(24);
  for (int i = 0; i < 24; ++i) xv[i] = std::sin(1.7 * i) * (1 + i % 5);
  Tensor x = Tensor::zeros(DType::Float64, {2, 3, 4});
  for (int i = 0; i < 24; ++i) x.data<double>()[i] = xv[i];
  auto out = run(m, {a.to(DType::Float32), b.to(DType::Float32), matrix(2, 3, Av), x.to(DType::Float32)});
  ASSERT_EQ(out.size(), 14u);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(out[0].value_at(i * 3 + j), av[i] * bv[j], 1e-6);
  const double dot = av[0] * bv[0] + av[1] * bv[1] + av[2] * bv[2];
  for (int o : {1, 2, 3}) EXPECT_NEAR(out[o].value_at(0), dot, 1e-5) << o;
  for (int r = 0; r < 2; ++r)
    EXPECT_NEAR(out[4].value_at(r), Av[r * 3] * bv[0] + Av[r * 3 + 1] * bv[1] + Av[r * 3 + 2] * bv[2], 1e-5);
  auto xat = [&](int i, int j, int k) { return static_cast<float>(xv[(i * 3 + j) * 4 + k]); };
  ASSERT_EQ(out[5].sizes(), (Shape{3, 4, 2}));
  ASSERT_EQ(out[6].sizes(), (Shape{4, 2, 3}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        EXPECT_EQ(out[5].value_at((j * 4 + k) * 2 + i), xat(i, j, k));
        EXPECT_EQ(out[6].value_at((k * 2 + i) * 3 + j), xat(i, j, k));
      }
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(out[7].value_at(r * 3 + c), Av[r * 3 + (2 - c)]);
      EXPECT_EQ(out[8].value_at(r * 3 + c), Av[(1 - r) * 3 + c]);
      EXPECT_EQ(out[9].value_at(r * 6 + c), Av[r * 3 + c]);
      EXPECT_EQ(out[9].value_at(r * 6 + c + 3), Av[r * 3 + c]);
      EXPECT_EQ(out[10].value_at(r * 3 + c), bv[c]);
    }
  // Variances in double: over dim 1 (3 values) without correction; every element (24) with 1; dim 1 with 2.
  auto variance = [&](const std::vector<double>& v, double correction) {
    double mean = 0;
    for (double e : v) mean += e;
    mean /= static_cast<double>(v.size());
    double s = 0;
    for (double e : v) s += (e - mean) * (e - mean);
    return s / (static_cast<double>(v.size()) - correction);
  };
  std::vector<double> all;
  for (int i = 0; i < 24; ++i) all.push_back(static_cast<float>(xv[i]));
  EXPECT_NEAR(out[12].value_at(0), std::sqrt(variance(all, 1)), 1e-5);
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      const std::vector<double> col{xat(i, 0, k), xat(i, 1, k), xat(i, 2, k)};
      EXPECT_NEAR(out[11].value_at(i * 4 + k), variance(col, 0), 1e-5);
      EXPECT_NEAR(out[13].value_at(i * 4 + k), std::sqrt(variance(col, 2)), 1e-5);
    }
}

}  // namespace
}  // namespace kiln::lowering
