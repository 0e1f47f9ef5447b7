#include <gtest/gtest.h>

#include "unit/backends/cpu/op_test_helpers.h"

namespace kiln::cpu {
namespace {

using ir::OpKind;
using namespace testing;

TEST(ScatterKernels, SelectScatter) {
  Tensor self = iota(DType::Float32, {3, 4});
  Tensor src = make_tensor(DType::Float32, {3}, {-1, -2, -3});
  Tensor out = run_op_tensor(OpKind::kSelectScatter, {{"self", self}, {"src", src}, {"dim", I(1)}, {"index", I(-2)}});
  EXPECT_NE(out.storage(), self.storage());
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(out.value_at(r * 4 + c), c == 2 ? -(r + 1) : r * 4 + c);
  EXPECT_EQ(self.value_at(2), 2);  // self unchanged
  expect_error(OpKind::kSelectScatter, {{"self", self}, {"src", src}, {"dim", I(0)}, {"index", I(0)}}, "size");
  expect_error(OpKind::kSelectScatter, {{"self", self}, {"src", src}, {"dim", I(1)}, {"index", I(4)}}, "out of range");
}

TEST(ScatterKernels, SliceScatterWithStepAndTransposedSelf) {
  Tensor self = transposed(DType::Float32, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 2, 6);
  Tensor src = make_tensor(DType::Float32, {2, 3}, {-1, -2, -3, -4, -5, -6});
  Tensor out = run_op_tensor(
      OpKind::kSliceScatter,
      {{"self", self}, {"src", src}, {"dim", I(1)}, {"start", I(1)}, {"end", I(9223372036854775807)}, {"step", I(2)}});
  EXPECT_EQ(values(out), (std::vector<double>{0, -1, 2, -2, 4, -3, 6, -4, 8, -5, 10, -6}));
  // Defaults: dim 0, whole range.
  Tensor whole = run_op_tensor(OpKind::kSliceScatter,
                               {{"self", iota(DType::Int64, {2})}, {"src", make_tensor(DType::Int64, {2}, {7, 8})}});
  EXPECT_EQ(values(whole), (std::vector<double>{7, 8}));
  expect_error(OpKind::kSliceScatter, {{"self", self}, {"src", src}, {"dim", I(1)}, {"start", I(1)}}, "size");
}

TEST(ScatterKernels, AsStridedScatter) {
  Tensor self = iota(DType::Float32, {2, 3});
  Tensor src = make_tensor(DType::Float32, {2}, {-1, -2});
  // Elements at storage offsets 1 and 4: the second column.
  Tensor out = run_op_tensor(
      OpKind::kAsStridedScatter,
      {{"self", self}, {"src", src}, {"size", Ints({2})}, {"stride", Ints({3})}, {"storage_offset", I(1)}});
  EXPECT_EQ(values(out), (std::vector<double>{0, -1, 2, 3, -2, 5}));
  expect_error(OpKind::kAsStridedScatter, {{"self", self}, {"src", src}, {"size", Ints({2})}, {"stride", Ints({6})}},
               "storage");
  expect_error(OpKind::kAsStridedScatter, {{"self", self}, {"src", src}, {"size", Ints({3})}, {"stride", Ints({1})}},
               "size");
}

TEST(ScatterKernels, IndexCopy) {
  Tensor self = Tensor::zeros(DType::Float32, {3, 4});
  Tensor index = make_tensor(DType::Int64, {2}, {3, 0});
  Tensor source = iota(DType::Float32, {3, 2});
  Tensor out =
      run_op_tensor(OpKind::kIndexCopy, {{"self", self}, {"dim", I(-1)}, {"index", index}, {"source", source}});
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(out.value_at(r * 4 + 3), source.value_at(r * 2 + 0));
    EXPECT_EQ(out.value_at(r * 4 + 0), source.value_at(r * 2 + 1));
    EXPECT_EQ(out.value_at(r * 4 + 1), 0);
  }
  expect_error(OpKind::kIndexCopy,
               {{"self", self}, {"dim", I(1)}, {"index", make_tensor(DType::Int64, {2}, {4, 0})}, {"source", source}},
               "out of bounds");
  expect_error(OpKind::kIndexCopy,
               {{"self", self}, {"dim", I(1)}, {"index", make_tensor(DType::Int32, {2}, {1, 0})}, {"source", source}},
               "int64");
  expect_error(OpKind::kIndexCopy, {{"self", self}, {"dim", I(0)}, {"index", index}, {"source", source}},
               "number of indices");
  expect_error(OpKind::kIndexCopy,
               {{"self", self}, {"dim", I(1)}, {"index", index}, {"source", iota(DType::Float64, {3, 2})}}, "dtype");
}

TEST(ScatterKernels, IndexPutWithIntegerIndices) {
  Tensor self = Tensor::zeros(DType::Float32, {3, 4});
  Tensor rows = make_tensor(DType::Int64, {2}, {0, -1});
  Tensor cols = make_tensor(DType::Int64, {2}, {1, 3});
  Tensor vals = make_tensor(DType::Float32, {2}, {5, 6});
  Tensor out =
      run_op_tensor(OpKind::kIndexPut,
                    {{"self", self}, {"indices", std::vector<std::optional<Tensor>>{rows, cols}}, {"values", vals}});
  std::vector<double> want(12, 0);
  want[0 * 4 + 1] = 5;
  want[2 * 4 + 3] = 6;
  EXPECT_EQ(values(out), want);
  // A leading None: self[:, idx] = scalar value broadcast.
  Tensor col = make_tensor(DType::Int64, {1}, {2});
  Tensor o2 = run_op_tensor(OpKind::kIndexPut, {{"self", self},
                                                {"indices", std::vector<std::optional<Tensor>>{std::nullopt, col}},
                                                {"values", Tensor::scalar(DType::Float32, 9)}});
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(o2.value_at(r * 4 + c), c == 2 ? 9 : 0);
}

TEST(ScatterKernels, IndexPutAccumulatesDuplicates) {
  Tensor self = make_tensor(DType::Int64, {4}, {1, 1, 1, 1});
  Tensor idx = make_tensor(DType::Int64, {4}, {0, 2, 0, 0});
  Tensor vals = make_tensor(DType::Int64, {4}, {10, 20, 30, 40});
  Tensor acc = run_op_tensor(OpKind::kIndexPut, {{"self", self},
                                                 {"indices", std::vector<std::optional<Tensor>>{idx}},
                                                 {"values", vals},
                                                 {"accumulate", B(true)}});
  EXPECT_EQ(values(acc), (std::vector<double>{81, 1, 21, 1}));
  Tensor last = run_op_tensor(OpKind::kIndexPut,
                              {{"self", self}, {"indices", std::vector<std::optional<Tensor>>{idx}}, {"values", vals}});
  EXPECT_EQ(values(last), (std::vector<double>{40, 1, 20, 1}));
  Tensor h = make_tensor(DType::Float16, {3}, {1, 1, 1});
  Tensor ha = run_op_tensor(OpKind::kIndexPut, {{"self", h},
                                                {"indices", std::vector<std::optional<Tensor>>{idx}},
                                                {"values", make_tensor(DType::Float16, {4}, {0.5, 0, 0.25, 0.25})},
                                                {"accumulate", B(true)}});
  EXPECT_EQ(ha.dtype(), DType::Float16);
  EXPECT_EQ(values(ha), (std::vector<double>{2, 1, 1}));
}

TEST(ScatterKernels, IndexPutWithBoolMask) {
  Tensor self = iota(DType::Float32, {2, 3});
  Tensor mask = make_tensor(DType::Bool, {2, 3}, {1, 0, 0, 0, 1, 1});
  Tensor out = run_op_tensor(OpKind::kIndexPut, {{"self", self},
                                                 {"indices", std::vector<std::optional<Tensor>>{mask}},
                                                 {"values", make_tensor(DType::Float32, {3}, {-1, -2, -3})}});
  EXPECT_EQ(values(out), (std::vector<double>{-1, 1, 2, 3, -2, -3}));
  // A row mask with a value broadcast over the kept rows.
  Tensor rows = make_tensor(DType::Bool, {2}, {0, 1});
  Tensor o2 = run_op_tensor(OpKind::kIndexPut, {{"self", self},
                                                {"indices", std::vector<std::optional<Tensor>>{rows}},
                                                {"values", make_tensor(DType::Float32, {3}, {7, 8, 9})}});
  EXPECT_EQ(values(o2), (std::vector<double>{0, 1, 2, 7, 8, 9}));
  expect_error(
      OpKind::kIndexPut,
      {{"self", self}, {"indices", std::vector<std::optional<Tensor>>{mask}}, {"values", iota(DType::Float32, {2})}},
      "shape mismatch");
  expect_error(OpKind::kIndexPut,
               {{"self", self},
                {"indices", std::vector<std::optional<Tensor>>{make_tensor(DType::Bool, {3}, {1, 1, 1})}},
                {"values", Tensor::scalar(DType::Float32, 0)}},
               "mask");
}

}  // namespace
}  // namespace kiln::cpu
