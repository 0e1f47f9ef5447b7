#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "unit/backends/cpu/op_test_helpers.h"

namespace kiln::cpu {
namespace {

using ir::OpKind;
using namespace testing;

// A [rows, cols] float32 view that is not contiguous.
Tensor transposed(const std::vector<double>& logical, int64_t rows, int64_t cols) {
  Tensor t = testing::transposed(DType::Float32, logical, rows, cols);
  EXPECT_FALSE(t.is_contiguous());
  return t;
}

TEST(ElementwiseKernels, AddBroadcastsWithAlpha) {
  Tensor x = make_tensor(DType::Float32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor y = make_tensor(DType::Float32, {3}, {10, 20, 30});
  Tensor out = run_op_tensor(OpKind::kAddTensor, {{"self", x}, {"other", y}, {"alpha", I(2)}});
  ASSERT_EQ(out.sizes(), (Shape{2, 3}));
  EXPECT_EQ(out.dtype(), DType::Float32);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(out.value_at(r * 3 + c), (r * 3 + c + 1) + 2 * 10.0 * (c + 1));
}

TEST(ElementwiseKernels, AddBroadcastsBothWays) {
  Tensor x = make_tensor(DType::Float32, {3, 1}, {1, 2, 3});
  Tensor y = make_tensor(DType::Float32, {1, 4}, {10, 20, 30, 40});
  Tensor out = run_op_tensor(OpKind::kAddTensor, {{"self", x}, {"other", y}});
  ASSERT_EQ(out.sizes(), (Shape{3, 4}));
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(out.value_at(r * 4 + c), (r + 1) + 10.0 * (c + 1));
}

TEST(ElementwiseKernels, NonContiguousInput) {
  std::vector<double> v = {1, 2, 3, 4, 5, 6};
  Tensor x = transposed(v, 2, 3);
  Tensor y = make_tensor(DType::Float32, {2, 3}, {1, 1, 1, 1, 1, 1});
  Tensor out = run_op_tensor(OpKind::kSubTensor, {{"self", x}, {"other", y}});
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out.value_at(i), v[i] - 1);
  Tensor e = run_op_tensor(OpKind::kExp, {{"self", x}});
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(static_cast<float>(e.value_at(i)), std::exp(static_cast<float>(v[i])));
}

TEST(ElementwiseKernels, ScalarPromotion) {
  Tensor xi = make_tensor(DType::Int64, {3}, {1, 2, 3});
  Tensor a = run_op_tensor(OpKind::kAddScalar, {{"self", xi}, {"other", F(0.5)}});
  EXPECT_EQ(a.dtype(), DType::Float32);
  EXPECT_EQ(values(a), (std::vector<double>{1.5, 2.5, 3.5}));
  Tensor b = run_op_tensor(OpKind::kMulScalar, {{"self", xi}, {"other", I(3)}});
  EXPECT_EQ(b.dtype(), DType::Int64);
  EXPECT_EQ(values(b), (std::vector<double>{3, 6, 9}));
  Tensor x32 = make_tensor(DType::Int32, {2}, {5, 6});
  EXPECT_EQ(run_op_tensor(OpKind::kAddTensor, {{"self", x32}, {"other", I(1)}}).dtype(), DType::Int32);
  // A Python number as `other` of a .Tensor overload.
  Tensor c = run_op_tensor(OpKind::kAddTensor, {{"self", x32}, {"other", F(1.25)}});
  EXPECT_EQ(c.dtype(), DType::Float32);
  EXPECT_EQ(values(c), (std::vector<double>{6.25, 7.25}));
  Tensor bt = make_tensor(DType::Bool, {2}, {1, 0});
  Tensor d = run_op_tensor(OpKind::kAddTensor, {{"self", bt}, {"other", I(2)}});
  EXPECT_EQ(d.dtype(), DType::Int64);
  EXPECT_EQ(values(d), (std::vector<double>{3, 2}));
  Tensor h = make_tensor(DType::Float16, {2}, {1, 2});
  EXPECT_EQ(run_op_tensor(OpKind::kMulTensor, {{"self", h}, {"other", F(2.5)}}).dtype(), DType::Float16);
}

TEST(ElementwiseKernels, ZeroDimTensorsPromoteLikeScalars) {
  Tensor f32 = make_tensor(DType::Float32, {2}, {1, 2});
  Tensor f64_0d = Tensor::scalar(DType::Float64, 0.5);
  EXPECT_EQ(run_op_tensor(OpKind::kAddTensor, {{"self", f32}, {"other", f64_0d}}).dtype(), DType::Float32);
  Tensor i32 = make_tensor(DType::Int32, {2}, {1, 2});
  Tensor i64_0d = Tensor::scalar(DType::Int64, 7);
  EXPECT_EQ(run_op_tensor(OpKind::kAddTensor, {{"self", i32}, {"other", i64_0d}}).dtype(), DType::Int32);
  // A higher category wins even from a 0-d tensor, and keeps its own width.
  Tensor out = run_op_tensor(OpKind::kAddTensor, {{"self", i32}, {"other", f64_0d}});
  EXPECT_EQ(out.dtype(), DType::Float64);
  EXPECT_EQ(values(out), (std::vector<double>{1.5, 2.5}));
  // Two dimensioned tensors promote normally.
  Tensor f64 = make_tensor(DType::Float64, {1}, {0.5});
  EXPECT_EQ(run_op_tensor(OpKind::kAddTensor, {{"self", f32}, {"other", f64}}).dtype(), DType::Float64);
}

TEST(ElementwiseKernels, BoolArithmetic) {
  Tensor x = make_tensor(DType::Bool, {4}, {0, 0, 1, 1});
  Tensor y = make_tensor(DType::Bool, {4}, {0, 1, 0, 1});
  Tensor s = run_op_tensor(OpKind::kAddTensor, {{"self", x}, {"other", y}});
  EXPECT_EQ(s.dtype(), DType::Bool);
  EXPECT_EQ(values(s), (std::vector<double>{0, 1, 1, 1}));
  Tensor p = run_op_tensor(OpKind::kMulTensor, {{"self", x}, {"other", y}});
  EXPECT_EQ(values(p), (std::vector<double>{0, 0, 0, 1}));
  expect_error(OpKind::kSubTensor, {{"self", x}, {"other", y}}, "bool");
}

TEST(ElementwiseKernels, IntegerOverflowWraps) {
  Tensor x = make_tensor(DType::Int32, {1}, {2147483647});
  Tensor out = run_op_tensor(OpKind::kAddScalar, {{"self", x}, {"other", I(1)}});
  EXPECT_EQ(out.data<int32_t>()[0], std::numeric_limits<int32_t>::min());
  Tensor big = Tensor::zeros(DType::Int64, {1});
  big.data<int64_t>()[0] = std::numeric_limits<int64_t>::max();
  Tensor m = run_op_tensor(OpKind::kMulScalar, {{"self", big}, {"other", I(2)}});
  EXPECT_EQ(m.data<int64_t>()[0], -2);
}

TEST(ElementwiseKernels, AlphaRules) {
  Tensor x = make_tensor(DType::Int64, {2}, {1, 2});
  expect_error(OpKind::kAddTensor, {{"self", x}, {"other", x}, {"alpha", F(0.5)}}, "alpha");
  Tensor f = make_tensor(DType::Float32, {2}, {1, 2});
  Tensor out = run_op_tensor(OpKind::kSubTensor, {{"self", f}, {"other", f}, {"alpha", F(0.5)}});
  EXPECT_EQ(values(out), (std::vector<double>{0.5, 1}));
  expect_error(OpKind::kAddTensor, {{"self", x}, {"other", x}, {"alpha", B(true)}}, "bool alpha");
  Tensor i8 = make_tensor(DType::Int8, {1}, {1});
  expect_error(OpKind::kAddTensor, {{"self", i8}, {"other", i8}, {"alpha", I(300)}}, "overflow");
  // x + alpha * y rounds once (a fused multiply-add, as ATen's vectorized add).
  Tensor a = make_tensor(DType::Float32, {1}, {1.0});
  Tensor b = make_tensor(DType::Float32, {1}, {1.0 / 3.0});
  const float want = std::fma(-3.0f, static_cast<float>(1.0 / 3.0), 1.0f);
  EXPECT_EQ(run_op_tensor(OpKind::kAddTensor, {{"self", a}, {"other", b}, {"alpha", I(-3)}}).value_at(0), want);
}

TEST(ElementwiseKernels, Rsub) {
  Tensor x = make_tensor(DType::Float32, {3}, {1, 2, 3});
  Tensor a = run_op_tensor(OpKind::kRsubScalar, {{"self", x}, {"other", I(10)}, {"alpha", I(2)}});
  EXPECT_EQ(values(a), (std::vector<double>{8, 6, 4}));
  Tensor y = make_tensor(DType::Float32, {1}, {100});
  Tensor b = run_op_tensor(OpKind::kRsubTensor, {{"self", x}, {"other", y}});
  EXPECT_EQ(values(b), (std::vector<double>{99, 98, 97}));
}

TEST(ElementwiseKernels, TrueDivisionOfIntegersIsFloat) {
  Tensor x = make_tensor(DType::Int64, {4}, {7, -7, 1, 0});
  Tensor y = make_tensor(DType::Int64, {4}, {2, 2, 3, 0});
  Tensor out = run_op_tensor(OpKind::kDivTensor, {{"self", x}, {"other", y}});
  EXPECT_EQ(out.dtype(), DType::Float32);
  EXPECT_EQ(out.value_at(0), 3.5);
  EXPECT_EQ(out.value_at(1), -3.5);
  EXPECT_FLOAT_EQ(static_cast<float>(out.value_at(2)), 1.0f / 3.0f);
  EXPECT_TRUE(std::isnan(out.value_at(3)));
  // rounding_mode None is true division too.
  Tensor n = run_op_tensor(OpKind::kDivTensorMode, {{"self", x}, {"other", y}, {"rounding_mode", ir::NoneArg{}}});
  EXPECT_EQ(n.dtype(), DType::Float32);
}

TEST(ElementwiseKernels, DivRoundingModes) {
  Tensor x = make_tensor(DType::Int64, {4}, {7, -7, 7, -7});
  Tensor y = make_tensor(DType::Int64, {4}, {2, 2, -2, -2});
  Tensor t = run_op_tensor(OpKind::kDivTensorMode, {{"self", x}, {"other", y}, {"rounding_mode", S("trunc")}});
  EXPECT_EQ(t.dtype(), DType::Int64);
  EXPECT_EQ(values(t), (std::vector<double>{3, -3, -3, 3}));
  Tensor f = run_op_tensor(OpKind::kDivTensorMode, {{"self", x}, {"other", y}, {"rounding_mode", S("floor")}});
  EXPECT_EQ(values(f), (std::vector<double>{3, -4, -4, 3}));
  Tensor xf = make_tensor(DType::Float32, {4}, {7.5, -7.5, 7.5, -7.5});
  Tensor yf = make_tensor(DType::Float32, {4}, {2, 2, -2, -2});
  Tensor ff = run_op_tensor(OpKind::kDivTensorMode, {{"self", xf}, {"other", yf}, {"rounding_mode", S("floor")}});
  EXPECT_EQ(values(ff), (std::vector<double>{3, -4, -4, 3}));
  Tensor ft = run_op_tensor(OpKind::kDivTensorMode, {{"self", xf}, {"other", yf}, {"rounding_mode", S("trunc")}});
  EXPECT_EQ(values(ft), (std::vector<double>{3, -3, -3, 3}));
  Tensor zero = make_tensor(DType::Int64, {1}, {0});
  expect_error(OpKind::kDivTensorMode, {{"self", x}, {"other", zero}, {"rounding_mode", S("floor")}},
               "division by zero");
  expect_error(OpKind::kDivTensorMode, {{"self", x}, {"other", y}, {"rounding_mode", S("round")}}, "rounding_mode");
  // Float division by zero follows IEEE.
  Tensor fz = run_op_tensor(OpKind::kDivTensorMode, {{"self", xf}, {"other", F(0.0)}, {"rounding_mode", S("floor")}});
  EXPECT_TRUE(std::isinf(fz.value_at(0)));
}

TEST(ElementwiseKernels, ShapeMismatchNamesNode) {
  Tensor x = make_tensor(DType::Float32, {2, 3}, {});
  Tensor y = make_tensor(DType::Float32, {4}, {});
  expect_error(OpKind::kAddTensor, {{"self", x}, {"other", y}}, "[2, 3]");
  expect_error(OpKind::kMulTensor, {{"self", x}}, "other");
  // A broadcast shape whose element count overflows is an error, not an allocation.
  Tensor tall = Tensor::zeros(DType::Float32, {0, 1}).as_strided({int64_t{1} << 40, 1}, {0, 0}, 0);
  Tensor wide = Tensor::zeros(DType::Float32, {0, 1}).as_strided({1, int64_t{1} << 40}, {0, 0}, 0);
  expect_error(OpKind::kAddTensor, {{"self", tall}, {"other", wide}}, "overflows");
}

TEST(ElementwiseKernels, HalfAndBFloat16RoundOnStore) {
  Tensor h = make_tensor(DType::Float16, {2}, {1, 2048});
  Tensor out = run_op_tensor(OpKind::kAddTensor, {{"self", h}, {"other", make_tensor(DType::Float16, {2}, {1e-4, 1})}});
  EXPECT_EQ(out.dtype(), DType::Float16);
  EXPECT_EQ(out.value_at(0), static_cast<float>(Half(1.0f + static_cast<float>(Half(1e-4f)))));
  EXPECT_EQ(out.value_at(1), 2048);  // 2049 is not a float16: ties to even
  Tensor b = make_tensor(DType::BFloat16, {2}, {1, 3});
  Tensor bm = run_op_tensor(OpKind::kMulTensor, {{"self", b}, {"other", F(0.1)}});
  EXPECT_EQ(bm.dtype(), DType::BFloat16);
  EXPECT_EQ(bm.value_at(1), static_cast<float>(BFloat16(3.0f * 0.1f)));
  // mul/div read a one-element float operand at full precision (ATen does), so
  // 3 * 0.1 rounds once: float16(0.3f), not float16(3 * float16(0.1)).
  Tensor three = make_tensor(DType::Float16, {1}, {3});
  EXPECT_EQ(run_op_tensor(OpKind::kMulScalar, {{"self", three}, {"other", F(0.1)}}).value_at(0),
            static_cast<float>(Half(0.3f)));
  EXPECT_EQ(
      run_op_tensor(OpKind::kDivTensor, {{"self", three}, {"other", Tensor::scalar(DType::Float64, 10)}}).value_at(0),
      static_cast<float>(Half(0.3f)));
  EXPECT_NE(static_cast<float>(Half(0.3f)), static_cast<float>(Half(3 * static_cast<float>(Half(0.1f)))));
  Tensor mixed = run_op_tensor(OpKind::kAddTensor, {{"self", h}, {"other", b}});
  EXPECT_EQ(mixed.dtype(), DType::Float32);
}

TEST(ElementwiseKernels, PowTensorScalar) {
  Tensor x = make_tensor(DType::Float32, {3}, {1.5, 4, 9});
  EXPECT_EQ(values(run_op_tensor(OpKind::kPowTensorScalar, {{"self", x}, {"exponent", I(2)}})),
            (std::vector<double>{2.25, 16, 81}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kPowTensorScalar, {{"self", x}, {"exponent", F(0.5)}})),
            (std::vector<double>{std::sqrt(1.5f), 2, 3}));
  Tensor g = run_op_tensor(OpKind::kPowTensorScalar, {{"self", x}, {"exponent", F(1.7)}});
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(g.value_at(i), std::pow(x.value_at(i), 1.7), 1e-5 * g.value_at(i));
  Tensor xi = make_tensor(DType::Int64, {4}, {-3, 0, 2, 5});
  Tensor sq = run_op_tensor(OpKind::kPowTensorScalar, {{"self", xi}, {"exponent", I(3)}});
  EXPECT_EQ(sq.dtype(), DType::Int64);
  EXPECT_EQ(values(sq), (std::vector<double>{-27, 0, 8, 125}));
  Tensor fl = run_op_tensor(OpKind::kPowTensorScalar, {{"self", xi}, {"exponent", F(2.0)}});
  EXPECT_EQ(fl.dtype(), DType::Float32);
  EXPECT_EQ(values(fl), (std::vector<double>{9, 0, 4, 25}));
  expect_error(OpKind::kPowTensorScalar, {{"self", xi}, {"exponent", I(-1)}}, "negative");
}

TEST(ElementwiseKernels, PowTensorTensor) {
  Tensor b = make_tensor(DType::Int32, {5}, {2, 1, -1, -1, 3});
  Tensor e = make_tensor(DType::Int32, {5}, {-1, -5, -3, -2, 4});
  Tensor out = run_op_tensor(OpKind::kPowTensorTensor, {{"self", b}, {"exponent", e}});
  EXPECT_EQ(out.dtype(), DType::Int32);
  EXPECT_EQ(values(out), (std::vector<double>{0, 1, -1, 1, 81}));
  Tensor bf = make_tensor(DType::Float32, {2, 1}, {2, 3});
  Tensor ef = make_tensor(DType::Float32, {2}, {0.5, 3});
  Tensor o = run_op_tensor(OpKind::kPowTensorTensor, {{"self", bf}, {"exponent", ef}});
  ASSERT_EQ(o.sizes(), (Shape{2, 2}));
  EXPECT_FLOAT_EQ(static_cast<float>(o.value_at(0)), std::sqrt(2.0f));
  EXPECT_EQ(o.value_at(3), 27);
}

TEST(ElementwiseKernels, Comparisons) {
  Tensor x = make_tensor(DType::Int64, {4}, {1, 2, 3, 4});
  Tensor lt = run_op_tensor(OpKind::kLtScalar, {{"self", x}, {"other", F(2.5)}});
  EXPECT_EQ(lt.dtype(), DType::Bool);
  EXPECT_EQ(values(lt), (std::vector<double>{1, 1, 0, 0}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kGeScalar, {{"self", x}, {"other", I(3)}})),
            (std::vector<double>{0, 0, 1, 1}));
  Tensor y = make_tensor(DType::Float32, {2, 1}, {2, 3});
  Tensor eq = run_op_tensor(OpKind::kEqTensor, {{"self", x}, {"other", y}});
  ASSERT_EQ(eq.sizes(), (Shape{2, 4}));
  EXPECT_EQ(values(eq), (std::vector<double>{0, 1, 0, 0, 0, 0, 1, 0}));
  Tensor nan = make_tensor(DType::Float32, {2}, {std::nan(""), 1});
  EXPECT_EQ(values(run_op_tensor(OpKind::kNeTensor, {{"self", nan}, {"other", nan}})), (std::vector<double>{1, 0}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kLeTensor, {{"self", nan}, {"other", nan}})), (std::vector<double>{0, 1}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kGtTensor, {{"self", x}, {"other", I(2)}})),
            (std::vector<double>{0, 0, 1, 1}));
  // float16 compares after rounding the scalar to float16 (0.1 -> 0.0999755859375).
  Tensor h = make_tensor(DType::Float16, {1}, {0.1});
  EXPECT_EQ(run_op_tensor(OpKind::kEqScalar, {{"self", h}, {"other", F(0.1)}}).value_at(0), 1);
}

TEST(ElementwiseKernels, LogicalAndBitwise) {
  Tensor x = make_tensor(DType::Float32, {3}, {0, 2, std::nan("")});
  EXPECT_EQ(values(run_op_tensor(OpKind::kLogicalNot, {{"self", x}})), (std::vector<double>{1, 0, 0}));
  Tensor m = make_tensor(DType::Int64, {2, 1}, {0, 5});
  Tensor la = run_op_tensor(OpKind::kLogicalAnd, {{"self", x}, {"other", m}});
  EXPECT_EQ(la.dtype(), DType::Bool);
  EXPECT_EQ(values(la), (std::vector<double>{0, 0, 0, 0, 1, 1}));
  Tensor i = make_tensor(DType::Int32, {3}, {0, 5, -1});
  EXPECT_EQ(values(run_op_tensor(OpKind::kBitwiseNot, {{"self", i}})), (std::vector<double>{-1, -6, 0}));
  Tensor bo = make_tensor(DType::Bool, {2}, {0, 1});
  EXPECT_EQ(values(run_op_tensor(OpKind::kBitwiseNot, {{"self", bo}})), (std::vector<double>{1, 0}));
  expect_error(OpKind::kBitwiseNot, {{"self", x}}, "bitwise_not");
  Tensor j = make_tensor(DType::Int32, {3}, {6, 3, 12});
  EXPECT_EQ(values(run_op_tensor(OpKind::kBitwiseAndTensor, {{"self", j}, {"other", I(10)}})),
            (std::vector<double>{2, 2, 8}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kBitwiseOrTensor, {{"self", j}, {"other", i}})),
            (std::vector<double>{6, 7, -1}));
  Tensor b2 = make_tensor(DType::Bool, {2}, {1, 1});
  Tensor bor = run_op_tensor(OpKind::kBitwiseAndTensor, {{"self", bo}, {"other", b2}});
  EXPECT_EQ(bor.dtype(), DType::Bool);
  EXPECT_EQ(values(bor), (std::vector<double>{0, 1}));
  expect_error(OpKind::kBitwiseOrTensor, {{"self", x}, {"other", x}}, "bitwise_or");
}

TEST(ElementwiseKernels, WhereBroadcastsAndPromotes) {
  Tensor c = make_tensor(DType::Bool, {2, 1}, {1, 0});
  Tensor x = make_tensor(DType::Int64, {3}, {1, 2, 3});
  Tensor out = run_op_tensor(OpKind::kWhere, {{"condition", c}, {"self", x}, {"other", F(0.5)}});
  EXPECT_EQ(out.dtype(), DType::Float32);
  ASSERT_EQ(out.sizes(), (Shape{2, 3}));
  EXPECT_EQ(values(out), (std::vector<double>{1, 2, 3, 0.5, 0.5, 0.5}));
  Tensor y = make_tensor(DType::Float64, {2, 3}, {9, 9, 9, 9, 9, 9});
  Tensor o2 = run_op_tensor(OpKind::kWhere, {{"condition", c}, {"self", x}, {"other", y}});
  EXPECT_EQ(o2.dtype(), DType::Float64);
  EXPECT_EQ(values(o2), (std::vector<double>{1, 2, 3, 9, 9, 9}));
  expect_error(OpKind::kWhere, {{"condition", x}, {"self", x}, {"other", y}}, "bool");
  // Deprecated uint8 conditions still work.
  Tensor cu = make_tensor(DType::UInt8, {2}, {0, 3});
  EXPECT_EQ(values(run_op_tensor(OpKind::kWhere, {{"condition", cu}, {"self", F(1.0)}, {"other", F(0.0)}})),
            (std::vector<double>{0, 1}));
}

TEST(ElementwiseKernels, MaskedFill) {
  Tensor x = make_tensor(DType::Float32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor m = make_tensor(DType::Bool, {3}, {1, 0, 1});
  Tensor a = run_op_tensor(OpKind::kMaskedFillScalar, {{"self", x}, {"mask", m}, {"value", F(-1.5)}});
  EXPECT_EQ(values(a), (std::vector<double>{-1.5, 2, -1.5, -1.5, 5, -1.5}));
  Tensor xi = make_tensor(DType::Int32, {3}, {1, 2, 3});
  Tensor b =
      run_op_tensor(OpKind::kMaskedFillTensor, {{"self", xi}, {"mask", m}, {"value", Tensor::scalar(DType::Int64, 7)}});
  EXPECT_EQ(b.dtype(), DType::Int32);
  EXPECT_EQ(values(b), (std::vector<double>{7, 2, 7}));
  // Out-of-place masked_fill broadcasts self against the mask.
  Tensor mm = make_tensor(DType::Bool, {2, 1}, {0, 1});
  Tensor c = run_op_tensor(OpKind::kMaskedFillScalar, {{"self", xi}, {"mask", mm}, {"value", I(0)}});
  ASSERT_EQ(c.sizes(), (Shape{2, 3}));
  EXPECT_EQ(values(c), (std::vector<double>{1, 2, 3, 0, 0, 0}));
  expect_error(OpKind::kMaskedFillTensor, {{"self", xi}, {"mask", m}, {"value", make_tensor(DType::Int32, {1}, {1})}},
               "0-dimensional");
  expect_error(OpKind::kMaskedFillScalar, {{"self", xi}, {"mask", xi}, {"value", I(0)}}, "bool");
  Tensor u8 = make_tensor(DType::UInt8, {3}, {1, 2, 3});
  expect_error(OpKind::kMaskedFillScalar, {{"self", u8}, {"mask", m}, {"value", F(-1.5)}}, "overflow");
}

TEST(ElementwiseKernels, FloatUnaryOps) {
  const std::vector<double> v = {0.25, 1, 2.5};
  Tensor x = make_tensor(DType::Float32, {3}, v);
  struct Case {
    OpKind op;
    double (*ref)(double);
  };
  const Case cases[] = {
      {OpKind::kExp, [](double t) { return std::exp(t); }},
      {OpKind::kLog, [](double t) { return std::log(t); }},
      {OpKind::kSqrt, [](double t) { return std::sqrt(t); }},
      {OpKind::kRsqrt, [](double t) { return 1 / std::sqrt(t); }},
      {OpKind::kReciprocal, [](double t) { return 1 / t; }},
      {OpKind::kSin, [](double t) { return std::sin(t); }},
      {OpKind::kCos, [](double t) { return std::cos(t); }},
      {OpKind::kTanh, [](double t) { return std::tanh(t); }},
      {OpKind::kErf, [](double t) { return std::erf(t); }},
      {OpKind::kSigmoid, [](double t) { return 1 / (1 + std::exp(-t)); }},
      {OpKind::kSilu, [](double t) { return t / (1 + std::exp(-t)); }},
      {OpKind::kNeg, [](double t) { return -t; }},
      {OpKind::kAbs, [](double t) { return std::abs(t); }},
  };
  for (const Case& c : cases) {
    Tensor out = run_op_tensor(c.op, {{"self", x}});
    EXPECT_EQ(out.dtype(), DType::Float32);
    for (int i = 0; i < 3; ++i)
      EXPECT_NEAR(out.value_at(i), c.ref(v[i]), 2e-7 * std::max(1.0, std::abs(c.ref(v[i]))))
          << ir::op_target(c.op) << " at " << v[i];
  }
  Tensor d = make_tensor(DType::Float64, {1}, {0.3});
  EXPECT_EQ(run_op_tensor(OpKind::kExp, {{"self", d}}).value_at(0), std::exp(0.3));
}

TEST(ElementwiseKernels, IntegerInputsOfMathOpsBecomeFloat32) {
  Tensor xi = make_tensor(DType::Int64, {2}, {1, 4});
  Tensor s = run_op_tensor(OpKind::kSqrt, {{"self", xi}});
  EXPECT_EQ(s.dtype(), DType::Float32);
  EXPECT_EQ(values(s), (std::vector<double>{1, 2}));
  Tensor b = make_tensor(DType::Bool, {1}, {1});
  EXPECT_EQ(run_op_tensor(OpKind::kSigmoid, {{"self", b}}).dtype(), DType::Float32);
  expect_error(OpKind::kGelu, {{"self", xi}}, "floating");
  Tensor n = run_op_tensor(OpKind::kNeg, {{"self", xi}});
  EXPECT_EQ(n.dtype(), DType::Int64);
  EXPECT_EQ(values(n), (std::vector<double>{-1, -4}));
  expect_error(OpKind::kNeg, {{"self", b}}, "bool");
  Tensor ai = make_tensor(DType::Int8, {2}, {-128, -5});
  EXPECT_EQ(values(run_op_tensor(OpKind::kAbs, {{"self", ai}})), (std::vector<double>{-128, 5}));
}

TEST(ElementwiseKernels, Activations) {
  const std::vector<double> v = {-4, -1.5, -0.2, 0, 0.7, 2, 5};
  Tensor x = make_tensor(DType::Float64, {7}, v);
  Tensor g = run_op_tensor(OpKind::kGelu, {{"self", x}});
  Tensor gt = run_op_tensor(OpKind::kGelu, {{"self", x}, {"approximate", S("tanh")}});
  Tensor hs = run_op_tensor(OpKind::kHardswish, {{"self", x}});
  Tensor hg = run_op_tensor(OpKind::kHardsigmoid, {{"self", x}});
  Tensor ht = run_op_tensor(OpKind::kHardtanh, {{"self", x}});
  Tensor ht2 = run_op_tensor(OpKind::kHardtanh, {{"self", x}, {"min_val", F(0.0)}, {"max_val", F(6.0)}});
  Tensor re = run_op_tensor(OpKind::kRelu, {{"self", x}});
  for (size_t i = 0; i < v.size(); ++i) {
    const double t = v[i];
    EXPECT_NEAR(g.value_at(i), 0.5 * t * (1 + std::erf(t / std::sqrt(2.0))), 1e-12);
    EXPECT_NEAR(gt.value_at(i), 0.5 * t * (1 + std::tanh(std::sqrt(2 / M_PI) * (t + 0.044715 * t * t * t))), 1e-12);
    const double relu6 = std::min(std::max(t + 3, 0.0), 6.0);
    EXPECT_NEAR(hs.value_at(i), t * relu6 / 6, 1e-12);
    EXPECT_NEAR(hg.value_at(i), relu6 / 6, 1e-12);
    EXPECT_EQ(ht.value_at(i), t < -1 ? -1 : (t > 1 ? 1 : t));
    EXPECT_EQ(ht2.value_at(i), t < 0 ? 0 : (t > 6 ? 6 : t));
    EXPECT_EQ(re.value_at(i), t > 0 ? t : 0);
  }
  expect_error(OpKind::kGelu, {{"self", x}, {"approximate", S("erf")}}, "approximate");
  Tensor nan = make_tensor(DType::Float32, {1}, {std::nan("")});
  EXPECT_TRUE(std::isnan(run_op_tensor(OpKind::kRelu, {{"self", nan}}).value_at(0)));
  Tensor h = make_tensor(DType::Float16, {2}, {-1, 1});
  Tensor sh = run_op_tensor(OpKind::kSilu, {{"self", h}});
  EXPECT_EQ(sh.dtype(), DType::Float16);
  EXPECT_EQ(sh.value_at(1), static_cast<float>(Half(1.0f / (1.0f + std::exp(-1.0f)))));
}

TEST(ElementwiseKernels, Clamp) {
  Tensor x = make_tensor(DType::Float32, {5}, {-3, -1, 0, 2, std::nan("")});
  Tensor both = run_op_tensor(OpKind::kClamp, {{"self", x}, {"min", F(-1.5)}, {"max", I(1)}});
  EXPECT_EQ(both.value_at(0), -1.5);
  EXPECT_EQ(both.value_at(1), -1);
  EXPECT_EQ(both.value_at(3), 1);
  EXPECT_TRUE(std::isnan(both.value_at(4)));
  Tensor hi = run_op_tensor(OpKind::kClamp, {{"self", x}, {"max", F(0.0)}});
  EXPECT_EQ(hi.value_at(3), 0);
  EXPECT_EQ(hi.value_at(0), -3);
  // min > max gives max everywhere, as in PyTorch.
  Tensor inv = run_op_tensor(OpKind::kClamp, {{"self", x}, {"min", I(2)}, {"max", I(1)}});
  EXPECT_EQ(inv.value_at(0), 1);
  expect_error(OpKind::kClamp, {{"self", x}}, "min");
  Tensor xi = make_tensor(DType::Int64, {3}, {-5, 0, 5});
  Tensor ci = run_op_tensor(OpKind::kClamp, {{"self", xi}, {"min", I(-1)}, {"max", I(3)}});
  EXPECT_EQ(ci.dtype(), DType::Int64);
  EXPECT_EQ(values(ci), (std::vector<double>{-1, 0, 3}));
  // Integer bounds compare by value: -1 does not wrap to 255 for uint8.
  Tensor u = make_tensor(DType::UInt8, {3}, {0, 1, 200});
  EXPECT_EQ(values(run_op_tensor(OpKind::kClamp, {{"self", u}, {"min", I(-1)}, {"max", I(2)}})),
            (std::vector<double>{0, 1, 2}));
  expect_error(OpKind::kClamp, {{"self", u}, {"min", I(300)}}, "overflow");
  expect_error(OpKind::kClamp, {{"self", make_tensor(DType::Bool, {1}, {1})}, {"min", B(false)}}, "bool");
  // A NaN bound gives NaN.
  EXPECT_TRUE(std::isnan(run_op_tensor(OpKind::kClamp, {{"self", x}, {"min", F(std::nan(""))}}).value_at(0)));
  Tensor cf = run_op_tensor(OpKind::kClampMin, {{"self", xi}, {"min", F(0.5)}});
  EXPECT_EQ(cf.dtype(), DType::Float32);
  EXPECT_EQ(values(cf), (std::vector<double>{0.5, 0.5, 5}));
}

// Rounding keeps the dtype (halves to even for round), integers pass through;
// sign is 0 for zero and NaN; log1p and expm1 are the precise forms.
TEST(ElementwiseKernels, RoundingSignLog1pExpm1) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = make_tensor(DType::Float32, {8}, {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 1.25, -0.0});
  EXPECT_EQ(values(run_op_tensor(OpKind::kFloor, {{"self", x}})), (std::vector<double>{-3, -2, -1, 0, 1, 2, 1, 0}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kCeil, {{"self", x}})), (std::vector<double>{-2, -1, 0, 1, 2, 3, 2, 0}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kTrunc, {{"self", x}})), (std::vector<double>{-2, -1, 0, 0, 1, 2, 1, 0}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kRound, {{"self", x}})), (std::vector<double>{-2, -2, 0, 0, 2, 2, 1, 0}));
  Tensor s = run_op_tensor(OpKind::kSign, {{"self", make_tensor(DType::Float32, {4}, {-3, 0, 7, nan})}});
  EXPECT_EQ(values(s), (std::vector<double>{-1, 0, 1, 0}));
  Tensor i = make_tensor(DType::Int64, {3}, {-4, 0, 9});
  Tensor fi = run_op_tensor(OpKind::kFloor, {{"self", i}});
  EXPECT_EQ(fi.dtype(), DType::Int64);
  EXPECT_EQ(values(fi), (std::vector<double>{-4, 0, 9}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kSign, {{"self", i}})), (std::vector<double>{-1, 0, 1}));
  Tensor tiny = make_tensor(DType::Float32, {2}, {1e-10, -1e-10});
  Tensor l = run_op_tensor(OpKind::kLog1p, {{"self", tiny}});
  Tensor e = run_op_tensor(OpKind::kExpm1, {{"self", tiny}});
  for (int k = 0; k < 2; ++k) {
    // log(1 + x) and exp(x) - 1 would give 0 here in float32.
    EXPECT_FLOAT_EQ(static_cast<float>(l.value_at(k)), std::log1p(static_cast<float>(tiny.value_at(k))));
    EXPECT_FLOAT_EQ(static_cast<float>(e.value_at(k)), std::expm1(static_cast<float>(tiny.value_at(k))));
    EXPECT_NE(l.value_at(k), 0.0);
  }
  EXPECT_EQ(run_op_tensor(OpKind::kLog1p, {{"self", i}}).dtype(), DType::Float32);  // integers promote
  expect_error(OpKind::kFloor, {{"self", make_tensor(DType::Bool, {1}, {1})}}, "bool");
}

// minimum / maximum broadcast and promote like arithmetic, and a NaN on
// either side gives NaN; isnan / isinf give bools, never true for integers.
TEST(ElementwiseKernels, MinimumMaximumIsnanIsinf) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  Tensor x = make_tensor(DType::Float32, {2, 3}, {1, 5, nan, -2, 0, 3});
  Tensor y = make_tensor(DType::Float32, {3}, {2, 4, 1});
  Tensor lo = run_op_tensor(OpKind::kMinimum, {{"self", x}, {"other", y}});
  Tensor hi = run_op_tensor(OpKind::kMaximum, {{"self", y}, {"other", x}});
  ASSERT_EQ(lo.sizes(), (Shape{2, 3}));
  const std::vector<double> want_lo = {1, 4, nan, -2, 0, 1}, want_hi = {2, 5, nan, 2, 4, 3};
  for (int k = 0; k < 6; ++k) {
    if (std::isnan(want_lo[k])) {
      EXPECT_TRUE(std::isnan(lo.value_at(k)) && std::isnan(hi.value_at(k))) << k;
      continue;
    }
    EXPECT_EQ(lo.value_at(k), want_lo[k]) << k;
    EXPECT_EQ(hi.value_at(k), want_hi[k]) << k;
  }
  Tensor xi = make_tensor(DType::Int64, {3}, {-7, 3, 9});
  Tensor mixed =
      run_op_tensor(OpKind::kMaximum, {{"self", xi}, {"other", make_tensor(DType::Float32, {3}, {0.5, 0.5, 10})}});
  EXPECT_EQ(mixed.dtype(), DType::Float32);
  EXPECT_EQ(values(mixed), (std::vector<double>{0.5, 3, 10}));
  Tensor ints = run_op_tensor(OpKind::kMinimum, {{"self", xi}, {"other", make_tensor(DType::Int64, {1}, {0})}});
  EXPECT_EQ(ints.dtype(), DType::Int64);
  EXPECT_EQ(values(ints), (std::vector<double>{-7, 0, 0}));
  Tensor v = make_tensor(DType::Float32, {4}, {nan, inf, -inf, 1});
  EXPECT_EQ(values(run_op_tensor(OpKind::kIsnan, {{"self", v}})), (std::vector<double>{1, 0, 0, 0}));
  Tensor isinf = run_op_tensor(OpKind::kIsinf, {{"self", v}});
  EXPECT_EQ(isinf.dtype(), DType::Bool);
  EXPECT_EQ(values(isinf), (std::vector<double>{0, 1, 1, 0}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kIsnan, {{"self", xi}})), (std::vector<double>{0, 0, 0}));
}

// clamp with tensor bounds broadcasts and promotes the three operands; a NaN
// value or bound gives NaN; clamp_max with a number; bools are refused.
TEST(ElementwiseKernels, ClampWithTensorBounds) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = make_tensor(DType::Float32, {2, 3}, {-5, 0.5, 9, nan, 2, -1});
  Tensor lo = make_tensor(DType::Float32, {3}, {-1, 1, 0});
  Tensor hi = make_tensor(DType::Float32, {2, 1}, {2, 1.5});
  Tensor both = run_op_tensor(OpKind::kClampTensor, {{"self", x}, {"min", lo}, {"max", hi}});
  const std::vector<double> want = {-1, 1, 2, nan, 1.5, 0};
  ASSERT_EQ(both.sizes(), (Shape{2, 3}));
  for (int k = 0; k < 6; ++k) {
    if (std::isnan(want[k]))
      EXPECT_TRUE(std::isnan(both.value_at(k))) << k;
    else
      EXPECT_EQ(both.value_at(k), want[k]) << k;
  }
  Tensor only_max = run_op_tensor(OpKind::kClampTensor, {{"self", x}, {"min", None()}, {"max", hi}});
  EXPECT_EQ(only_max.value_at(0), -5);
  EXPECT_EQ(only_max.value_at(2), 2);
  Tensor nan_bound = make_tensor(DType::Float32, {1}, {nan});
  EXPECT_TRUE(std::isnan(run_op_tensor(OpKind::kClampMinTensor, {{"self", x}, {"min", nan_bound}}).value_at(0)));
  Tensor xi = make_tensor(DType::Int64, {3}, {-7, 3, 9});
  Tensor mi = run_op_tensor(OpKind::kClampMinTensor, {{"self", xi}, {"min", make_tensor(DType::Int64, {1}, {0})}});
  EXPECT_EQ(mi.dtype(), DType::Int64);
  EXPECT_EQ(values(mi), (std::vector<double>{0, 3, 9}));
  Tensor mx = run_op_tensor(OpKind::kClampMaxTensor, {{"self", xi}, {"max", make_tensor(DType::Float32, {1}, {2.5})}});
  EXPECT_EQ(mx.dtype(), DType::Float32);
  EXPECT_EQ(values(mx), (std::vector<double>{-7, 2.5, 2.5}));
  Tensor cm = run_op_tensor(OpKind::kClampMax, {{"self", xi}, {"max", I(4)}});
  EXPECT_EQ(cm.dtype(), DType::Int64);
  EXPECT_EQ(values(cm), (std::vector<double>{-7, 3, 4}));
  expect_error(OpKind::kClampTensor, {{"self", x}, {"min", None()}, {"max", None()}}, "at least one");
  Tensor b = make_tensor(DType::Bool, {2}, {1, 0});
  expect_error(OpKind::kClampMinTensor, {{"self", b}, {"min", b}}, "bool");
}

// fmod keeps self's sign (C's fmod, truncated division); remainder takes
// other's (Python's %, floored division); integers by zero are an error.
TEST(ElementwiseKernels, FmodAndRemainder) {
  Tensor x = make_tensor(DType::Float64, {4}, {5.5, -5.5, 5.5, -5.5});
  Tensor y = make_tensor(DType::Float64, {4}, {2, 2, -2, -2});
  EXPECT_EQ(values(run_op_tensor(OpKind::kFmodTensor, {{"self", x}, {"other", y}})),
            (std::vector<double>{std::fmod(5.5, 2), std::fmod(-5.5, 2), std::fmod(5.5, -2), std::fmod(-5.5, -2)}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kRemainderTensor, {{"self", x}, {"other", y}})),
            (std::vector<double>{1.5, 0.5, -0.5, -1.5}));
  Tensor xi = make_tensor(DType::Int32, {5}, {7, -7, 7, -7, -2147483648.0});
  Tensor yi = make_tensor(DType::Int32, {5}, {3, 3, -3, -3, -1});
  EXPECT_EQ(values(run_op_tensor(OpKind::kFmodTensor, {{"self", xi}, {"other", yi}})),
            (std::vector<double>{1, -1, 1, -1, 0}));
  Tensor r = run_op_tensor(OpKind::kRemainderTensor, {{"self", xi}, {"other", yi}});
  EXPECT_EQ(r.dtype(), DType::Int32);
  EXPECT_EQ(values(r), (std::vector<double>{1, 2, -2, -1, 0}));
  Tensor rs = run_op_tensor(OpKind::kRemainderScalar, {{"self", xi}, {"other", F(2.5)}});
  EXPECT_EQ(rs.dtype(), DType::Float32);                      // an int tensor with a float number promotes
  EXPECT_FLOAT_EQ(static_cast<float>(rs.value_at(1)), 0.5f);  // -7 - floor(-7 / 2.5) * 2.5
  EXPECT_EQ(values(run_op_tensor(OpKind::kFmodScalar, {{"self", xi}, {"other", I(4)}}))[1], -3);
  expect_error(OpKind::kRemainderScalar, {{"self", xi}, {"other", I(0)}}, "division by zero");
  Tensor b = make_tensor(DType::Bool, {1}, {1});
  expect_error(OpKind::kFmodTensor, {{"self", b}, {"other", b}}, "bool");
}

// leaky_relu and elu against their formulas, in float32 and float16; integers refused.
TEST(ElementwiseKernels, LeakyReluAndElu) {
  Tensor x = make_tensor(DType::Float32, {4}, {-2, -0.5, 0, 3});
  EXPECT_EQ(values(run_op_tensor(OpKind::kLeakyRelu, {{"self", x}, {"negative_slope", F(0.25)}})),
            (std::vector<double>{-0.5, -0.125, 0, 3}));
  EXPECT_FLOAT_EQ(static_cast<float>(run_op_tensor(OpKind::kLeakyRelu, {{"self", x}}).value_at(0)), -0.02f);
  Tensor e = run_op_tensor(OpKind::kElu, {{"self", x}, {"alpha", F(1.5)}, {"scale", F(2)}, {"input_scale", F(0.5)}});
  for (int k = 0; k < 4; ++k) {
    const float v = static_cast<float>(x.value_at(k));
    const float want = v > 0 ? 2.0f * v : 2.0f * 1.5f * std::expm1(v * 0.5f);
    EXPECT_FLOAT_EQ(static_cast<float>(e.value_at(k)), want) << k;
  }
  Tensor h = run_op_tensor(OpKind::kElu, {{"self", make_tensor(DType::Float16, {1}, {-1})}});
  EXPECT_EQ(h.dtype(), DType::Float16);
  EXPECT_NEAR(h.value_at(0), std::expm1(-1.0), 1e-3);
  expect_error(OpKind::kLeakyRelu, {{"self", make_tensor(DType::Int64, {1}, {1})}}, "floating");
}

// Unary floating ops at points whose values are known in closed form;
// integers promote to float32.
TEST(ElementwiseKernels, TrigonometryLogsAndGammaAtKnownPoints) {
  struct Case {
    OpKind op;
    double x, want;
  };
  const double pi = std::numbers::pi;
  const std::vector<Case> cases = {
      {OpKind::kAcos, 0.5, pi / 3},          {OpKind::kAsin, 0.5, pi / 6},
      {OpKind::kAtan, 1.0, pi / 4},          {OpKind::kTan, pi / 4, 1.0},
      {OpKind::kSinh, std::log(2.0), 0.75},  {OpKind::kCosh, std::log(2.0), 1.25},
      {OpKind::kAcosh, 1.25, std::log(2.0)}, {OpKind::kAsinh, 0.75, std::log(2.0)},
      {OpKind::kAtanh, 0.6, std::log(2.0)},  {OpKind::kErfc, 0.0, 1.0},
      {OpKind::kExp2, 10.0, 1024.0},         {OpKind::kLog2, 1024.0, 10.0},
      {OpKind::kLog10, 1000.0, 3.0},         {OpKind::kLgamma, 5.0, std::log(24.0)},
  };
  for (const Case& c : cases) {
    for (DType dt : {DType::Float32, DType::Float64}) {
      Tensor out = run_op_tensor(c.op, {{"self", make_tensor(dt, {1}, {c.x})}});
      EXPECT_EQ(out.dtype(), dt) << ir::op_target(c.op);
      EXPECT_NEAR(out.value_at(0), c.want, dt == DType::Float32 ? 2e-6 * std::max(1.0, std::fabs(c.want)) : 1e-12)
          << ir::op_target(c.op) << "(" << c.x << ")";
    }
  }
  Tensor ints = run_op_tensor(OpKind::kLog2, {{"self", make_tensor(DType::Int64, {3}, {1, 2, 8})}});
  EXPECT_EQ(ints.dtype(), DType::Float32);
  EXPECT_EQ(values(ints), (std::vector<double>{0, 1, 3}));
  EXPECT_TRUE(
      std::isnan(run_op_tensor(OpKind::kAcos, {{"self", make_tensor(DType::Float32, {1}, {2.0})}}).value_at(0)));
}

TEST(ElementwiseKernels, BinaryFloatingOpsAtKnownPoints) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  auto run = [](OpKind op, std::vector<double> x, std::vector<double> y, DType dt = DType::Float32) {
    const int64_t n = static_cast<int64_t>(x.size());
    return run_op_tensor(op, {{"self", make_tensor(dt, {n}, x)}, {"other", make_tensor(dt, {n}, y)}});
  };
  Tensor a = run(OpKind::kAtan2, {1, 1, -1}, {1, -1, 0});
  EXPECT_NEAR(a.value_at(0), std::numbers::pi / 4, 1e-6);
  EXPECT_NEAR(a.value_at(1), 3 * std::numbers::pi / 4, 1e-6);
  EXPECT_NEAR(a.value_at(2), -std::numbers::pi / 2, 1e-6);
  EXPECT_EQ(values(run(OpKind::kHypot, {3, 5}, {4, 12})), (std::vector<double>{5, 13}));
  Tensor cs = run(OpKind::kCopysignTensor, {2, -3, 4}, {-0.0, 1, -1});
  EXPECT_EQ(values(cs), (std::vector<double>{-2, 3, -4}));
  // Integers promote to float32: copysign of int64 is float32.
  Tensor ci = run(OpKind::kCopysignTensor, {2, 3}, {-1, 1}, DType::Int64);
  EXPECT_EQ(ci.dtype(), DType::Float32);
  EXPECT_EQ(values(ci), (std::vector<double>{-2, 3}));
  Tensor na = run(OpKind::kNextafter, {1, 1}, {2, 0}, DType::Float64);
  EXPECT_EQ(na.value_at(0), 1 + std::numeric_limits<double>::epsilon());
  EXPECT_EQ(na.value_at(1), 1 - std::numeric_limits<double>::epsilon() / 2);
  Tensor le = run(OpKind::kLogaddexp, {0, inf, -inf, 1000, nan}, {0, inf, -inf, 0, 1}, DType::Float64);
  EXPECT_NEAR(le.value_at(0), std::log(2.0), 1e-15);
  EXPECT_EQ(le.value_at(1), inf);
  EXPECT_EQ(le.value_at(2), -inf);
  EXPECT_EQ(le.value_at(3), 1000);  // no overflow of exp(1000)
  EXPECT_TRUE(std::isnan(le.value_at(4)));
  Tensor l2 = run(OpKind::kLogaddexp2, {1, 3}, {1, 3}, DType::Float64);
  EXPECT_NEAR(l2.value_at(0), 2, 1e-15);
  EXPECT_NEAR(l2.value_at(1), 4, 1e-15);
  Tensor fx = run(OpKind::kFmax, {nan, 1, nan}, {2, nan, nan});
  EXPECT_EQ(fx.value_at(0), 2);
  EXPECT_EQ(fx.value_at(1), 1);
  EXPECT_TRUE(std::isnan(fx.value_at(2)));
  EXPECT_EQ(values(run(OpKind::kFmin, {1, 5}, {3, 2}, DType::Int64)), (std::vector<double>{1, 2}));
  Tensor h = run_op_tensor(OpKind::kHeaviside, {{"self", make_tensor(DType::Float32, {4}, {-1, 0, 2, -0.0})},
                                                {"values", make_tensor(DType::Float32, {1}, {0.5})}});
  EXPECT_EQ(values(h), (std::vector<double>{0, 0.5, 1, 0.5}));
  Tensor lor = run_op_tensor(OpKind::kLogicalOr, {{"self", make_tensor(DType::Float32, {3}, {0, 2, 0})},
                                                  {"other", make_tensor(DType::Int64, {3}, {0, 0, 5})}});
  EXPECT_EQ(lor.dtype(), DType::Bool);
  EXPECT_EQ(values(lor), (std::vector<double>{0, 1, 1}));
  Tensor lxor = run_op_tensor(OpKind::kLogicalXor, {{"self", make_tensor(DType::Bool, {4}, {0, 1, 0, 1})},
                                                    {"other", make_tensor(DType::Bool, {4}, {0, 0, 1, 1})}});
  EXPECT_EQ(values(lxor), (std::vector<double>{0, 1, 1, 0}));
}

// round with decimals (halves to even at the scaled value) and signbit.
TEST(ElementwiseKernels, RoundDecimalsAndSignbit) {
  Tensor x = make_tensor(DType::Float64, {4}, {1.2345, -2.5, 1250, 0.125});
  EXPECT_EQ(values(run_op_tensor(OpKind::kRoundDecimals, {{"self", x}, {"decimals", I(2)}})),
            (std::vector<double>{1.23, -2.5, 1250, 0.12}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kRoundDecimals, {{"self", x}, {"decimals", I(-2)}})),
            (std::vector<double>{0, -0.0, 1200, 0}));
  Tensor f =
      make_tensor(DType::Float32, {5},
                  {-0.0, 0.0, -3, std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::quiet_NaN()});
  Tensor sb = run_op_tensor(OpKind::kSignbit, {{"self", f}});
  EXPECT_EQ(sb.dtype(), DType::Bool);
  EXPECT_EQ(values(sb), (std::vector<double>{1, 0, 1, 0, 1}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kSignbit, {{"self", make_tensor(DType::Int64, {3}, {-1, 0, 5})}})),
            (std::vector<double>{1, 0, 0}));
}

// x = mantissa * 2^exponent, |mantissa| in [0.5, 1): by hand.
TEST(ElementwiseKernels, FrexpSplitsIntoMantissaAndInt32Exponent) {
  Tensor x = make_tensor(DType::Float32, {5}, {8, -3, 0.375, 0, 1e-40});
  auto r = run_op(OpKind::kFrexpTensor, {{"self", x}}, 2);
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ(output(*r, 1).dtype(), DType::Int32);
  std::vector<double> m = values(output(*r, 0)), e = values(output(*r, 1));
  EXPECT_EQ((std::vector<double>(m.begin(), m.begin() + 4)), (std::vector<double>{0.5, -0.75, 0.75, 0}));
  EXPECT_EQ((std::vector<double>(e.begin(), e.begin() + 4)), (std::vector<double>{4, 2, -1, 0}));
  EXPECT_DOUBLE_EQ(std::ldexp(m[4], static_cast<int>(e[4])), static_cast<double>(1e-40f));  // a subnormal
  EXPECT_GE(std::abs(m[4]), 0.5);
  Tensor h = make_tensor(DType::Float16, {2}, {96, -0.0625});
  auto hr = run_op(OpKind::kFrexpTensor, {{"self", h}}, 2);
  ASSERT_TRUE(hr.has_value());
  EXPECT_EQ(output(*hr, 0).dtype(), DType::Float16);
  EXPECT_EQ(values(output(*hr, 0)), (std::vector<double>{0.75, -0.5}));
  EXPECT_EQ(values(output(*hr, 1)), (std::vector<double>{7, -3}));
  expect_error(OpKind::kFrexpTensor, {{"self", make_tensor(DType::Int64, {1}, {4})}}, "floating");
}

}  // namespace
}  // namespace kiln::cpu
