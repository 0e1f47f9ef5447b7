#include <gtest/gtest.h>

#include <limits>

#include "unit/backends/cpu/op_test_helpers.h"

namespace kiln::cpu {
namespace {

using ir::OpKind;
using namespace testing;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(ViewKernels, ViewSharesStorageAndInfersMinusOne) {
  Tensor x = iota(DType::Float32, {2, 3, 4});
  Tensor v = run_op_tensor(OpKind::kView, {{"self", x}, {"size", Ints({4, -1})}});
  EXPECT_EQ(v.sizes(), (Shape{4, 6}));
  EXPECT_EQ(v.storage(), x.storage());
  EXPECT_EQ(values(v), values(x));
  Tensor r = run_op_tensor(OpKind::kReshape, {{"self", x}, {"shape", Ints({-1})}});
  EXPECT_EQ(r.sizes(), (Shape{24}));
  Tensor u = run_op_tensor(OpKind::kUnsafeView, {{"self", x}, {"size", Ints({24, 1})}});
  EXPECT_EQ(u.sizes(), (Shape{24, 1}));
  expect_error(OpKind::kView, {{"self", x}, {"size", Ints({5, -1})}}, "invalid for input of size 24");
  expect_error(OpKind::kView, {{"self", x}, {"size", Ints({-1, -1})}}, "only one dimension");
  expect_error(OpKind::kReshape, {{"self", x}, {"shape", Ints({7})}}, "[7]");
}

TEST(ViewKernels, ReshapeOfTransposedCopiesInLogicalOrder) {
  const std::vector<double> v = {1, 2, 3, 4, 5, 6};
  Tensor x = transposed(DType::Float32, v, 2, 3);
  Tensor r = run_op_tensor(OpKind::kReshape, {{"self", x}, {"shape", Ints({6})}});
  EXPECT_EQ(values(r), v);
  // Splitting a dim of a transposed view is still a view.
  Tensor s = run_op_tensor(OpKind::kView, {{"self", x}, {"size", Ints({2, 3, 1})}});
  EXPECT_EQ(s.storage(), x.storage());
  EXPECT_EQ(values(s), v);
}

TEST(ViewKernels, Flatten) {
  Tensor x = iota(DType::Int64, {2, 3, 4, 5});
  EXPECT_EQ(run_op_tensor(OpKind::kFlatten, {{"self", x}}).sizes(), (Shape{120}));
  Tensor f = run_op_tensor(OpKind::kFlatten, {{"self", x}, {"start_dim", I(1)}, {"end_dim", I(-2)}});
  EXPECT_EQ(f.sizes(), (Shape{2, 12, 5}));
  EXPECT_EQ(values(f), values(x));
  EXPECT_EQ(run_op_tensor(OpKind::kFlatten, {{"self", Tensor::scalar(DType::Float32, 2)}}).sizes(), (Shape{1}));
  expect_error(OpKind::kFlatten, {{"self", x}, {"start_dim", I(2)}, {"end_dim", I(1)}}, "start_dim");
}

TEST(ViewKernels, PermuteTransposeT) {
  Tensor x = iota(DType::Float32, {2, 3, 4});
  Tensor p = run_op_tensor(OpKind::kPermute, {{"self", x}, {"dims", Ints({2, 0, -2})}});
  ASSERT_EQ(p.sizes(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.storage(), x.storage());
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 3; ++k) EXPECT_EQ(p.value_at((i * 2 + j) * 3 + k), j * 12 + k * 4 + i);
  expect_error(OpKind::kPermute, {{"self", x}, {"dims", Ints({0, 0, 1})}}, "repeat");
  expect_error(OpKind::kPermute, {{"self", x}, {"dims", Ints({0, 1})}}, "rank");
  Tensor t = run_op_tensor(OpKind::kTranspose, {{"self", x}, {"dim0", I(-1)}, {"dim1", I(0)}});
  ASSERT_EQ(t.sizes(), (Shape{4, 3, 2}));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) EXPECT_EQ(t.value_at((i * 3 + j) * 2 + k), k * 12 + j * 4 + i);
  expect_error(OpKind::kTranspose, {{"self", x}, {"dim0", I(3)}, {"dim1", I(0)}}, "out of range");
  Tensor m = iota(DType::Float32, {2, 3});
  Tensor mt = run_op_tensor(OpKind::kT, {{"self", m}});
  EXPECT_EQ(mt.sizes(), (Shape{3, 2}));
  EXPECT_EQ(values(mt), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(run_op_tensor(OpKind::kT, {{"self", iota(DType::Float32, {3})}}).sizes(), (Shape{3}));
  expect_error(OpKind::kT, {{"self", x}}, "<= 2");
}

TEST(ViewKernels, Select) {
  Tensor x = iota(DType::Int32, {3, 4});
  Tensor s = run_op_tensor(OpKind::kSelectInt, {{"self", x}, {"dim", I(1)}, {"index", I(-1)}});
  EXPECT_EQ(values(s), (std::vector<double>{3, 7, 11}));
  Tensor r = run_op_tensor(OpKind::kSelectInt, {{"self", x}, {"dim", I(0)}, {"index", I(2)}});
  EXPECT_EQ(values(r), (std::vector<double>{8, 9, 10, 11}));
  expect_error(OpKind::kSelectInt, {{"self", x}, {"dim", I(0)}, {"index", I(3)}}, "out of range");
  expect_error(OpKind::kSelectInt, {{"self", Tensor::scalar(DType::Float32, 1)}, {"dim", I(0)}, {"index", I(0)}},
               "0-dim");
}

TEST(ViewKernels, SliceClampsLikePython) {
  Tensor x = iota(DType::Float32, {10});
  auto slice = [&](ir::Arg start, ir::Arg end, int64_t step) {
    return values(
        run_op_tensor(OpKind::kSliceTensor, {{"self", x}, {"start", start}, {"end", end}, {"step", I(step)}}));
  };
  EXPECT_EQ(slice(I(2), I(kMax), 3), (std::vector<double>{2, 5, 8}));
  EXPECT_EQ(slice(I(-3), None(), 1), (std::vector<double>{7, 8, 9}));
  EXPECT_EQ(slice(I(-100), I(2), 1), (std::vector<double>{0, 1}));
  EXPECT_EQ(slice(I(5), I(3), 1), (std::vector<double>{}));
  EXPECT_EQ(slice(I(0), I(-8), 1), (std::vector<double>{0, 1}));
  EXPECT_EQ(slice(I(std::numeric_limits<int64_t>::min()), I(kMax), 4), (std::vector<double>{0, 4, 8}));
  // Defaults: dim 0, whole range, step 1.
  Tensor m = iota(DType::Float32, {3, 4});
  Tensor d = run_op_tensor(OpKind::kSliceTensor, {{"self", m}, {"dim", I(-1)}, {"start", I(1)}});
  EXPECT_EQ(d.sizes(), (Shape{3, 3}));
  EXPECT_EQ(values(d), (std::vector<double>{1, 2, 3, 5, 6, 7, 9, 10, 11}));
  EXPECT_EQ(d.storage(), m.storage());
  expect_error(OpKind::kSliceTensor, {{"self", x}, {"step", I(0)}}, "step");
}

TEST(ViewKernels, Narrow) {
  Tensor x = iota(DType::Float32, {2, 5});
  Tensor n = run_op_tensor(OpKind::kNarrow, {{"self", x}, {"dim", I(1)}, {"start", I(-3)}, {"length", I(2)}});
  EXPECT_EQ(values(n), (std::vector<double>{2, 3, 7, 8}));
  expect_error(OpKind::kNarrow, {{"self", x}, {"dim", I(1)}, {"start", I(4)}, {"length", I(2)}}, "exceeds");
}

TEST(ViewKernels, UnsqueezeSqueeze) {
  Tensor x = iota(DType::Float32, {2, 3});
  EXPECT_EQ(run_op_tensor(OpKind::kUnsqueeze, {{"self", x}, {"dim", I(-1)}}).sizes(), (Shape{2, 3, 1}));
  EXPECT_EQ(run_op_tensor(OpKind::kUnsqueeze, {{"self", x}, {"dim", I(1)}}).sizes(), (Shape{2, 1, 3}));
  EXPECT_EQ(run_op_tensor(OpKind::kUnsqueeze, {{"self", Tensor::scalar(DType::Float32, 1)}, {"dim", I(0)}}).sizes(),
            (Shape{1}));
  expect_error(OpKind::kUnsqueeze, {{"self", x}, {"dim", I(3)}}, "out of range");
  Tensor y = iota(DType::Float32, {1, 3, 1, 2});
  EXPECT_EQ(run_op_tensor(OpKind::kSqueeze, {{"self", y}}).sizes(), (Shape{3, 2}));
  EXPECT_EQ(run_op_tensor(OpKind::kSqueezeDim, {{"self", y}, {"dim", I(-2)}}).sizes(), (Shape{1, 3, 2}));
  EXPECT_EQ(run_op_tensor(OpKind::kSqueezeDim, {{"self", y}, {"dim", I(1)}}).sizes(), (Shape{1, 3, 1, 2}));
  EXPECT_EQ(run_op_tensor(OpKind::kSqueezeDims, {{"self", y}, {"dim", Ints({0, 1, 2})}}).sizes(), (Shape{3, 2}));
  expect_error(OpKind::kSqueezeDims, {{"self", y}, {"dim", Ints({-2, 2})}}, "multiple times");
  Tensor s = run_op_tensor(OpKind::kSqueeze, {{"self", y}});
  EXPECT_EQ(values(s), values(y));
}

TEST(ViewKernels, Expand) {
  Tensor x = make_tensor(DType::Float32, {3, 1}, {1, 2, 3});
  Tensor e = run_op_tensor(OpKind::kExpand, {{"self", x}, {"size", Ints({2, -1, 4})}});
  ASSERT_EQ(e.sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.storage(), x.storage());
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(e.value_at((i * 3 + j) * 4 + k), j + 1);
  expect_error(OpKind::kExpand, {{"self", x}, {"size", Ints({2, 4})}}, "non-singleton");
  expect_error(OpKind::kExpand, {{"self", x}, {"size", Ints({-1, 3, 4})}}, "leading");
  expect_error(OpKind::kExpand, {{"self", x}, {"size", Ints({4})}}, "number of sizes");
  expect_error(OpKind::kExpand, {{"self", x}, {"size", Ints({int64_t{1} << 62, 3, 8})}}, "overflows");
  Tensor ea = run_op_tensor(OpKind::kExpandAs, {{"self", x}, {"other", iota(DType::Int64, {3, 5})}});
  EXPECT_EQ(ea.sizes(), (Shape{3, 5}));
}

TEST(ViewKernels, AliasDetachAsStrided) {
  Tensor x = iota(DType::Float32, {2, 3});
  for (OpKind op : {OpKind::kAlias, OpKind::kDetach}) {
    Tensor a = run_op_tensor(op, {{"self", x}});
    EXPECT_EQ(a.storage(), x.storage());
    EXPECT_EQ(values(a), values(x));
  }
  Tensor s = run_op_tensor(OpKind::kAsStrided,
                           {{"self", x}, {"size", Ints({2, 2})}, {"stride", Ints({1, 2})}, {"storage_offset", I(1)}});
  EXPECT_EQ(values(s), (std::vector<double>{1, 3, 2, 4}));
  expect_error(OpKind::kAsStrided, {{"self", x}, {"size", Ints({3, 3})}, {"stride", Ints({3, 1})}}, "storage");
}

TEST(ViewKernels, Unflatten) {
  Tensor x = iota(DType::Float32, {2, 12});
  Tensor u = run_op_tensor(OpKind::kUnflatten, {{"self", x}, {"dim", I(-1)}, {"sizes", Ints({3, -1})}});
  EXPECT_EQ(u.sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(values(u), values(x));
  expect_error(OpKind::kUnflatten, {{"self", x}, {"dim", I(1)}, {"sizes", Ints({5, -1})}}, "invalid");
}

TEST(ViewKernels, SplitFamilies) {
  Tensor x = iota(DType::Float32, {5, 2});
  auto r = run_op(OpKind::kSplitTensor, {{"self", x}, {"split_size", I(2)}}, 3);
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  EXPECT_EQ(values(output(*r, 0)), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(values(output(*r, 2)), (std::vector<double>{8, 9}));
  expect_error(OpKind::kSplitTensor, {{"self", x}, {"split_size", I(2)}}, "outputs", 2);
  auto w = run_op(OpKind::kSplitWithSizes, {{"self", x}, {"split_sizes", Ints({1, 1})}, {"dim", I(-1)}}, 2);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(values(output(*w, 1)), (std::vector<double>{1, 3, 5, 7, 9}));
  expect_error(OpKind::kSplitWithSizes, {{"self", x}, {"split_sizes", Ints({2, 2})}}, "sum", 2);
  auto c = run_op(OpKind::kChunk, {{"self", x}, {"chunks", I(3)}}, 3);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(output(*c, 0).sizes(), (Shape{2, 2}));
  EXPECT_EQ(output(*c, 2).sizes(), (Shape{1, 2}));
  // 6 rows in 4 chunks: chunks of 2 give only 3 pieces.
  auto c4 = run_op(OpKind::kChunk, {{"self", iota(DType::Float32, {6})}, {"chunks", I(4)}}, 3);
  ASSERT_TRUE(c4.has_value());
  auto u = run_op(OpKind::kUnbind, {{"self", x}, {"dim", I(1)}}, 2);
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(values(output(*u, 0)), (std::vector<double>{0, 2, 4, 6, 8}));
  expect_error(OpKind::kUnbind, {{"self", x}}, "outputs", 2);
}

}  // namespace
}  // namespace kiln::cpu
