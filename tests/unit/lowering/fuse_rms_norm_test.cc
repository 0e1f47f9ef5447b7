#include <gtest/gtest.h>

#include "unit/lowering/rewrite_test_util.h"

namespace kiln::lowering {
namespace {

using testing::expect_rewrite;

TEST(FuseRmsNorm, NormAndWeightBecomeRmsNorm) {
  // Llama's RMSNorm in float32 once the identity casts are gone; the weight
  // multiplies from the left.
  expect_rewrite(R"(graph(%p_w: float32[8], %x: float32[2, 3, 8]) {
  %pow: float32[2, 3, 8] = aten.pow.Tensor_Scalar(self=%x, exponent=2)
  %mean: float32[2, 3, 1] = aten.mean.dim(self=%pow, dim=[-1], keepdim=true)
  %add: float32[2, 3, 1] = aten.add.Tensor(self=%mean, other=1e-06)
  %rsqrt: float32[2, 3, 1] = aten.rsqrt.default(self=%add)
  %norm: float32[2, 3, 8] = aten.mul.Tensor(self=%x, other=%rsqrt)
  %y: float32[2, 3, 8] = aten.mul.Tensor(self=%p_w, other=%norm)
  return (%y)
}
)",
                 fuse_rms_norm, R"(graph(%p_w: float32[8], %x: float32[2, 3, 8]) {
  %y: float32[2, 3, 8] = aten.rms_norm.default(input=%x, normalized_shape=[8], weight=%p_w, eps=1e-06)
  return (%y)
}
)");
}

TEST(FuseRmsNorm, SquareAsProductAndNoWeight) {
  expect_rewrite(R"(graph(%x: float32[4, 6]) {
  %sq: float32[4, 6] = aten.mul.Tensor(self=%x, other=%x)
  %mean: float32[4, 1] = aten.mean.dim(self=%sq, dim=[1], keepdim=true)
  %add: float32[4, 1] = aten.add.Tensor(self=%mean, other=1e-05)
  %rsqrt: float32[4, 1] = aten.rsqrt.default(self=%add)
  %y: float32[4, 6] = aten.mul.Tensor(self=%rsqrt, other=%x)
  return (%y)
}
)",
                 fuse_rms_norm, R"(graph(%x: float32[4, 6]) {
  %y: float32[4, 6] = aten.rms_norm.default(input=%x, normalized_shape=[6], eps=1e-05)
  return (%y)
}
)");
}

TEST(FuseRmsNorm, ReducedPrecisionKeepsTheCastsAndTheWeightMultiply) {
  // The model computes the norm in float32, casts back to bfloat16, then
  // multiplies by the bfloat16 weight: the fused norm stays in float32 and the
  // cast and the bfloat16 multiply stay as written.
  expect_rewrite(R"(graph(%p_w: bfloat16[8], %x: bfloat16[3, 8]) {
  %xf: float32[3, 8] = aten.to.dtype(self=%x, dtype=dtype.float32)
  %pow: float32[3, 8] = aten.pow.Tensor_Scalar(self=%xf, exponent=2)
  %mean: float32[3, 1] = aten.mean.dim(self=%pow, dim=[-1], keepdim=true)
  %add: float32[3, 1] = aten.add.Tensor(self=%mean, other=1e-06)
  %rsqrt: float32[3, 1] = aten.rsqrt.default(self=%add)
  %norm: float32[3, 8] = aten.mul.Tensor(self=%xf, other=%rsqrt)
  %back: bfloat16[3, 8] = aten.to.dtype(self=%norm, dtype=dtype.bfloat16)
  %y: bfloat16[3, 8] = aten.mul.Tensor(self=%p_w, other=%back)
  return (%y)
}
)",
                 fuse_rms_norm, R"(graph(%p_w: bfloat16[8], %x: bfloat16[3, 8]) {
  %xf: float32[3, 8] = aten.to.dtype(self=%x, dtype=dtype.float32)
  %norm: float32[3, 8] = aten.rms_norm.default(input=%xf, normalized_shape=[8], eps=1e-06)
  %back: bfloat16[3, 8] = aten.to.dtype(self=%norm, dtype=dtype.bfloat16)
  %y: bfloat16[3, 8] = aten.mul.Tensor(self=%p_w, other=%back)
  return (%y)
}
)",
                 {}, 1e-2);
}

TEST(FuseRmsNorm, OtherReductionsAndSharedStepsAreLeftAlone) {
  // Mean over the first dim, not the last.
  expect_rewrite(R"(graph(%x: float32[4, 6]) {
  %pow: float32[4, 6] = aten.pow.Tensor_Scalar(self=%x, exponent=2)
  %mean: float32[1, 6] = aten.mean.dim(self=%pow, dim=[0], keepdim=true)
  %add: float32[1, 6] = aten.add.Tensor(self=%mean, other=1e-05)
  %rsqrt: float32[1, 6] = aten.rsqrt.default(self=%add)
  %y: float32[4, 6] = aten.mul.Tensor(self=%x, other=%rsqrt)
  return (%y)
}
)",
                 fuse_rms_norm, nullptr);
  // A fourth power, not a square.
  expect_rewrite(R"(graph(%x: float32[4, 6]) {
  %pow: float32[4, 6] = aten.pow.Tensor_Scalar(self=%x, exponent=4)
  %mean: float32[4, 1] = aten.mean.dim(self=%pow, dim=[-1], keepdim=true)
  %add: float32[4, 1] = aten.add.Tensor(self=%mean, other=1e-05)
  %rsqrt: float32[4, 1] = aten.rsqrt.default(self=%add)
  %y: float32[4, 6] = aten.mul.Tensor(self=%x, other=%rsqrt)
  return (%y)
}
)",
                 fuse_rms_norm, nullptr);
  // The rsqrt is also returned.
  expect_rewrite(R"(graph(%x: float32[4, 6]) {
  %pow: float32[4, 6] = aten.pow.Tensor_Scalar(self=%x, exponent=2)
  %mean: float32[4, 1] = aten.mean.dim(self=%pow, dim=[-1], keepdim=true)
  %add: float32[4, 1] = aten.add.Tensor(self=%mean, other=1e-05)
  %rsqrt: float32[4, 1] = aten.rsqrt.default(self=%add)
  %y: float32[4, 6] = aten.mul.Tensor(self=%x, other=%rsqrt)
  return (%y, %rsqrt)
}
)",
                 fuse_rms_norm, nullptr);
}

}  // namespace
}  // namespace kiln::lowering
