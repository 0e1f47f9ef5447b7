#include <gtest/gtest.h>

#include "unit/backends/cpu/op_test_helpers.h"

namespace kiln::cpu {
namespace {

using ir::OpKind;
using namespace testing;

using Indices = std::vector<std::optional<Tensor>>;

TEST(IndexingKernels, Cat) {
  Tensor a = iota(DType::Float32, {2, 2});
  Tensor b = make_tensor(DType::Int64, {2, 1}, {7, 8});
  Tensor out = run_op_tensor(OpKind::kCat, {{"tensors", std::vector<Tensor>{a, b}}, {"dim", I(-1)}});
  EXPECT_EQ(out.dtype(), DType::Float32);
  EXPECT_EQ(out.sizes(), (Shape{2, 3}));
  EXPECT_EQ(values(out), (std::vector<double>{0, 1, 7, 2, 3, 8}));
  // Dim 0 by default; non-contiguous input; legacy empty 1-d tensors are skipped.
  Tensor t = transposed(DType::Float32, {10, 11, 12, 13}, 2, 2);
  Tensor empty = Tensor::zeros(DType::Float32, {0});
  Tensor c = run_op_tensor(OpKind::kCat, {{"tensors", std::vector<Tensor>{empty, a, t}}});
  EXPECT_EQ(c.sizes(), (Shape{4, 2}));
  EXPECT_EQ(values(c), (std::vector<double>{0, 1, 2, 3, 10, 11, 12, 13}));
  expect_error(OpKind::kCat, {{"tensors", std::vector<Tensor>{a, iota(DType::Float32, {2, 3})}}}, "sizes");
  expect_error(OpKind::kCat, {{"tensors", std::vector<Tensor>{a, iota(DType::Float32, {4})}}}, "number of dimensions");
  expect_error(OpKind::kCat, {{"tensors", std::vector<Tensor>{Tensor::scalar(DType::Float32, 1)}}}, "zero-dimensional");
}

TEST(IndexingKernels, Stack) {
  Tensor a = make_tensor(DType::Float32, {2}, {1, 2});
  Tensor b = make_tensor(DType::Float32, {2}, {3, 4});
  Tensor s0 = run_op_tensor(OpKind::kStack, {{"tensors", std::vector<Tensor>{a, b}}});
  EXPECT_EQ(s0.sizes(), (Shape{2, 2}));
  EXPECT_EQ(values(s0), (std::vector<double>{1, 2, 3, 4}));
  Tensor s1 = run_op_tensor(OpKind::kStack, {{"tensors", std::vector<Tensor>{a, b}}, {"dim", I(-1)}});
  EXPECT_EQ(values(s1), (std::vector<double>{1, 3, 2, 4}));
  expect_error(OpKind::kStack, {{"tensors", std::vector<Tensor>{a, iota(DType::Float32, {3})}}}, "equal size");
}

TEST(IndexingKernels, IndexSelect) {
  Tensor x = iota(DType::Float32, {2, 4});
  Tensor idx = make_tensor(DType::Int32, {3}, {3, 0, 3});
  Tensor out = run_op_tensor(OpKind::kIndexSelect, {{"self", x}, {"dim", I(-1)}, {"index", idx}});
  EXPECT_EQ(out.sizes(), (Shape{2, 3}));
  EXPECT_EQ(values(out), (std::vector<double>{3, 0, 3, 7, 4, 7}));
  expect_error(OpKind::kIndexSelect, {{"self", x}, {"dim", I(0)}, {"index", make_tensor(DType::Int64, {1}, {2})}},
               "out of range");
  expect_error(OpKind::kIndexSelect, {{"self", x}, {"dim", I(0)}, {"index", iota(DType::Int64, {1, 1})}}, "1-d");
  expect_error(OpKind::kIndexSelect, {{"self", x}, {"dim", I(0)}, {"index", iota(DType::Float32, {1})}}, "int64");
}

// Reference for x[i, None-or-whole, j]-style cases: explicit loops in each test.
TEST(IndexingKernels, IndexWithIntegerTensors) {
  Tensor x = iota(DType::Float32, {4, 3});
  Tensor rows = make_tensor(DType::Int64, {3}, {3, -4, 1});
  Tensor r = run_op_tensor(OpKind::kIndexTensor, {{"self", x}, {"indices", Indices{rows}}});
  ASSERT_EQ(r.sizes(), (Shape{3, 3}));
  const int want_rows[] = {3, 0, 1};
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(r.value_at(i * 3 + c), want_rows[i] * 3 + c);
  // x[:, cols]
  Tensor cols = make_tensor(DType::Int64, {2}, {2, 0});
  Tensor c = run_op_tensor(OpKind::kIndexTensor, {{"self", x}, {"indices", Indices{std::nullopt, cols}}});
  ASSERT_EQ(c.sizes(), (Shape{4, 2}));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(c.value_at(i * 2 + 0), i * 3 + 2);
    EXPECT_EQ(c.value_at(i * 2 + 1), i * 3 + 0);
  }
  // x[i, j] with i [2, 1] and j [3] broadcasting to [2, 3].
  Tensor i2 = make_tensor(DType::Int64, {2, 1}, {1, 2});
  Tensor j3 = make_tensor(DType::Int32, {3}, {0, 1, 2});
  Tensor b = run_op_tensor(OpKind::kIndexTensor, {{"self", x}, {"indices", Indices{i2, j3}}});
  ASSERT_EQ(b.sizes(), (Shape{2, 3}));
  for (int p = 0; p < 2; ++p)
    for (int q = 0; q < 3; ++q) EXPECT_EQ(b.value_at(p * 3 + q), (p + 1) * 3 + q);
}

TEST(IndexingKernels, IndexPlacesBroadcastDimsByAdjacency) {
  Tensor x = iota(DType::Float32, {2, 3, 4, 5});
  Tensor i = make_tensor(DType::Int64, {6}, {0, 1, 2, 0, 1, 2});
  Tensor j = make_tensor(DType::Int64, {6}, {3, 2, 1, 0, 3, 2});
  // Adjacent indexed dims 1 and 2: the index dims stay in place -> [2, 6, 5].
  Tensor adj = run_op_tensor(OpKind::kIndexTensor, {{"self", x}, {"indices", Indices{std::nullopt, i, j}}});
  ASSERT_EQ(adj.sizes(), (Shape{2, 6, 5}));
  for (int a = 0; a < 2; ++a)
    for (int k = 0; k < 6; ++k)
      for (int e = 0; e < 5; ++e)
        EXPECT_EQ(adj.value_at((a * 6 + k) * 5 + e), x.value_at(((a * 3 + i.value_at(k)) * 4 + j.value_at(k)) * 5 + e));
  // Indexed dims 0 and 2 are separated by a sliced dim: the index dims go first -> [6, 3, 5].
  Tensor i0 = make_tensor(DType::Int64, {6}, {0, 1, 1, 0, 1, 0});
  Tensor sep = run_op_tensor(OpKind::kIndexTensor, {{"self", x}, {"indices", Indices{i0, std::nullopt, j}}});
  ASSERT_EQ(sep.sizes(), (Shape{6, 3, 5}));
  for (int k = 0; k < 6; ++k)
    for (int b = 0; b < 3; ++b)
      for (int e = 0; e < 5; ++e)
        EXPECT_EQ(sep.value_at((k * 3 + b) * 5 + e),
                  x.value_at(((i0.value_at(k) * 3 + b) * 4 + j.value_at(k)) * 5 + e));
  // x[:, i, :, j]: separated, and the dims left whole keep their order after the index dims -> [6, 2, 4].
  Tensor j5 = make_tensor(DType::Int64, {6}, {4, 3, 2, 1, 0, -1});
  Tensor mid =
      run_op_tensor(OpKind::kIndexTensor, {{"self", x}, {"indices", Indices{std::nullopt, i, std::nullopt, j5}}});
  ASSERT_EQ(mid.sizes(), (Shape{6, 2, 4}));
  for (int k = 0; k < 6; ++k) {
    const int64_t jj = (j5.int_at(k) + 5) % 5;
    for (int a = 0; a < 2; ++a)
      for (int c = 0; c < 4; ++c)
        EXPECT_EQ(mid.value_at((k * 2 + a) * 4 + c), x.value_at(((a * 3 + i.value_at(k)) * 4 + c) * 5 + jj));
  }
}

TEST(IndexingKernels, IndexWithBoolMasks) {
  Tensor x = iota(DType::Int64, {2, 3});
  Tensor m = make_tensor(DType::Bool, {2, 3}, {0, 1, 0, 1, 0, 1});
  Tensor a = run_op_tensor(OpKind::kIndexTensor, {{"self", x}, {"indices", Indices{m}}});
  EXPECT_EQ(a.sizes(), (Shape{3}));
  EXPECT_EQ(values(a), (std::vector<double>{1, 3, 5}));
  Tensor cm = make_tensor(DType::Bool, {3}, {1, 0, 1});
  Tensor b = run_op_tensor(OpKind::kIndexTensor, {{"self", x}, {"indices", Indices{std::nullopt, cm}}});
  EXPECT_EQ(b.sizes(), (Shape{2, 2}));
  EXPECT_EQ(values(b), (std::vector<double>{0, 2, 3, 5}));
  Tensor none = make_tensor(DType::Bool, {2}, {0, 0});
  EXPECT_EQ(run_op_tensor(OpKind::kIndexTensor, {{"self", x}, {"indices", Indices{none}}}).sizes(), (Shape{0, 3}));
  expect_error(OpKind::kIndexTensor, {{"self", x}, {"indices", Indices{cm}}}, "mask");
}

TEST(IndexingKernels, IndexErrors) {
  Tensor x = iota(DType::Float32, {2, 3});
  expect_error(OpKind::kIndexTensor, {{"self", x}, {"indices", Indices{make_tensor(DType::Int64, {1}, {2})}}},
               "out of bounds");
  expect_error(OpKind::kIndexTensor, {{"self", x}, {"indices", Indices{make_tensor(DType::Float32, {1}, {0})}}},
               "int64, int32, uint8 or bool");
  expect_error(OpKind::kIndexTensor, {{"self", x}, {"indices", Indices{make_tensor(DType::Int16, {1}, {0})}}}, "int32");
  Tensor z = make_tensor(DType::Int64, {1}, {0});
  expect_error(OpKind::kIndexTensor, {{"self", x}, {"indices", Indices{z, z, z}}}, "too many indices");
  expect_error(OpKind::kIndexTensor,
               {{"self", x}, {"indices", Indices{iota(DType::Int64, {2}), iota(DType::Int64, {3})}}}, "broadcast");
}

TEST(IndexingKernels, Gather) {
  Tensor x = iota(DType::Float32, {2, 3});
  Tensor idx = make_tensor(DType::Int64, {2, 2}, {0, 0, 2, 1});
  Tensor g = run_op_tensor(OpKind::kGather, {{"self", x}, {"dim", I(1)}, {"index", idx}});
  EXPECT_EQ(values(g), (std::vector<double>{0, 0, 5, 4}));
  Tensor i0 = make_tensor(DType::Int64, {1, 3}, {1, 0, 1});
  EXPECT_EQ(values(run_op_tensor(OpKind::kGather, {{"self", x}, {"dim", I(0)}, {"index", i0}})),
            (std::vector<double>{3, 1, 5}));
  expect_error(OpKind::kGather, {{"self", x}, {"dim", I(1)}, {"index", make_tensor(DType::Int64, {1, 1}, {3})}},
               "out of bounds");
  expect_error(OpKind::kGather, {{"self", x}, {"dim", I(1)}, {"index", make_tensor(DType::Int64, {2}, {0, 1})}},
               "number of dimensions");
  expect_error(OpKind::kGather, {{"self", x}, {"dim", I(1)}, {"index", iota(DType::Int64, {3, 1})}}, "larger");
}

TEST(IndexingKernels, Embedding) {
  Tensor w = iota(DType::Float32, {4, 2});
  Tensor idx = make_tensor(DType::Int64, {2, 2}, {1, 3, 0, 0});
  Tensor e = run_op_tensor(OpKind::kEmbedding, {{"weight", w}, {"indices", idx}, {"padding_idx", I(0)}});
  EXPECT_EQ(e.sizes(), (Shape{2, 2, 2}));
  EXPECT_EQ(values(e), (std::vector<double>{2, 3, 6, 7, 0, 1, 0, 1}));
  expect_error(OpKind::kEmbedding, {{"weight", w}, {"indices", make_tensor(DType::Int64, {1}, {4})}}, "out of range");
  expect_error(OpKind::kEmbedding, {{"weight", iota(DType::Float32, {4})}, {"indices", idx}}, "2-D");
}

TEST(IndexingKernels, TrilTriu) {
  Tensor x = make_tensor(DType::Int32, {3, 4}, std::vector<double>(12, 1));
  for (int64_t diag : {-1, 0, 2}) {
    Tensor lo = run_op_tensor(OpKind::kTril, {{"self", x}, {"diagonal", I(diag)}});
    Tensor up = run_op_tensor(OpKind::kTriu, {{"self", x}, {"diagonal", I(diag)}});
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 4; ++c) {
        EXPECT_EQ(lo.value_at(r * 4 + c), c <= r + diag ? 1 : 0);
        EXPECT_EQ(up.value_at(r * 4 + c), c >= r + diag ? 1 : 0);
      }
  }
  Tensor b = run_op_tensor(OpKind::kTriu, {{"self", iota(DType::Float32, {2, 2, 2})}});
  EXPECT_EQ(values(b), (std::vector<double>{0, 1, 0, 3, 4, 5, 0, 7}));
  expect_error(OpKind::kTril, {{"self", iota(DType::Float32, {3})}}, "2 dimensions");
}

TEST(IndexingKernels, Repeat) {
  Tensor x = iota(DType::Float32, {2, 3});
  Tensor r = run_op_tensor(OpKind::kRepeat, {{"self", x}, {"repeats", Ints({2, 1, 2})}});
  ASSERT_EQ(r.sizes(), (Shape{2, 2, 6}));
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 6; ++c) EXPECT_EQ(r.value_at((a * 2 + b) * 6 + c), b * 3 + c % 3);
  expect_error(OpKind::kRepeat, {{"self", x}, {"repeats", Ints({2})}}, "repeat dims");
}

TEST(IndexingKernels, ConstantPadNd) {
  Tensor x = iota(DType::Float32, {2, 3});
  Tensor p = run_op_tensor(OpKind::kConstantPadNd, {{"self", x}, {"pad", Ints({1, 2})}, {"value", F(9)}});
  ASSERT_EQ(p.sizes(), (Shape{2, 6}));
  EXPECT_EQ(values(p), (std::vector<double>{9, 0, 1, 2, 9, 9, 9, 3, 4, 5, 9, 9}));
  Tensor q = run_op_tensor(OpKind::kConstantPadNd, {{"self", x}, {"pad", Ints({-1, 0, 1, 0})}});
  ASSERT_EQ(q.sizes(), (Shape{3, 2}));
  EXPECT_EQ(values(q), (std::vector<double>{0, 0, 1, 2, 4, 5}));
  expect_error(OpKind::kConstantPadNd, {{"self", x}, {"pad", Ints({1})}}, "even");
  expect_error(OpKind::kConstantPadNd, {{"self", x}, {"pad", Ints({-2, -2})}}, "negative output size");
}

// Reflect mirrors about the edge (not repeating it), replicate repeats the
// edge, circular wraps: rows of [0 1 2 3] padded (2, 3), written out by hand.
TEST(IndexingKernels, PadModesRepeatTheInputsOwnElements) {
  Tensor x = iota(DType::Float32, {1, 2, 4});  // rows [0 1 2 3], [4 5 6 7]
  Tensor r = run_op_tensor(OpKind::kPad, {{"self", x}, {"pad", Ints({2, 3})}, {"mode", S("reflect")}});
  ASSERT_EQ(r.sizes(), (Shape{1, 2, 9}));
  EXPECT_EQ(values(r), (std::vector<double>{2, 1, 0, 1, 2, 3, 2, 1, 0, 6, 5, 4, 5, 6, 7, 6, 5, 4}));
  Tensor p = run_op_tensor(OpKind::kPad, {{"self", x}, {"pad", Ints({2, 3})}, {"mode", S("replicate")}});
  EXPECT_EQ(values(p), (std::vector<double>{0, 0, 0, 1, 2, 3, 3, 3, 3, 4, 4, 4, 5, 6, 7, 7, 7, 7}));
  Tensor c = run_op_tensor(OpKind::kPad, {{"self", x}, {"pad", Ints({2, 3})}, {"mode", S("circular")}});
  EXPECT_EQ(values(c), (std::vector<double>{2, 3, 0, 1, 2, 3, 0, 1, 2, 6, 7, 4, 5, 6, 7, 4, 5, 6}));
  // Two dims at once (the last first in `pad`), through the ATen dialect's spelling.
  Tensor two = run_op_tensor(OpKind::kReflectionPad2d, {{"self", x}, {"padding", Ints({1, 0, 1, 0})}});
  ASSERT_EQ(two.sizes(), (Shape{1, 3, 5}));
  EXPECT_EQ(values(two), (std::vector<double>{5, 4, 5, 6, 7, 1, 0, 1, 2, 3, 5, 4, 5, 6, 7}));
  Tensor rep = run_op_tensor(OpKind::kReplicationPad1d, {{"self", x}, {"padding", Ints({0, 2})}});
  EXPECT_EQ(values(rep), (std::vector<double>{0, 1, 2, 3, 3, 3, 4, 5, 6, 7, 7, 7}));
  // A non-contiguous input reads through its strides.
  Tensor t = transposed(DType::Float32, {0, 1, 2, 3, 4, 5}, 2, 3);  // [[0 1 2] [3 4 5]] as a view
  EXPECT_EQ(values(run_op_tensor(OpKind::kPad, {{"self", t}, {"pad", Ints({1, 1})}, {"mode", S("replicate")}})),
            (std::vector<double>{0, 0, 1, 2, 2, 3, 3, 4, 5, 5}));
  expect_error(OpKind::kPad, {{"self", x}, {"pad", Ints({4, 0})}, {"mode", S("reflect")}}, "less than");
  expect_error(OpKind::kPad, {{"self", x}, {"pad", Ints({5, 0})}, {"mode", S("circular")}}, "at most");
  // Replicate crops with negative padding, as constant mode does; an empty batch pads its other dims.
  EXPECT_EQ(values(run_op_tensor(OpKind::kPad, {{"self", x}, {"pad", Ints({-1, 2})}, {"mode", S("replicate")}})),
            (std::vector<double>{1, 2, 3, 3, 3, 5, 6, 7, 7, 7}));
  EXPECT_EQ(
      run_op_tensor(OpKind::kPad,
                    {{"self", Tensor::zeros(DType::Float32, {0, 3, 3})}, {"pad", Ints({1, 2})}, {"mode", S("reflect")}})
          .sizes(),
      (Shape{0, 3, 6}));
  expect_error(OpKind::kPad, {{"self", x}, {"pad", Ints({-1, 0})}, {"mode", S("reflect")}}, "negative");
  expect_error(OpKind::kPad, {{"self", x}, {"pad", Ints({1, 1})}, {"mode", S("wrap")}}, "pad mode 'wrap'");
  expect_error(OpKind::kReflectionPad2d, {{"self", x}, {"padding", Ints({1, 1})}}, "padding of 2 dims");
}

TEST(IndexingKernels, Nonzero) {
  Tensor x = make_tensor(DType::Float32, {2, 2}, {0, 1.5, -2, 0});
  Tensor n = run_op_tensor(OpKind::kNonzero, {{"self", x}});
  EXPECT_EQ(n.dtype(), DType::Int64);
  EXPECT_EQ(n.sizes(), (Shape{2, 2}));
  EXPECT_EQ(values(n), (std::vector<double>{0, 1, 1, 0}));
  EXPECT_EQ(run_op_tensor(OpKind::kNonzero, {{"self", Tensor::zeros(DType::Bool, {3})}}).sizes(), (Shape{0, 1}));
}

TEST(IndexingKernels, Cumsum) {
  Tensor x = make_tensor(DType::Int32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor c = run_op_tensor(OpKind::kCumsum, {{"self", x}, {"dim", I(-1)}});
  EXPECT_EQ(c.dtype(), DType::Int64);
  EXPECT_EQ(values(c), (std::vector<double>{1, 3, 6, 4, 9, 15}));
  Tensor c0 = run_op_tensor(OpKind::kCumsum, {{"self", x}, {"dim", I(0)}, {"dtype", D(DType::Float64)}});
  EXPECT_EQ(c0.dtype(), DType::Float64);
  EXPECT_EQ(values(c0), (std::vector<double>{1, 2, 3, 5, 7, 9}));
  Tensor t = transposed(DType::Float32, {1, 2, 3, 4}, 2, 2);
  EXPECT_EQ(values(run_op_tensor(OpKind::kCumsum, {{"self", t}, {"dim", I(1)}})), (std::vector<double>{1, 3, 3, 7}));
  Tensor b = make_tensor(DType::Bool, {3}, {1, 0, 1});
  EXPECT_EQ(values(run_op_tensor(OpKind::kCumsum, {{"self", b}, {"dim", I(0)}})), (std::vector<double>{1, 1, 2}));
  Tensor h = make_tensor(DType::Float16, {3}, {2048, 1, 1});
  // Accumulated in float, rounded per element: 2049 -> 2048 (ties to even), 2050 exact.
  EXPECT_EQ(values(run_op_tensor(OpKind::kCumsum, {{"self", h}, {"dim", I(0)}})),
            (std::vector<double>{2048, 2048, 2050}));
  expect_error(OpKind::kCumsum, {{"self", x}, {"dim", I(2)}}, "out of range");
}

TEST(IndexingKernels, PixelShuffle) {
  const int r = 2, oc = 2, h = 2, w = 3;
  Tensor x = iota(DType::Float32, {1, oc * r * r, h, w});
  Tensor out = run_op_tensor(OpKind::kPixelShuffle, {{"self", x}, {"upscale_factor", I(r)}});
  ASSERT_EQ(out.sizes(), (Shape{1, oc, h * r, w * r}));
  for (int c = 0; c < oc; ++c)
    for (int y = 0; y < h * r; ++y)
      for (int xx = 0; xx < w * r; ++xx) {
        const int in_c = c * r * r + (y % r) * r + (xx % r);
        EXPECT_EQ(out.value_at((c * h * r + y) * w * r + xx), (in_c * h + y / r) * w + xx / r);
      }
  expect_error(OpKind::kPixelShuffle, {{"self", iota(DType::Float32, {1, 3, 2, 2})}, {"upscale_factor", I(2)}},
               "divisible");
}

// flip: reversed along each named dim (negative dims count from the end), any dtype; a repeated dim is an error.
TEST(IndexingKernels, FlipReversesTheNamedDims) {
  Tensor x = iota(DType::Int64, {2, 3});
  EXPECT_EQ(values(run_op_tensor(OpKind::kFlip, {{"self", x}, {"dims", Ints({1})}})),
            (std::vector<double>{2, 1, 0, 5, 4, 3}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kFlip, {{"self", x}, {"dims", Ints({0, -1})}})),
            (std::vector<double>{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kFlip, {{"self", x}, {"dims", Ints({})}})), values(x));
  Tensor h = make_tensor(DType::Float16, {3}, {0.5, 1.5, 2.5});
  Tensor fh = run_op_tensor(OpKind::kFlip, {{"self", h}, {"dims", Ints({0})}});
  EXPECT_EQ(fh.dtype(), DType::Float16);
  EXPECT_EQ(values(fh), (std::vector<double>{2.5, 1.5, 0.5}));
  expect_error(OpKind::kFlip, {{"self", x}, {"dims", Ints({1, -1})}}, "more than once");
  expect_error(OpKind::kFlip, {{"self", x}, {"dims", Ints({2})}}, "out of range");
}

}  // namespace
}  // namespace kiln::cpu

namespace kiln::cpu {
namespace {

// embedding_bag against sums worked out by hand: rows of W are r * 10 + d.
TEST(IndexingKernels, EmbeddingBagReducesEachBag) {
  using namespace testing;
  std::vector<double> w;
  for (int r = 0; r < 5; ++r)
    for (int d = 0; d < 2; ++d) w.push_back(r * 10 + d);
  const Tensor weight = make_tensor(DType::Float32, {5, 2}, w);
  const Tensor idx = make_tensor(DType::Int64, {5}, {1, 3, 3, 0, 4});
  const Tensor off = make_tensor(DType::Int64, {3}, {0, 3, 3});  // bags {1, 3, 3}, {}, {0, 4}
  auto sum = run_op(ir::OpKind::kEmbeddingBagPaddingIdx,
                    {{"weight", weight}, {"indices", idx}, {"offsets", off}, {"mode", I(0)}}, 4);
  ASSERT_TRUE(sum.has_value()) << sum.status().message();
  EXPECT_EQ(values(output(*sum, 0)), (std::vector<double>{70, 73, 0, 0, 40, 42}));
  EXPECT_EQ(values(output(*sum, 2)), (std::vector<double>{3, 0, 2}));  // bag sizes
  auto mean =
      run_op(ir::OpKind::kEmbeddingBagPaddingIdx,
             {{"weight", weight}, {"indices", idx}, {"offsets", off}, {"mode", I(1)}, {"padding_idx", I(3)}}, 4);
  ASSERT_TRUE(mean.has_value());
  EXPECT_EQ(values(output(*mean, 0)), (std::vector<double>{10, 11, 0, 0, 20, 21}));  // row 3 skipped
  auto mx = run_op(ir::OpKind::kEmbeddingBagForwardOnly,
                   {{"weight", weight}, {"indices", idx}, {"offsets", off}, {"mode", I(2)}}, 4);
  ASSERT_TRUE(mx.has_value());
  EXPECT_EQ(values(output(*mx, 0)), (std::vector<double>{30, 31, 0, 0, 40, 41}));
  const std::vector<double> rows = values(output(*mx, 3));  // the rows the maxima came from
  EXPECT_EQ(rows[0], 3);
  EXPECT_EQ(rows[1], 3);
  EXPECT_EQ(rows[4], 4);
  EXPECT_EQ(rows[5], 4);
  // Weighted per sample (sum mode), with the last offset closing the last bag.
  const Tensor psw = make_tensor(DType::Float32, {5}, {1, 0.5, 0.5, 2, -1});
  const Tensor off2 = make_tensor(DType::Int64, {3}, {0, 3, 5});
  auto weighted = run_op(ir::OpKind::kEmbeddingBagPaddingIdx,
                         {{"weight", weight},
                          {"indices", idx},
                          {"offsets", off2},
                          {"mode", I(0)},
                          {"per_sample_weights", psw},
                          {"include_last_offset", B(true)}},
                         4);
  ASSERT_TRUE(weighted.has_value());
  EXPECT_EQ(values(output(*weighted, 0)), (std::vector<double>{40, 42, -40, -39}));
  expect_error(ir::OpKind::kEmbeddingBagPaddingIdx,
               {{"weight", weight},
                {"indices", make_tensor(DType::Int64, {1}, {5})},
                {"offsets", make_tensor(DType::Int64, {1}, {0})}},
               "out of range", 4);
}

}  // namespace
}  // namespace kiln::cpu
