// Cumulative kernels, the diagonal view and masked_select against values
// written out by hand or computed here in double.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "unit/backends/cpu/op_test_helpers.h"

namespace kiln::cpu {
namespace {

using ir::OpKind;
using namespace testing;

TEST(CumulativeKernels, CumprodAndLogcumsumexpAlongADim) {
  Tensor x = make_tensor(DType::Float32, {2, 3}, {1, 2, 3, -1, 0.5, 4});
  EXPECT_EQ(values(run_op_tensor(OpKind::kCumprod, {{"self", x}, {"dim", I(1)}})),
            (std::vector<double>{1, 2, 6, -1, -0.5, -2}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kCumprod, {{"self", x}, {"dim", I(0)}})),
            (std::vector<double>{1, 2, 3, -1, 1, 12}));
  // Integers and bool become int64.
  Tensor b = make_tensor(DType::Bool, {3}, {1, 1, 0});
  Tensor bp = run_op_tensor(OpKind::kCumprod, {{"self", b}, {"dim", I(0)}});
  EXPECT_EQ(bp.dtype(), DType::Int64);
  EXPECT_EQ(values(bp), (std::vector<double>{1, 1, 0}));
  Tensor l = run_op_tensor(OpKind::kLogcumsumexp, {{"self", x}, {"dim", I(-1)}});
  const std::vector<double> in = values(x);
  for (int r = 0; r < 2; ++r) {
    double s = 0;
    for (int c = 0; c < 3; ++c) {
      s += std::exp(in[static_cast<size_t>(r * 3 + c)]);
      EXPECT_NEAR(l.value_at(r * 3 + c), std::log(s), 1e-6) << r << ", " << c;
    }
  }
  // Large values stay finite (a naive exp would overflow), -inf is the empty sum.
  const double inf = std::numeric_limits<double>::infinity();
  Tensor big = make_tensor(DType::Float32, {3}, {-inf, 1000, 1000});
  Tensor lb = run_op_tensor(OpKind::kLogcumsumexp, {{"self", big}, {"dim", I(0)}});
  EXPECT_EQ(lb.value_at(0), -inf);
  EXPECT_NEAR(lb.value_at(1), 1000, 1e-3);
  EXPECT_NEAR(lb.value_at(2), 1000 + std::log(2.0), 1e-3);
  expect_error(OpKind::kLogcumsumexp, {{"self", make_tensor(DType::Int64, {2}, {1, 2})}, {"dim", I(0)}}, "floating");
}

TEST(CumulativeKernels, DiagonalIsAViewOfTheRightElements) {
  Tensor x = iota(DType::Float32, {3, 4});  // x[i][j] = 4 i + j
  EXPECT_EQ(values(run_op_tensor(OpKind::kDiagonal, {{"self", x}})), (std::vector<double>{0, 5, 10}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kDiagonal, {{"self", x}, {"offset", I(2)}})), (std::vector<double>{2, 7}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kDiagonal, {{"self", x}, {"offset", I(-1)}})), (std::vector<double>{4, 9}));
  EXPECT_TRUE(values(run_op_tensor(OpKind::kDiagonal, {{"self", x}, {"offset", I(5)}})).empty());
  // 3-D, dims 0 and 2: out[k][i] = y[i][k][i].
  Tensor y = iota(DType::Float32, {2, 3, 2});
  Tensor d = run_op_tensor(OpKind::kDiagonal, {{"self", y}, {"dim1", I(0)}, {"dim2", I(2)}});
  EXPECT_EQ(d.sizes(), (Shape{3, 2}));
  EXPECT_EQ(values(d), (std::vector<double>{0, 7, 2, 9, 4, 11}));
  expect_error(OpKind::kDiagonal, {{"self", x}, {"dim1", I(1)}, {"dim2", I(1)}}, "identical");
}

TEST(CumulativeKernels, MaskedSelectTakesBroadcastElementsInOrder) {
  Tensor x = iota(DType::Float32, {2, 3});
  Tensor m = make_tensor(DType::Bool, {3}, {1, 0, 1});
  Tensor out = run_op_tensor(OpKind::kMaskedSelect, {{"self", x}, {"mask", m}});
  EXPECT_EQ(values(out), (std::vector<double>{0, 2, 3, 5}));
  expect_error(OpKind::kMaskedSelect, {{"self", x}, {"mask", make_tensor(DType::Float32, {3}, {1, 0, 1})}}, "bool");
}

// Values by hand: a tie takes the later index, a NaN stays and each later
// NaN takes the index (ATen's CPU kernel).
TEST(CumulativeKernels, CummaxAndCumminKeepTheRunningExtremeAndItsLastIndex) {
  const double nan = std::nan("");
  Tensor x = make_tensor(DType::Float32, {2, 5}, {1, 3, 3, 2, 4, 2, nan, 1, nan, 5});
  auto mx = run_op(OpKind::kCummax, {{"self", x}, {"dim", I(1)}}, 2);
  ASSERT_TRUE(mx.has_value()) << mx.status().message();
  std::vector<double> v = values(output(*mx, 0));
  EXPECT_EQ((std::vector<double>(v.begin(), v.begin() + 5)), (std::vector<double>{1, 3, 3, 3, 4}));
  EXPECT_EQ(v[5], 2);
  for (int j = 6; j < 10; ++j) EXPECT_TRUE(std::isnan(v[static_cast<size_t>(j)])) << j;
  EXPECT_EQ(values(output(*mx, 1)), (std::vector<double>{0, 1, 2, 2, 4, 0, 1, 1, 3, 3}));
  auto mn = run_op(OpKind::kCummin, {{"self", x}, {"dim", I(0)}}, 2);
  ASSERT_TRUE(mn.has_value()) << mn.status().message();
  std::vector<double> w = values(output(*mn, 0));
  EXPECT_EQ((std::vector<double>{w[0], w[1], w[2], w[3], w[4], w[5], w[7], w[9]}),
            (std::vector<double>{1, 3, 3, 2, 4, 1, 1, 4}));
  EXPECT_TRUE(std::isnan(w[6]) && std::isnan(w[8]));
  EXPECT_EQ(values(output(*mn, 1)), (std::vector<double>{0, 0, 0, 0, 0, 0, 1, 1, 1, 0}));
  Tensor i = make_tensor(DType::Int64, {4}, {2, 2, 1, 7});
  auto ix = run_op(OpKind::kCummin, {{"self", i}, {"dim", I(0)}}, 2);
  ASSERT_TRUE(ix.has_value());
  EXPECT_EQ(values(output(*ix, 0)), (std::vector<double>{2, 2, 1, 1}));
  EXPECT_EQ(values(output(*ix, 1)), (std::vector<double>{0, 1, 2, 2}));
}

}  // namespace
}  // namespace kiln::cpu
