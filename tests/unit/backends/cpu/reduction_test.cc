#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "unit/backends/cpu/op_test_helpers.h"
#include "unit/backends/cpu/run_op.h"

namespace kiln::cpu {
namespace {

using ir::OpKind;
using testing::B;
using testing::D;
using testing::expect_close_equal_nan;
using testing::expect_error_names_node;
using testing::I;
using testing::Is;
using testing::make_tensor;
using testing::run_op;
using testing::run_op_tensor;

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// 0, 1, 2, ... scaled so sums are exact but not trivially small.
std::vector<double> ramp(int n, double scale = 0.5, double offset = -3) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(offset + scale * i + 0.125 * ((i * 7) % 5));
  return v;
}

TEST(ReductionKernels, SumLastDimKeepdimNegativeDim) {
  std::vector<double> v = ramp(24);
  Tensor x = make_tensor(DType::Float32, {2, 3, 4}, v);
  Tensor out = run_op_tensor(OpKind::kSumDimIntList, {{"self", x}, {"dim", Is({-1})}, {"keepdim", B(true)}});
  EXPECT_EQ(out.sizes(), (Shape{2, 3, 1}));
  EXPECT_EQ(out.dtype(), DType::Float32);
  std::vector<double> want;
  for (int r = 0; r < 6; ++r) want.push_back(v[r * 4] + v[r * 4 + 1] + v[r * 4 + 2] + v[r * 4 + 3]);
  expect_close_equal_nan(out, want, 1e-6);
}

TEST(ReductionKernels, SumOverTwoDims) {
  std::vector<double> v = ramp(24);
  Tensor x = make_tensor(DType::Float64, {2, 3, 4}, v);
  Tensor out = run_op_tensor(OpKind::kSumDimIntList, {{"self", x}, {"dim", Is({2, 0})}});
  EXPECT_EQ(out.sizes(), (Shape{3}));
  std::vector<double> want(3, 0.0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) want[j] += v[(i * 3 + j) * 4 + k];
  expect_close_equal_nan(out, want, 1e-12);
}

TEST(ReductionKernels, SumEmptyOrNoneDimReducesEverything) {
  Tensor x = make_tensor(DType::Float32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor all = run_op_tensor(OpKind::kSumDimIntList, {{"self", x}, {"dim", Is({})}});
  EXPECT_EQ(all.dim(), 0);
  EXPECT_EQ(all.item(), 21);
  Tensor none =
      run_op_tensor(OpKind::kSumDimIntList, {{"self", x}, {"dim", ir::Arg(ir::NoneArg{})}, {"keepdim", B(true)}});
  EXPECT_EQ(none.sizes(), (Shape{1, 1}));
  EXPECT_EQ(none.item(), 21);
  Tensor dflt = run_op_tensor(OpKind::kSum, {{"self", x}});
  EXPECT_EQ(dflt.dim(), 0);
  EXPECT_EQ(dflt.item(), 21);
}

TEST(ReductionKernels, SumOfIntegersAndBoolsIsInt64) {
  Tensor x = make_tensor(DType::Int32, {2, 2}, {2000000000, 2000000000, -1, 5});
  Tensor out = run_op_tensor(OpKind::kSumDimIntList, {{"self", x}, {"dim", Is({1})}});
  EXPECT_EQ(out.dtype(), DType::Int64);
  EXPECT_EQ(out.int_at(0), 4000000000LL);  // no int32 overflow
  EXPECT_EQ(out.int_at(1), 4);
  Tensor b = make_tensor(DType::Bool, {5}, {1, 0, 1, 1, 0});
  Tensor cnt = run_op_tensor(OpKind::kSum, {{"self", b}});
  EXPECT_EQ(cnt.dtype(), DType::Int64);
  EXPECT_EQ(cnt.item_int(), 3);
  Tensor as_f = run_op_tensor(OpKind::kSum, {{"self", b}, {"dtype", D(DType::Float32)}});
  EXPECT_EQ(as_f.dtype(), DType::Float32);
  EXPECT_EQ(as_f.item(), 3.0);
}

TEST(ReductionKernels, SumHalfAccumulatesWide) {
  // 4096 ones: a float16 accumulator would stop at 2048.
  Tensor x = make_tensor(DType::Float16, {4096}, std::vector<double>(4096, 1.0));
  Tensor out = run_op_tensor(OpKind::kSum, {{"self", x}});
  EXPECT_EQ(out.dtype(), DType::Float16);
  EXPECT_EQ(out.item(), 4096.0);
}

TEST(ReductionKernels, MeanDimAndErrors) {
  std::vector<double> v = ramp(12);
  Tensor x = make_tensor(DType::BFloat16, {3, 4}, v);
  Tensor out = run_op_tensor(OpKind::kMeanDim, {{"self", x}, {"dim", Is({0})}, {"keepdim", B(true)}});
  EXPECT_EQ(out.sizes(), (Shape{1, 4}));
  EXPECT_EQ(out.dtype(), DType::BFloat16);
  std::vector<double> want;
  for (int j = 0; j < 4; ++j) want.push_back((x.value_at(j) + x.value_at(4 + j) + x.value_at(8 + j)) / 3.0);
  expect_close_equal_nan(out, want, 1e-2);
  Tensor m = run_op_tensor(OpKind::kMean, {{"self", make_tensor(DType::Float32, {4}, {1, 2, 3, 4})}});
  EXPECT_DOUBLE_EQ(m.item(), 2.5);
  expect_error_names_node(run_op(OpKind::kMean, {{"self", make_tensor(DType::Int64, {2}, {1, 2})}}));
  Tensor md =
      run_op_tensor(OpKind::kMean, {{"self", make_tensor(DType::Int64, {2}, {1, 2})}, {"dtype", D(DType::Float64)}});
  EXPECT_EQ(md.dtype(), DType::Float64);
  EXPECT_DOUBLE_EQ(md.item(), 1.5);
  expect_error_names_node(run_op(OpKind::kSumDimIntList, {{"self", x}, {"dim", Is({2})}}));
  expect_error_names_node(run_op(OpKind::kSumDimIntList, {{"self", x}, {"dim", Is({1, -1})}}));
}

TEST(ReductionKernels, AmaxAminPropagateNaNAndKeepIntegers) {
  Tensor x = make_tensor(DType::Float32, {2, 3}, {1, 5, -2, 3, kNaN, 0});
  Tensor mx = run_op_tensor(OpKind::kAmax, {{"self", x}, {"dim", Is({1})}});
  expect_close_equal_nan(mx, {5, kNaN}, 1e-6);
  Tensor mn = run_op_tensor(OpKind::kAmin, {{"self", x}, {"dim", Is({-2})}, {"keepdim", B(true)}});
  EXPECT_EQ(mn.sizes(), (Shape{1, 3}));
  expect_close_equal_nan(mn, {1, kNaN, -2}, 1e-6);
  Tensor xi = make_tensor(DType::Int64, {2, 2}, {-7, 4, 9, -1});
  Tensor all = run_op_tensor(OpKind::kAmax, {{"self", xi}});
  EXPECT_EQ(all.dtype(), DType::Int64);
  EXPECT_EQ(all.dim(), 0);
  EXPECT_EQ(all.item_int(), 9);
  Tensor empty = Tensor::zeros(DType::Float32, {2, 0});
  expect_error_names_node(run_op(OpKind::kAmax, {{"self", empty}, {"dim", Is({1})}}));
  Tensor ok = run_op_tensor(OpKind::kAmax, {{"self", empty}, {"dim", Is({0})}});
  EXPECT_EQ(ok.sizes(), (Shape{0}));
}

TEST(ReductionKernels, MaxDimGivesFirstMaximumAndIndices) {
  Tensor x = make_tensor(DType::Float16, {2, 4}, {1, 7, 7, 2, kNaN, 3, kNaN, 9});
  auto r = run_op(OpKind::kMaxDim, {{"self", x}, {"dim", I(1)}, {"keepdim", B(true)}}, 2);
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  Tensor values = std::get<Tensor>((*r)[0]), idx = std::get<Tensor>((*r)[1]);
  EXPECT_EQ(values.dtype(), DType::Float16);
  EXPECT_EQ(idx.dtype(), DType::Int64);
  EXPECT_EQ(idx.sizes(), (Shape{2, 1}));
  expect_close_equal_nan(values, {7, kNaN}, 1e-6);
  EXPECT_EQ(idx.int_at(0), 1);
  EXPECT_EQ(idx.int_at(1), 0);
  auto r0 = run_op(OpKind::kMaxDim, {{"self", x}, {"dim", I(0)}}, 2);
  ASSERT_TRUE(r0.has_value());
  Tensor i0 = std::get<Tensor>((*r0)[1]);
  EXPECT_EQ(i0.sizes(), (Shape{4}));
  EXPECT_EQ(i0.int_at(0), 1);  // NaN wins
  EXPECT_EQ(i0.int_at(1), 0);
  EXPECT_EQ(i0.int_at(3), 1);
}

TEST(ReductionKernels, ArgmaxFlattenedAndPerDim) {
  Tensor x = make_tensor(DType::Int32, {2, 3}, {4, 9, 1, 9, 0, 2});
  Tensor flat = run_op_tensor(OpKind::kArgmax, {{"self", x}});
  EXPECT_EQ(flat.dim(), 0);
  EXPECT_EQ(flat.item_int(), 1);
  Tensor flat_keep = run_op_tensor(OpKind::kArgmax, {{"self", x}, {"keepdim", B(true)}});
  EXPECT_EQ(flat_keep.sizes(), (Shape{1, 1}));
  EXPECT_EQ(flat_keep.item_int(), 1);
  Tensor rows = run_op_tensor(OpKind::kArgmax, {{"self", x}, {"dim", I(-1)}});
  EXPECT_EQ(rows.sizes(), (Shape{2}));
  EXPECT_EQ(rows.int_at(0), 1);
  EXPECT_EQ(rows.int_at(1), 0);
  expect_error_names_node(run_op(OpKind::kArgmax, {{"self", Tensor::zeros(DType::Float32, {0})}}));
}

// argmin: the first minimum (the first NaN for floats), flattened or per dim.
TEST(ReductionKernels, ArgminFlattenedAndPerDim) {
  Tensor x = make_tensor(DType::Float32, {2, 3}, {4, 0, 0, 9, 7, -1});
  EXPECT_EQ(run_op_tensor(OpKind::kArgmin, {{"self", x}}).item_int(), 5);
  Tensor rows = run_op_tensor(OpKind::kArgmin, {{"self", x}, {"dim", I(1)}, {"keepdim", B(true)}});
  EXPECT_EQ(rows.sizes(), (Shape{2, 1}));
  EXPECT_EQ(rows.int_at(0), 1);  // the first of two zeros
  EXPECT_EQ(rows.int_at(1), 2);
  Tensor with_nan = make_tensor(DType::Float32, {3}, {1, std::numeric_limits<double>::quiet_NaN(), -5});
  EXPECT_EQ(run_op_tensor(OpKind::kArgmin, {{"self", with_nan}}).item_int(), 1);
  expect_error_names_node(run_op(OpKind::kArgmin, {{"self", Tensor::zeros(DType::Float32, {0})}}));
}

TEST(ReductionKernels, VarianceWithCorrections) {
  std::vector<double> v = ramp(12, 1.25, 2);
  Tensor x = make_tensor(DType::Float64, {3, 4}, v);
  auto reference = [&](int row, double correction) {
    double m = 0;
    for (int j = 0; j < 4; ++j) m += v[row * 4 + j] / 4;
    double ss = 0;
    for (int j = 0; j < 4; ++j) ss += (v[row * 4 + j] - m) * (v[row * 4 + j] - m);
    return ss / (4 - correction);
  };
  Tensor unbiased = run_op_tensor(OpKind::kVarCorrection, {{"self", x}, {"dim", Is({1})}});
  expect_close_equal_nan(unbiased, {reference(0, 1), reference(1, 1), reference(2, 1)}, 1e-12);
  Tensor biased = run_op_tensor(OpKind::kVarCorrection,
                                {{"self", x}, {"dim", Is({-1})}, {"correction", I(0)}, {"keepdim", B(true)}});
  EXPECT_EQ(biased.sizes(), (Shape{3, 1}));
  expect_close_equal_nan(biased, {reference(0, 0), reference(1, 0), reference(2, 0)}, 1e-12);
  auto vm = run_op(OpKind::kVarMeanCorrection, {{"self", x}, {"dim", Is({1})}, {"correction", I(0)}}, 2);
  ASSERT_TRUE(vm.has_value());
  expect_close_equal_nan(std::get<Tensor>((*vm)[0]), {reference(0, 0), reference(1, 0), reference(2, 0)}, 1e-12);
  Tensor mean = std::get<Tensor>((*vm)[1]);
  EXPECT_NEAR(mean.value_at(1), (v[4] + v[5] + v[6] + v[7]) / 4, 1e-12);
  // One element with correction 1 divides by zero: NaN.
  Tensor one = run_op_tensor(OpKind::kVarCorrection, {{"self", make_tensor(DType::Float32, {1}, {3})}});
  EXPECT_TRUE(std::isnan(one.item()));
  expect_error_names_node(run_op(OpKind::kVarCorrection, {{"self", make_tensor(DType::Int64, {2}, {1, 2})}}));
}

TEST(ReductionKernels, AnyAndAnyDim) {
  Tensor x = make_tensor(DType::Float32, {2, 3}, {0, 0, 0, 0, kNaN, 0});
  Tensor all = run_op_tensor(OpKind::kAny, {{"self", x}});
  EXPECT_EQ(all.dtype(), DType::Bool);
  EXPECT_EQ(all.item_int(), 1);
  Tensor rows = run_op_tensor(OpKind::kAnyDim, {{"self", x}, {"dim", I(1)}, {"keepdim", B(true)}});
  EXPECT_EQ(rows.sizes(), (Shape{2, 1}));
  EXPECT_EQ(rows.int_at(0), 0);
  EXPECT_EQ(rows.int_at(1), 1);
  Tensor u8 =
      run_op_tensor(OpKind::kAnyDim, {{"self", make_tensor(DType::UInt8, {2, 2}, {0, 3, 0, 0})}, {"dim", I(0)}});
  EXPECT_EQ(u8.dtype(), DType::UInt8);
  EXPECT_EQ(u8.int_at(0), 0);
  EXPECT_EQ(u8.int_at(1), 1);
}

// all: true where every element is nonzero (NaN counts as nonzero), over
// every dim, one dim or several; any.dims likewise; an empty reduction is
// true for all and false for any; an empty list of dims reduces nothing.
TEST(ReductionKernels, AllAndAnyOverDims) {
  Tensor x = make_tensor(DType::Float32, {2, 3}, {1, kNaN, -2, 1, 0, 3});
  EXPECT_EQ(run_op_tensor(OpKind::kAll, {{"self", x}}).item_int(), 0);
  Tensor rows = run_op_tensor(OpKind::kAllDim, {{"self", x}, {"dim", I(1)}});
  EXPECT_EQ(rows.dtype(), DType::Bool);
  EXPECT_EQ(rows.int_at(0), 1);
  EXPECT_EQ(rows.int_at(1), 0);
  Tensor cols = run_op_tensor(OpKind::kAllDims, {{"self", x}, {"dim", Is({0})}, {"keepdim", B(true)}});
  EXPECT_EQ(cols.sizes(), (Shape{1, 3}));
  EXPECT_EQ(cols.int_at(0), 1);
  EXPECT_EQ(cols.int_at(1), 0);
  EXPECT_EQ(cols.int_at(2), 1);
  Tensor zeros = Tensor::zeros(DType::Int64, {2, 2});
  EXPECT_EQ(run_op_tensor(OpKind::kAnyDims, {{"self", zeros}, {"dim", Is({0, 1})}}).item_int(), 0);
  Tensor empty = Tensor::zeros(DType::Float32, {0, 3});
  EXPECT_EQ(run_op_tensor(OpKind::kAllDim, {{"self", empty}, {"dim", I(0)}}).int_at(2), 1);
  EXPECT_EQ(run_op_tensor(OpKind::kAnyDims, {{"self", empty}, {"dim", Is({0})}}).int_at(2), 0);
  // An explicit empty list of dims reduces nothing (torch.any(x, dim=()) is x's truth, element by element).
  for (OpKind op : {OpKind::kAllDims, OpKind::kAnyDims}) {
    Tensor each = run_op_tensor(op, {{"self", x}, {"dim", Is({})}});
    EXPECT_EQ(each.dtype(), DType::Bool);
    EXPECT_EQ(each.sizes(), (Shape{2, 3}));
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(each.int_at(i), i == 4 ? 0 : 1) << i;
  }
  // None reduces every dim.
  EXPECT_EQ(run_op_tensor(OpKind::kAnyDims, {{"self", zeros}}).sizes(), Shape{});
}

// max() / min() of every element (a NaN wins); prod of all or one dim, int64 for integers.
TEST(ReductionKernels, MaxMinAndProdOfEveryElement) {
  Tensor x = make_tensor(DType::Float32, {2, 3}, {1, -2, 3, 0.5, 4, -1});
  Tensor mx = run_op_tensor(OpKind::kMax, {{"self", x}});
  EXPECT_EQ(mx.sizes(), Shape{});
  EXPECT_EQ(mx.value_at(0), 4);
  EXPECT_EQ(run_op_tensor(OpKind::kMin, {{"self", x}}).value_at(0), -2);
  EXPECT_TRUE(
      std::isnan(run_op_tensor(OpKind::kMax, {{"self", make_tensor(DType::Float32, {3}, {1, kNaN, 2})}}).value_at(0)));
  EXPECT_EQ(run_op_tensor(OpKind::kProd, {{"self", x}}).value_at(0), 1 * -2 * 3 * 0.5 * 4 * -1);
  Tensor rows = run_op_tensor(OpKind::kProdDimInt, {{"self", x}, {"dim", I(1)}, {"keepdim", B(true)}});
  EXPECT_EQ(rows.sizes(), (Shape{2, 1}));
  EXPECT_EQ(rows.value_at(0), -6);
  EXPECT_EQ(rows.value_at(1), -2);
  Tensor ints = run_op_tensor(OpKind::kProd, {{"self", make_tensor(DType::Int32, {3}, {2, 3, 7})}});
  EXPECT_EQ(ints.dtype(), DType::Int64);
  EXPECT_EQ(ints.int_at(0), 42);
  EXPECT_EQ(run_op_tensor(OpKind::kProd, {{"self", Tensor::zeros(DType::Float32, {0})}}).value_at(0), 1);
  expect_error_names_node(run_op(OpKind::kMax, {{"self", Tensor::zeros(DType::Float32, {0})}}));
}

// Softmax reference along dim 1 of a [2, n, 3] tensor, written with explicit index arithmetic.
std::vector<double> softmax_reference(const std::vector<double>& v, int n, bool log) {
  std::vector<double> out(v.size());
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 3; ++c) {
      double denom = 0;
      for (int b = 0; b < n; ++b) denom += std::exp(v[(a * n + b) * 3 + c]);
      for (int b = 0; b < n; ++b) {
        const double x = v[(a * n + b) * 3 + c];
        out[(a * n + b) * 3 + c] = log ? x - std::log(denom) : std::exp(x) / denom;
      }
    }
  return out;
}

TEST(ReductionKernels, SoftmaxAndLogSoftmaxMiddleDim) {
  std::vector<double> v = ramp(24, 0.7, -4);
  Tensor x = make_tensor(DType::Float32, {2, 4, 3}, v);
  Tensor s = run_op_tensor(OpKind::kSoftmax, {{"self", x}, {"dim", I(1)}});
  expect_close_equal_nan(s, softmax_reference(v, 4, false), 1e-6);
  Tensor ls = run_op_tensor(OpKind::kLogSoftmaxInternal, {{"self", x}, {"dim", I(-2)}, {"half_to_float", B(false)}});
  expect_close_equal_nan(ls, softmax_reference(v, 4, true), 1e-6);
  // Large values stay finite (the max is subtracted).
  Tensor big = make_tensor(DType::Float32, {2}, {1000, 1001});
  Tensor sb = run_op_tensor(OpKind::kSoftmaxInternal, {{"self", big}, {"dim", I(0)}, {"half_to_float", B(false)}});
  expect_close_equal_nan(sb, {1 / (1 + std::exp(1.0)), 1 / (1 + std::exp(-1.0))}, 1e-6);
}

TEST(ReductionKernels, SoftmaxDtypesAndMaskedRows) {
  Tensor x = make_tensor(DType::Float16, {2, 3}, {-kInf, -kInf, -kInf, 0.5, -kInf, 1.5});
  Tensor h = run_op_tensor(OpKind::kSoftmax, {{"self", x}, {"dim", I(1)}});
  EXPECT_EQ(h.dtype(), DType::Float16);
  // A row of only -inf gives NaN, as in PyTorch.
  expect_close_equal_nan(h, {kNaN, kNaN, kNaN, 1 / (1 + std::exp(1.0)), 0, 1 / (1 + std::exp(-1.0))}, 2e-3);
  Tensor f = run_op_tensor(OpKind::kSoftmaxInternal, {{"self", x}, {"dim", I(1)}, {"half_to_float", B(true)}});
  EXPECT_EQ(f.dtype(), DType::Float32);
  Tensor d = run_op_tensor(OpKind::kLogSoftmax, {{"self", x}, {"dim", I(1)}, {"dtype", D(DType::Float64)}});
  EXPECT_EQ(d.dtype(), DType::Float64);
  EXPECT_NEAR(d.value_at(5), -std::log(1 + std::exp(-1.0)), 1e-12);
  Tensor scalar = run_op_tensor(OpKind::kSoftmax, {{"self", Tensor::scalar(DType::Float32, 3)}, {"dim", I(-1)}});
  EXPECT_EQ(scalar.item(), 1.0);
  expect_error_names_node(run_op(OpKind::kSoftmax, {{"self", make_tensor(DType::Int64, {2}, {1, 2})}, {"dim", I(0)}}));
  expect_error_names_node(run_op(OpKind::kSoftmax, {{"self", x}, {"dim", I(2)}}));
}

TEST(ReductionKernels, NonContiguousInput) {
  // A transposed view: sum over its rows reads the logical layout.
  Tensor base = make_tensor(DType::Float32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor t = base.as_strided({3, 2}, {1, 3}, 0);
  Tensor out = run_op_tensor(OpKind::kSumDimIntList, {{"self", t}, {"dim", Is({1})}});
  expect_close_equal_nan(out, {5, 7, 9}, 1e-6);
}

TEST(ReductionKernels, MinDimAndAminmaxTakeTheFirstExtremeAndNaNWins) {
  const double nan = std::nan("");
  Tensor x = make_tensor(DType::Float32, {2, 4}, {3, 1, 1, 2, 5, nan, -1, 9});
  auto m = run_op(OpKind::kMinDim, {{"self", x}, {"dim", I(1)}, {"keepdim", B(true)}}, 2);
  ASSERT_TRUE(m.has_value()) << m.status().message();
  EXPECT_EQ(testing::output(*m, 0).sizes(), Shape({2, 1}));
  std::vector<double> v = testing::values(testing::output(*m, 0));
  EXPECT_EQ(v[0], 1);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_EQ(testing::values(testing::output(*m, 1)), (std::vector<double>{1, 1}));
  auto mm = run_op(OpKind::kAminmax, {{"self", x}, {"dim", I(0)}}, 2);
  ASSERT_TRUE(mm.has_value()) << mm.status().message();
  std::vector<double> lo = testing::values(testing::output(*mm, 0)), hi = testing::values(testing::output(*mm, 1));
  EXPECT_EQ((std::vector<double>{lo[0], lo[2], lo[3]}), (std::vector<double>{3, -1, 2}));
  EXPECT_EQ((std::vector<double>{hi[0], hi[2], hi[3]}), (std::vector<double>{5, 1, 9}));
  EXPECT_TRUE(std::isnan(lo[1]) && std::isnan(hi[1]));
  Tensor i = make_tensor(DType::Int32, {3}, {4, -7, 6});
  auto all = run_op(OpKind::kAminmax, {{"self", i}}, 2);
  ASSERT_TRUE(all.has_value()) << all.status().message();
  EXPECT_EQ(testing::output(*all, 0).dim(), 0);
  EXPECT_EQ(testing::output(*all, 0).dtype(), DType::Int32);
  EXPECT_EQ(testing::values(testing::output(*all, 0)), (std::vector<double>{-7}));
  EXPECT_EQ(testing::values(testing::output(*all, 1)), (std::vector<double>{6}));
}

// By hand: 1 and 2 both twice in the first slice, the smaller wins, with the
// index of its last occurrence (small slices sort stably).
TEST(ReductionKernels, ModeIsTheSmallestMostFrequentValue) {
  Tensor x = make_tensor(DType::Float32, {2, 5}, {2, 1, 2, 1, 3, 5, 5, 4, 5, 0});
  auto m = run_op(OpKind::kMode, {{"self", x}, {"dim", I(1)}}, 2);
  ASSERT_TRUE(m.has_value()) << m.status().message();
  EXPECT_EQ(testing::values(testing::output(*m, 0)), (std::vector<double>{1, 5}));
  EXPECT_EQ(testing::values(testing::output(*m, 1)), (std::vector<double>{3, 3}));
  Tensor i = make_tensor(DType::Int64, {4}, {7, -2, 7, 0});
  auto mi = run_op(OpKind::kMode, {{"self", i}}, 2);
  ASSERT_TRUE(mi.has_value()) << mi.status().message();
  EXPECT_EQ(testing::values(testing::output(*mi, 0)), (std::vector<double>{7}));
  EXPECT_EQ(testing::values(testing::output(*mi, 1)), (std::vector<double>{2}));
}

}  // namespace
}  // namespace kiln::cpu
