// Kernels whose extents or terms come from the data (pooling backward at
// its indices, gradient, multilabel margin loss, segment_reduce) and
// linspace/logspace with tensor ends, against values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "unit/backends/cpu/op_test_helpers.h"

namespace kiln::cpu {
namespace {

using ir::OpKind;
using namespace testing;

TEST(BackwardAndLossKernels, MaxPoolBackwardGradientAndMultilabelMargin) {
  // Two windows chose position 4 of the 3 x 3 plane, one chose position 0.
  const Tensor grad = make_tensor(DType::Float32, {1, 1, 1, 3}, {1.5, 2, -1});
  const Tensor idx = make_tensor(DType::Int64, {1, 1, 1, 3}, {4, 4, 0});
  const Tensor self = Tensor::zeros(DType::Float32, {1, 1, 3, 3});
  EXPECT_EQ(values(run_op_tensor(OpKind::kMaxPool2dWithIndicesBackward, {{"grad_output", grad},
                                                                         {"self", self},
                                                                         {"kernel_size", Is({2, 2})},
                                                                         {"stride", Is({1, 1})},
                                                                         {"padding", Is({0, 0})},
                                                                         {"dilation", Is({1, 1})},
                                                                         {"ceil_mode", B(false)},
                                                                         {"indices", idx}})),
            (std::vector<double>{-1, 0, 0, 0, 3.5, 0, 0, 0, 0}));

  // x = i^2 with spacing 2: inside (x[i+1] - x[i-1]) / 4 = i; edges one-sided.
  const Tensor x = make_tensor(DType::Float32, {5}, {0, 1, 4, 9, 16});
  EXPECT_EQ(values(run_op_tensor(OpKind::kGradientScalarInt, {{"self", x}, {"spacing", F(2.0)}})),
            (std::vector<double>{0.5, 1, 2, 3, 3.5}));
  // Order 2 at the edges is exact for a quadratic: d(i^2)/di = 2i.
  EXPECT_EQ(values(run_op_tensor(OpKind::kGradientScalarInt, {{"self", x}, {"edge_order", I(2)}})),
            (std::vector<double>{0, 2, 4, 6, 8}));

  // One sample, classes 0..3, targets {3, 0} (then -1): terms against classes 1 and 2.
  const Tensor s = make_tensor(DType::Float32, {1, 4}, {0.5, 0.2, 1.0, 0.8});
  const Tensor t = make_tensor(DType::Int64, {1, 4}, {3, 0, -1, 1});
  // target 3 (0.8): max(0, 1 - 0.6) + max(0, 1 + 0.2) = 0.4 + 1.2; target 0 (0.5): 0.7 + 1.5.
  EXPECT_NEAR(run_op_tensor(OpKind::kMultilabelMarginLoss, {{"self", s}, {"target", t}}).item(), (1.6 + 2.2) / 4, 1e-6);
}

TEST(BackwardAndLossKernels, SegmentReduceAndSpacedPoints) {
  // Segments {1, 2}, {}, {3, 4, 5} of a 2-column tensor along axis 0, given by lengths and by offsets.
  const Tensor data = make_tensor(DType::Float32, {5, 2}, {1, -1, 2, -2, 3, -3, 4, -4, 5, -5});
  const Tensor lengths = make_tensor(DType::Int64, {3}, {2, 0, 3});
  const Tensor offsets = make_tensor(DType::Int64, {4}, {0, 2, 2, 5});
  EXPECT_EQ(values(run_op_tensor(OpKind::kSegmentReduce, {{"data", data}, {"reduce", S("sum")}, {"lengths", lengths}})),
            (std::vector<double>{3, -3, 0, 0, 12, -12}));
  EXPECT_EQ(values(run_op_tensor(OpKind::kSegmentReduce,
                                 {{"data", data}, {"reduce", S("max")}, {"offsets", offsets}, {"initial", F(2.5)}})),
            (std::vector<double>{2.5, 2.5, 2.5, 2.5, 5, 2.5}));
  const std::vector<double> mean =
      values(run_op_tensor(OpKind::kSegmentReduce, {{"data", data}, {"reduce", S("mean")}, {"lengths", lengths}}));
  EXPECT_EQ(mean[0], 1.5);
  EXPECT_TRUE(std::isnan(mean[2]));  // an empty segment without an initial value
  EXPECT_EQ(mean[4], 4);

  EXPECT_EQ(values(run_op_tensor(OpKind::kLinspaceTensorScalar,
                                 {{"start", make_tensor(DType::Float32, {}, {-1})}, {"end", F(1.0)}, {"steps", I(5)}})),
            (std::vector<double>{-1, -0.5, 0, 0.5, 1}));
  EXPECT_EQ(values(run_op_tensor(
                OpKind::kLogspaceScalarTensor,
                {{"start", F(0.0)}, {"end", make_tensor(DType::Float32, {}, {3})}, {"steps", I(4)}, {"base", F(2.0)}})),
            (std::vector<double>{1, 2, 4, 8}));
}

}  // namespace
}  // namespace kiln::cpu
