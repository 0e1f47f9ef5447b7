#include <gtest/gtest.h>

#include "unit/lowering/rewrite_test_util.h"

namespace kiln::lowering {
namespace {

using testing::expect_rewrite;

TEST(FuseGelu, TanhFormAsGpt2WritesIt) {
  expect_rewrite(R"(graph(%x: float32[2, 16]) {
  %mul: float32[2, 16] = aten.mul.Tensor(self=%x, other=0.5)
  %pow: float32[2, 16] = aten.pow.Tensor_Scalar(self=%x, exponent=3.0)
  %mul_1: float32[2, 16] = aten.mul.Tensor(self=%pow, other=0.044714999999999998)
  %add: float32[2, 16] = aten.add.Tensor(self=%x, other=%mul_1)
  %mul_2: float32[2, 16] = aten.mul.Tensor(self=%add, other=0.79788456080286541)
  %tanh: float32[2, 16] = aten.tanh.default(self=%mul_2)
  %add_1: float32[2, 16] = aten.add.Tensor(self=%tanh, other=1.0)
  %y: float32[2, 16] = aten.mul.Tensor(self=%mul, other=%add_1)
  return (%y)
}
)",
                 fuse_gelu, R"(graph(%x: float32[2, 16]) {
  %y: float32[2, 16] = aten.gelu.default(self=%x, approximate="tanh")
  return (%y)
}
)");
}

TEST(FuseGelu, TanhFormWithCubeAsProductsInAnotherOrder) {
  // x * (0.5 * (1 + tanh(c * (0.044715 * x * x * x + x)))) with every operand swapped.
  expect_rewrite(R"(graph(%x: float32[8]) {
  %x2: float32[8] = aten.mul.Tensor(self=%x, other=%x)
  %x3: float32[8] = aten.mul.Tensor(self=%x2, other=%x)
  %k: float32[8] = aten.mul.Tensor(self=%x3, other=0.044715)
  %inner: float32[8] = aten.add.Tensor(self=%k, other=%x)
  %u: float32[8] = aten.mul.Tensor(self=%inner, other=0.7978845608)
  %t: float32[8] = aten.tanh.default(self=%u)
  %s: float32[8] = aten.add.Tensor(self=%t, other=1)
  %h: float32[8] = aten.mul.Tensor(self=%s, other=0.5)
  %y: float32[8] = aten.mul.Tensor(self=%x, other=%h)
  return (%y)
}
)",
                 fuse_gelu, R"(graph(%x: float32[8]) {
  %y: float32[8] = aten.gelu.default(self=%x, approximate="tanh")
  return (%y)
}
)");
}

TEST(FuseGelu, ErfForm) {
  expect_rewrite(R"(graph(%x: float32[3, 5]) {
  %h: float32[3, 5] = aten.mul.Tensor(self=%x, other=0.5)
  %d: float32[3, 5] = aten.div.Tensor(self=%x, other=1.4142135623730951)
  %e: float32[3, 5] = aten.erf.default(self=%d)
  %s: float32[3, 5] = aten.add.Tensor(self=%e, other=1.0)
  %y: float32[3, 5] = aten.mul.Tensor(self=%h, other=%s)
  return (%y)
}
)",
                 fuse_gelu, R"(graph(%x: float32[3, 5]) {
  %y: float32[3, 5] = aten.gelu.default(self=%x)
  return (%y)
}
)");
  expect_rewrite(R"(graph(%x: float32[3, 5]) {
  %d: float32[3, 5] = aten.mul.Tensor(self=%x, other=0.70710678118654757)
  %e: float32[3, 5] = aten.erf.default(self=%d)
  %s: float32[3, 5] = aten.add.Tensor(self=%e, other=1.0)
  %p: float32[3, 5] = aten.mul.Tensor(self=%x, other=%s)
  %y: float32[3, 5] = aten.mul.Tensor(self=%p, other=0.5)
  return (%y)
}
)",
                 fuse_gelu, R"(graph(%x: float32[3, 5]) {
  %y: float32[3, 5] = aten.gelu.default(self=%x)
  return (%y)
}
)");
}

TEST(FuseGelu, WrongConstantsAndSharedStepsAreLeftAlone) {
  // 0.045 is not 0.044715.
  expect_rewrite(R"(graph(%x: float32[2, 16]) {
  %mul: float32[2, 16] = aten.mul.Tensor(self=%x, other=0.5)
  %pow: float32[2, 16] = aten.pow.Tensor_Scalar(self=%x, exponent=3.0)
  %mul_1: float32[2, 16] = aten.mul.Tensor(self=%pow, other=0.045)
  %add: float32[2, 16] = aten.add.Tensor(self=%x, other=%mul_1)
  %mul_2: float32[2, 16] = aten.mul.Tensor(self=%add, other=0.79788456080286541)
  %tanh: float32[2, 16] = aten.tanh.default(self=%mul_2)
  %add_1: float32[2, 16] = aten.add.Tensor(self=%tanh, other=1.0)
  %y: float32[2, 16] = aten.mul.Tensor(self=%mul, other=%add_1)
  return (%y)
}
)",
                 fuse_gelu, nullptr);
  // The erf result is also returned.
  expect_rewrite(R"(graph(%x: float32[3, 5]) {
  %h: float32[3, 5] = aten.mul.Tensor(self=%x, other=0.5)
  %d: float32[3, 5] = aten.div.Tensor(self=%x, other=1.4142135623730951)
  %e: float32[3, 5] = aten.erf.default(self=%d)
  %s: float32[3, 5] = aten.add.Tensor(self=%e, other=1.0)
  %y: float32[3, 5] = aten.mul.Tensor(self=%h, other=%s)
  return (%y, %e)
}
)",
                 fuse_gelu, nullptr);
  // 0.25 * x * (1 + erf(x / sqrt 2)) is half a GELU.
  expect_rewrite(R"(graph(%x: float32[3, 5]) {
  %h: float32[3, 5] = aten.mul.Tensor(self=%x, other=0.25)
  %d: float32[3, 5] = aten.div.Tensor(self=%x, other=1.4142135623730951)
  %e: float32[3, 5] = aten.erf.default(self=%d)
  %s: float32[3, 5] = aten.add.Tensor(self=%e, other=1.0)
  %y: float32[3, 5] = aten.mul.Tensor(self=%h, other=%s)
  return (%y)
}
)",
                 fuse_gelu, nullptr);
}

}  // namespace
}  // namespace kiln::lowering
