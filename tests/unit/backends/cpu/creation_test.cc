#include <gtest/gtest.h>

#include <cmath>

#include "backends/cpu/philox.h"
#include "unit/backends/cpu/op_test_helpers.h"

namespace kiln::cpu {
namespace {

using ir::OpKind;
using namespace testing;

TEST(CreationKernels, ArangeInfersDtype) {
  Tensor a = run_op_tensor(OpKind::kArange, {{"end", I(5)}});
  EXPECT_EQ(a.dtype(), DType::Int64);
  EXPECT_EQ(values(a), (std::vector<double>{0, 1, 2, 3, 4}));
  Tensor f = run_op_tensor(OpKind::kArange, {{"end", F(2.5)}});
  EXPECT_EQ(f.dtype(), DType::Float32);
  EXPECT_EQ(values(f), (std::vector<double>{0, 1, 2}));
  Tensor s = run_op_tensor(OpKind::kArangeStart, {{"start", I(2)}, {"end", I(5)}});
  EXPECT_EQ(values(s), (std::vector<double>{2, 3, 4}));
  Tensor d = run_op_tensor(OpKind::kArange, {{"end", I(3)}, {"dtype", D(DType::Float16)}});
  EXPECT_EQ(d.dtype(), DType::Float16);
  EXPECT_EQ(values(d), (std::vector<double>{0, 1, 2}));
}

TEST(CreationKernels, ArangeStartStep) {
  Tensor a = run_op_tensor(OpKind::kArangeStartStep, {{"start", I(10)}, {"end", I(0)}, {"step", I(-3)}});
  EXPECT_EQ(values(a), (std::vector<double>{10, 7, 4, 1}));
  Tensor b = run_op_tensor(OpKind::kArangeStartStep, {{"start", F(0.0)}, {"end", F(1.0)}, {"step", F(0.25)}});
  EXPECT_EQ(b.dtype(), DType::Float32);
  EXPECT_EQ(values(b), (std::vector<double>{0, 0.25, 0.5, 0.75}));
  // Count is ceil((end - start) / step): 0, 0.3, 0.6, 0.9 (0.9 < 1).
  Tensor c = run_op_tensor(OpKind::kArangeStartStep,
                           {{"start", F(0.0)}, {"end", F(1.0)}, {"step", F(0.3)}, {"dtype", D(DType::Float64)}});
  ASSERT_EQ(c.numel(), 4);
  EXPECT_DOUBLE_EQ(c.value_at(3), 0.3 * 3);
  Tensor e = run_op_tensor(OpKind::kArangeStartStep, {{"start", I(3)}, {"end", I(3)}, {"step", I(1)}});
  EXPECT_EQ(e.numel(), 0);
  expect_error(OpKind::kArangeStartStep, {{"start", I(0)}, {"end", I(5)}, {"step", I(0)}}, "nonzero");
  expect_error(OpKind::kArangeStartStep, {{"start", I(0)}, {"end", I(5)}, {"step", I(-1)}}, "step sign");
}

TEST(CreationKernels, FullInfersDtypeFromValue) {
  Tensor i = run_op_tensor(OpKind::kFull, {{"size", Ints({2, 2})}, {"fill_value", I(7)}});
  EXPECT_EQ(i.dtype(), DType::Int64);
  EXPECT_EQ(values(i), (std::vector<double>{7, 7, 7, 7}));
  EXPECT_EQ(run_op_tensor(OpKind::kFull, {{"size", Ints({1})}, {"fill_value", F(1.5)}}).dtype(), DType::Float32);
  EXPECT_EQ(run_op_tensor(OpKind::kFull, {{"size", Ints({1})}, {"fill_value", B(true)}}).dtype(), DType::Bool);
  Tensor h = run_op_tensor(OpKind::kFull, {{"size", Ints({3})}, {"fill_value", F(0.1)}, {"dtype", D(DType::BFloat16)}});
  EXPECT_EQ(h.dtype(), DType::BFloat16);
  EXPECT_EQ(h.value_at(2), static_cast<float>(BFloat16(0.1f)));
  Tensor z = run_op_tensor(OpKind::kFull, {{"size", Ints({})}, {"fill_value", I(3)}});
  EXPECT_EQ(z.dim(), 0);
  EXPECT_EQ(z.item(), 3);
  expect_error(OpKind::kFull, {{"size", Ints({2, -1})}, {"fill_value", I(0)}}, "negative");
}

TEST(CreationKernels, FillValueMustFitTheDtype) {
  // Negative ints wrap into unsigned types; anything converts to bool.
  EXPECT_EQ(
      values(run_op_tensor(OpKind::kFull, {{"size", Ints({1})}, {"fill_value", I(-1)}, {"dtype", D(DType::UInt8)}})),
      (std::vector<double>{255}));
  EXPECT_EQ(
      values(run_op_tensor(OpKind::kFull, {{"size", Ints({1})}, {"fill_value", I(7)}, {"dtype", D(DType::Bool)}})),
      (std::vector<double>{1}));
  expect_error(OpKind::kFull, {{"size", Ints({1})}, {"fill_value", I(300)}, {"dtype", D(DType::UInt8)}}, "overflow");
  expect_error(OpKind::kFull, {{"size", Ints({1})}, {"fill_value", F(-0.5)}, {"dtype", D(DType::UInt8)}}, "overflow");
  expect_error(OpKind::kFull, {{"size", Ints({1})}, {"fill_value", F(std::nan(""))}, {"dtype", D(DType::Int32)}},
               "overflow");
  expect_error(OpKind::kFull, {{"size", Ints({1})}, {"fill_value", F(70000.0)}, {"dtype", D(DType::Float16)}},
               "overflow");
  EXPECT_TRUE(std::isinf(
      run_op_tensor(OpKind::kFull, {{"size", Ints({1})}, {"fill_value", F(INFINITY)}, {"dtype", D(DType::Float16)}})
          .value_at(0)));
  expect_error(OpKind::kFillScalar, {{"self", make_tensor(DType::Int8, {1}, {0})}, {"value", I(128)}}, "overflow");
}

TEST(CreationKernels, ArangeWithFloatArgumentsAndIntegerDtype) {
  // The count comes from the float arguments; start and step truncate.
  Tensor a = run_op_tensor(OpKind::kArangeStartStep,
                           {{"start", F(0.5)}, {"end", F(9.7)}, {"step", F(1.7)}, {"dtype", D(DType::Int64)}});
  EXPECT_EQ(values(a), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  expect_error(OpKind::kArangeStartStep,
               {{"start", F(0.0)}, {"end", F(2.0)}, {"step", F(0.5)}, {"dtype", D(DType::Int32)}}, "truncates to 0");
}

TEST(CreationKernels, FullLikeAndFriends) {
  Tensor x = make_tensor(DType::Int32, {2, 3}, {});
  Tensor fl = run_op_tensor(OpKind::kFullLike, {{"self", x}, {"fill_value", F(2.7)}});
  EXPECT_EQ(fl.dtype(), DType::Int32);
  EXPECT_EQ(fl.sizes(), (Shape{2, 3}));
  EXPECT_EQ(values(fl), (std::vector<double>(6, 2)));  // truncated toward zero
  Tensor ol = run_op_tensor(OpKind::kOnesLike, {{"self", x}, {"dtype", D(DType::Float16)}});
  EXPECT_EQ(ol.dtype(), DType::Float16);
  EXPECT_EQ(values(ol), (std::vector<double>(6, 1)));
  Tensor zl = run_op_tensor(OpKind::kZerosLike, {{"self", transposed(DType::Float32, {1, 2, 3, 4, 5, 6}, 2, 3)}});
  EXPECT_EQ(zl.sizes(), (Shape{2, 3}));
  EXPECT_TRUE(zl.is_contiguous());
  EXPECT_EQ(values(zl), (std::vector<double>(6, 0)));
  Tensor z = run_op_tensor(OpKind::kZeros, {{"size", Ints({2})}});
  EXPECT_EQ(z.dtype(), DType::Float32);
  Tensor o = run_op_tensor(OpKind::kOnes, {{"size", Ints({2, 1})}, {"dtype", D(DType::Int64)}});
  EXPECT_EQ(o.dtype(), DType::Int64);
  EXPECT_EQ(values(o), (std::vector<double>{1, 1}));
  Tensor e = run_op_tensor(OpKind::kEmpty, {{"size", Ints({3})}, {"dtype", D(DType::Bool)}});
  EXPECT_EQ(e.dtype(), DType::Bool);
  EXPECT_EQ(e.sizes(), (Shape{3}));
  Tensor no = run_op_tensor(OpKind::kNewOnes, {{"self", x}, {"size", Ints({4})}});
  EXPECT_EQ(no.dtype(), DType::Int32);
  EXPECT_EQ(values(no), (std::vector<double>(4, 1)));
  Tensor nz = run_op_tensor(OpKind::kNewZeros, {{"self", x}, {"size", Ints({1, 2})}, {"dtype", D(DType::Float64)}});
  EXPECT_EQ(nz.dtype(), DType::Float64);
  EXPECT_EQ(nz.sizes(), (Shape{1, 2}));
}

TEST(CreationKernels, ScalarTensorFillAndZero) {
  Tensor s = run_op_tensor(OpKind::kScalarTensor, {{"s", I(4)}});
  EXPECT_EQ(s.dtype(), DType::Float32);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item(), 4);
  Tensor si = run_op_tensor(OpKind::kScalarTensor, {{"s", F(-2.5)}, {"dtype", D(DType::Int64)}});
  EXPECT_EQ(si.item_int(), -2);
  Tensor x = transposed(DType::Float32, {1, 2, 3, 4}, 2, 2);
  Tensor f = run_op_tensor(OpKind::kFillScalar, {{"self", x}, {"value", F(9.0)}});
  EXPECT_EQ(values(f), (std::vector<double>(4, 9)));
  Tensor z = run_op_tensor(OpKind::kZero, {{"self", x}});
  EXPECT_EQ(values(z), (std::vector<double>(4, 0)));
  expect_error(OpKind::kFillScalar, {{"self", x}}, "value");
}

// The known-answer vectors Random123 publishes for Philox4x32-10.
TEST(CreationKernels, PhiloxGivesTheReferenceImplementationsKnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
}

TEST(CreationKernels, RandIsUniformOnZeroToOneAndNewAtEveryCall) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor a = run_op_tensor(OpKind::kRand, {{"size", Ints({200, 100})}, {"dtype", D(dt)}});
    ASSERT_EQ(a.dtype(), dt);
    ASSERT_EQ(a.numel(), 20000);
    std::vector<double> v = values(a);
    double sum = 0, sq = 0;
    int below_tenth = 0;
    for (double x : v) {
      ASSERT_GE(x, 0.0);
      ASSERT_LT(x, 1.0);
      sum += x;
      sq += x * x;
      below_tenth += x < 0.1;
    }
    const double mean = sum / 20000, var = sq / 20000 - mean * mean;
    EXPECT_NEAR(mean, 0.5, 0.01);         // sd of the mean: 0.002
    EXPECT_NEAR(var, 1.0 / 12.0, 0.004);  // sd of the variance: about 0.0005
    EXPECT_NEAR(below_tenth, 2000, 200);  // sd: 42
    Tensor b = run_op_tensor(OpKind::kRand, {{"size", Ints({200, 100})}, {"dtype", D(dt)}});
    EXPECT_NE(values(b), v) << "a second draw repeats the first";
  }
}

TEST(CreationKernels, RandnIsStandardNormalAndTheLikeFormsTakeTheirOperandsSizeAndDtype) {
  Tensor n = run_op_tensor(OpKind::kRandn, {{"size", Ints({40000})}});
  ASSERT_EQ(n.dtype(), DType::Float32);
  double sum = 0, sq = 0;
  int beyond_two = 0;
  for (double x : values(n)) {
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sq += x * x;
    beyond_two += std::abs(x) > 2;
  }
  EXPECT_NEAR(sum / 40000, 0.0, 0.02);  // sd: 0.005
  EXPECT_NEAR(sq / 40000, 1.0, 0.04);   // sd: 0.007
  EXPECT_NEAR(beyond_two, 1820, 180);   // P(|x| > 2) = 0.0455; sd: 42
  Tensor like = run_op_tensor(OpKind::kRandnLike, {{"self", Tensor::zeros(DType::Float16, Shape({3, 5}))}});
  EXPECT_EQ(like.dtype(), DType::Float16);
  EXPECT_EQ(like.sizes(), Shape({3, 5}));
  Tensor u = run_op_tensor(OpKind::kRandLike,
                           {{"self", Tensor::zeros(DType::Float32, Shape({4}))}, {"dtype", D(DType::Float64)}});
  EXPECT_EQ(u.dtype(), DType::Float64);
  expect_error(OpKind::kRand, {{"size", Ints({2})}, {"dtype", D(DType::Int64)}}, "floating dtype");
}

}  // namespace
}  // namespace kiln::cpu
