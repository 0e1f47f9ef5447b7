// Ordering kernels (sort, topk, kthvalue, median, searchsorted) and window
// kernels (unfold, im2col, max_unpool, adaptive_max_pool2d) against values
// worked out by hand or by a direct scan here.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "unit/backends/cpu/op_test_helpers.h"

namespace kiln::cpu {
namespace {

using ir::OpKind;
using namespace testing;

const double kNan = std::numeric_limits<double>::quiet_NaN();

TEST(SortKernels, SortIsStableAndPutsNanLast) {
  Tensor x = make_tensor(DType::Float32, {2, 4}, {3, kNan, 1, 3, -2, 5, 5, 0});
  auto up = run_op(OpKind::kSort, {{"self", x}, {"dim", I(1)}}, 2);
  ASSERT_TRUE(up.has_value()) << up.status().message();
  const std::vector<double> v0 = values(output(*up, 0));
  EXPECT_EQ(v0[0], 1);
  EXPECT_EQ(v0[1], 3);
  EXPECT_EQ(v0[2], 3);
  EXPECT_TRUE(std::isnan(v0[3]));
  EXPECT_EQ(values(output(*up, 1)), (std::vector<double>{2, 0, 3, 1, 0, 3, 1, 2}));  // ties keep their order
  auto down = run_op(OpKind::kSort, {{"self", x}, {"dim", I(1)}, {"descending", B(true)}}, 2);
  ASSERT_TRUE(down.has_value()) << down.status().message();
  EXPECT_EQ(values(output(*down, 1)), (std::vector<double>{1, 0, 3, 2, 1, 2, 3, 0}));  // NaN first
  EXPECT_EQ(values(run_op_tensor(OpKind::kArgsort, {{"self", x}, {"dim", I(0)}})),
            (std::vector<double>{1, 1, 0, 1, 0, 0, 1, 0}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kMsort, {{"self", make_tensor(DType::Int64, {3}, {4, -1, 2})}})),
            (std::vector<double>{-1, 2, 4}));
}

TEST(SortKernels, TopkKthvalueAndMediansPickTheRightEntries) {
  Tensor x = make_tensor(DType::Float32, {2, 5}, {4, 9, 1, 7, 3, 2, kNan, 8, 6, 0});
  auto top = run_op(OpKind::kTopk, {{"self", x}, {"k", I(2)}}, 2);
  ASSERT_TRUE(top.has_value()) << top.status().message();
  const std::vector<double> tv = values(output(*top, 0));
  EXPECT_EQ(tv[0], 9);
  EXPECT_EQ(tv[1], 7);
  EXPECT_TRUE(std::isnan(tv[2]));  // NaN is the largest
  EXPECT_EQ(tv[3], 8);
  EXPECT_EQ(values(output(*top, 1)), (std::vector<double>{1, 3, 1, 2}));
  auto low = run_op(OpKind::kTopk, {{"self", x}, {"k", I(2)}, {"dim", I(1)}, {"largest", B(false)}}, 2);
  ASSERT_TRUE(low.has_value());
  EXPECT_EQ(values(output(*low, 0)), (std::vector<double>{1, 3, 0, 2}));
  auto kth = run_op(OpKind::kKthvalue, {{"self", x}, {"k", I(3)}, {"dim", I(1)}, {"keepdim", B(true)}}, 2);
  ASSERT_TRUE(kth.has_value());
  EXPECT_EQ(output(*kth, 0).sizes(), (Shape{2, 1}));
  EXPECT_EQ(values(output(*kth, 0)), (std::vector<double>{4, 6}));
  EXPECT_EQ(values(output(*kth, 1)), (std::vector<double>{0, 3}));
  // median: NaN (and the first NaN's index) where a NaN is; nanmedian skips it: lower middle of {0, 2, 6, 8}.
  auto med = run_op(OpKind::kMedianDim, {{"self", x}, {"dim", I(1)}}, 2);
  ASSERT_TRUE(med.has_value());
  EXPECT_EQ(output(*med, 0).value_at(0), 4);
  EXPECT_TRUE(std::isnan(output(*med, 0).value_at(1)));
  EXPECT_EQ(values(output(*med, 1)), (std::vector<double>{0, 1}));
  auto nmed = run_op(OpKind::kNanmedianDim, {{"self", x}, {"dim", I(1)}}, 2);
  ASSERT_TRUE(nmed.has_value());
  EXPECT_EQ(values(output(*nmed, 0)), (std::vector<double>{4, 2}));
  EXPECT_EQ(values(output(*nmed, 1)), (std::vector<double>{0, 0}));
  EXPECT_EQ(run_op_tensor(OpKind::kMedian, {{"self", make_tensor(DType::Int64, {4}, {5, 1, 9, 3})}}).item(), 3);
  expect_error(OpKind::kTopk, {{"self", x}, {"k", I(6)}}, "out of range", 2);
}

TEST(SortKernels, SearchsortedFindsInsertionPoints) {
  Tensor seq = make_tensor(DType::Float32, {5}, {1, 3, 3, 5, 7});
  Tensor v = make_tensor(DType::Float32, {2, 3}, {0, 3, 4, 7, 8, kNan});
  EXPECT_EQ(values(run_op_tensor(OpKind::kSearchsortedTensor, {{"sorted_sequence", seq}, {"self", v}})),
            (std::vector<double>{0, 1, 3, 4, 5, 5}));
  Tensor right = run_op_tensor(OpKind::kSearchsortedTensor,
                               {{"sorted_sequence", seq}, {"self", v}, {"right", B(true)}, {"out_int32", B(true)}});
  EXPECT_EQ(right.dtype(), DType::Int32);
  EXPECT_EQ(values(right), (std::vector<double>{0, 3, 3, 5, 5, 5}));
  // One sorted row per row of values.
  Tensor rows = make_tensor(DType::Float32, {2, 3}, {1, 2, 3, 10, 20, 30});
  EXPECT_EQ(values(run_op_tensor(OpKind::kSearchsortedTensor, {{"sorted_sequence", rows}, {"self", v}})),
            (std::vector<double>{0, 2, 3, 0, 0, 3}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kBucketizeTensor, {{"self", v}, {"boundaries", seq}})),
            (std::vector<double>{0, 1, 3, 4, 5, 5}));
}

TEST(SortKernels, HistcIsinUniqueAndNonzeroStaticCount) {
  Tensor x = make_tensor(DType::Float32, {7}, {0, 1, 1.5, 2, 4, kNan, -1});
  // 4 bins over [0, 4]: [0, 1), [1, 2), [2, 3), [3, 4] (4 counts in the last, -1 and NaN in none).
  EXPECT_EQ(values(run_op_tensor(OpKind::kHistc, {{"self", x}, {"bins", I(4)}, {"min", F(0)}, {"max", F(4)}})),
            (std::vector<double>{1, 2, 1, 1}));
  // min = max = 0: the data's finite range [-1, 4] in 5 bins of width 1.
  EXPECT_EQ(values(run_op_tensor(OpKind::kHistc, {{"self", x}, {"bins", I(5)}})), (std::vector<double>{1, 1, 2, 1, 1}));
  Tensor e = make_tensor(DType::Int64, {2, 3}, {1, 5, 9, 2, 5, 7});
  Tensor t = make_tensor(DType::Int64, {3}, {5, 9, 4});
  EXPECT_EQ(values(run_op_tensor(OpKind::kIsinTensorTensor, {{"elements", e}, {"test_elements", t}})),
            (std::vector<double>{0, 1, 1, 0, 1, 0}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kIsinTensorTensor, {{"elements", e}, {"test_elements", t}, {"invert", B(true)}})),
            (std::vector<double>{1, 0, 0, 1, 0, 1}));
  Tensor u = make_tensor(DType::Int64, {2, 3}, {3, 1, 3, 2, 1, 3});
  auto uq = run_op(OpKind::kUnique2, {{"self", u}, {"sorted", B(true)}, {"return_inverse", B(true)}, {"return_counts", B(true)}}, 3);
  ASSERT_TRUE(uq.has_value()) << uq.status().message();
  EXPECT_EQ(values(output(*uq, 0)), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(output(*uq, 1).sizes(), (Shape{2, 3}));
  EXPECT_EQ(values(output(*uq, 1)), (std::vector<double>{2, 0, 2, 1, 0, 2}));
  EXPECT_EQ(values(output(*uq, 2)), (std::vector<double>{2, 1, 3}));
  auto runs = run_op(OpKind::kUniqueConsecutive, {{"self", u}, {"return_counts", B(true)}}, 3);
  ASSERT_TRUE(runs.has_value()) << runs.status().message();
  EXPECT_EQ(values(output(*runs, 0)), (std::vector<double>{3, 1, 3, 2, 1, 3}));
  EXPECT_EQ(output(*runs, 1).numel(), 0);  // not asked for
  Tensor m = make_tensor(DType::Bool, {2, 2}, {0, 1, 1, 1});
  EXPECT_EQ(values(run_op_tensor(OpKind::kNonzeroStatic, {{"self", m}, {"size", I(4)}, {"fill_value", I(-7)}})),
            (std::vector<double>{0, 1, 1, 0, 1, 1, -7, -7}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kNonzeroStatic, {{"self", m}, {"size", I(1)}})), (std::vector<double>{0, 1}));
}

TEST(WindowKernels, UnfoldAndIm2colTakeTheWindows) {
  Tensor x = iota(DType::Float32, {2, 5});
  Tensor u = run_op_tensor(OpKind::kUnfold, {{"self", x}, {"dimension", I(1)}, {"size", I(2)}, {"step", I(2)}});
  ASSERT_EQ(u.sizes(), (Shape{2, 2, 2}));
  EXPECT_EQ(values(u), (std::vector<double>{0, 1, 2, 3, 5, 6, 7, 8}));
  // im2col of a 1x1x3x3 image, 2x2 kernel, padding 1 on the width, stride 1.
  Tensor img = iota(DType::Float32, {1, 1, 3, 3});
  Tensor cols = run_op_tensor(OpKind::kIm2col, {{"self", img},
                                                {"kernel_size", Is({2, 2})},
                                                {"dilation", Is({1, 1})},
                                                {"padding", Is({0, 1})},
                                                {"stride", Is({1, 1})}});
  ASSERT_EQ(cols.sizes(), (Shape{1, 4, 8}));  // windows: 2 rows x 4 columns
  for (int64_t r = 0; r < 4; ++r) {
    const int64_t i = r / 2, j = r % 2;
    for (int64_t l = 0; l < 8; ++l) {
      const int64_t y = l / 4 + i, xx = l % 4 - 1 + j;
      const double want = xx < 0 || xx > 2 ? 0.0 : static_cast<double>(y * 3 + xx);
      EXPECT_EQ(cols.value_at(r * 8 + l), want) << r << ", " << l;
    }
  }
}

TEST(WindowKernels, MaxUnpoolAndAdaptiveMaxPoolUseThePlaneIndices) {
  Tensor v = make_tensor(DType::Float32, {1, 2, 1, 2}, {5, 6, 7, 8});
  Tensor idx = make_tensor(DType::Int64, {1, 2, 1, 2}, {1, 7, 0, 6});
  Tensor u = run_op_tensor(OpKind::kMaxUnpool2d, {{"self", v}, {"indices", idx}, {"output_size", Is({2, 4})}});
  ASSERT_EQ(u.sizes(), (Shape{1, 2, 2, 4}));
  EXPECT_EQ(values(u), (std::vector<double>{0, 5, 0, 0, 0, 0, 0, 6, 7, 0, 0, 0, 0, 0, 8, 0}));
  expect_error(OpKind::kMaxUnpool2d,
               {{"self", v}, {"indices", make_tensor(DType::Int64, {1, 2, 1, 2}, {1, 8, 0, 0})}, {"output_size", Is({2, 4})}},
               "outside");
  Tensor x = make_tensor(DType::Float32, {1, 3, 3}, {1, 9, 2, 4, 3, 8, 7, 5, kNan});
  auto p = run_op(OpKind::kAdaptiveMaxPool2d, {{"self", x}, {"output_size", Is({2, 2})}}, 2);
  ASSERT_TRUE(p.has_value()) << p.status().message();
  // Bins [0, 2) x [0, 2), [0, 2) x [1, 3), [1, 3) x [0, 2), [1, 3) x [1, 3).
  const std::vector<double> pv = values(output(*p, 0));
  EXPECT_EQ(pv[0], 9);
  EXPECT_EQ(pv[1], 9);
  EXPECT_EQ(pv[2], 7);
  EXPECT_TRUE(std::isnan(pv[3]));
  EXPECT_EQ(values(output(*p, 1)), (std::vector<double>{1, 1, 6, 8}));
}

// isin: NaN equals nothing, in the elements or among the test elements.
TEST(SortKernels, IsinFindsNoNan) {
  const Tensor e = make_tensor(DType::Float32, {4}, {kNan, 1, 2, 3});
  const Tensor t = make_tensor(DType::Float32, {3}, {kNan, 3, 1});
  EXPECT_EQ(values(run_op_tensor(OpKind::kIsinTensorTensor, {{"elements", e}, {"test_elements", t}})),
            (std::vector<double>{0, 1, 0, 1}));
  EXPECT_EQ(
      values(run_op_tensor(OpKind::kIsinTensorTensor, {{"elements", e}, {"test_elements", t}, {"invert", B(true)}})),
      (std::vector<double>{1, 0, 1, 0}));
}

}  // namespace
}  // namespace kiln::cpu
