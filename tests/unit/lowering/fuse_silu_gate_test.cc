#include <gtest/gtest.h>

#include "unit/lowering/rewrite_test_util.h"

namespace kiln::lowering {
namespace {

using testing::expect_rewrite;

TEST(FuseSilu, XTimesSigmoidXBecomesSilu) {
  expect_rewrite(R"(graph(%x: float32[2, 8]) {
  %s: float32[2, 8] = aten.sigmoid.default(self=%x)
  %y: float32[2, 8] = aten.mul.Tensor(self=%s, other=%x)
  return (%y)
}
)",
                 fuse_silu, R"(graph(%x: float32[2, 8]) {
  %y: float32[2, 8] = aten.silu.default(self=%x)
  return (%y)
}
)");
  // A gate: x * sigmoid(g) is not silu.
  expect_rewrite(R"(graph(%x: float32[2, 8], %g: float32[2, 8]) {
  %s: float32[2, 8] = aten.sigmoid.default(self=%g)
  %y: float32[2, 8] = aten.mul.Tensor(self=%x, other=%s)
  return (%y)
}
)",
                 fuse_silu, nullptr);
}

TEST(FuseSiluGate, SiluTimesUpBecomesSiluMulEitherOrder) {
  expect_rewrite(R"(graph(%g: float32[2, 3, 8], %u: float32[2, 3, 8]) {
  %s: float32[2, 3, 8] = aten.silu.default(self=%g)
  %y: float32[2, 3, 8] = aten.mul.Tensor(self=%s, other=%u)
  return (%y)
}
)",
                 fuse_silu_gate, R"(graph(%g: float32[2, 3, 8], %u: float32[2, 3, 8]) {
  %y: float32[2, 3, 8] = kiln.silu_mul(a=%g, b=%u)
  return (%y)
}
)");
  expect_rewrite(R"(graph(%g: bfloat16[4, 8], %u: bfloat16[4, 8]) {
  %s: bfloat16[4, 8] = aten.silu.default(self=%g)
  %y: bfloat16[4, 8] = aten.mul.Tensor(self=%u, other=%s)
  return (%y)
}
)",
                 fuse_silu_gate, R"(graph(%g: bfloat16[4, 8], %u: bfloat16[4, 8]) {
  %y: bfloat16[4, 8] = kiln.silu_mul(a=%g, b=%u)
  return (%y)
}
)",
                 {}, 0.0);
}

TEST(FuseSiluGate, SharedSiluOrTypePromotionIsLeftAlone) {
  expect_rewrite(R"(graph(%g: float32[4, 8], %u: float32[4, 8]) {
  %s: float32[4, 8] = aten.silu.default(self=%g)
  %y: float32[4, 8] = aten.mul.Tensor(self=%s, other=%u)
  %z: float32[4, 8] = aten.add.Tensor(self=%y, other=%s)
  return (%z)
}
)",
                 fuse_silu_gate, nullptr);
  expect_rewrite(R"(graph(%g: float16[4, 8], %u: float32[4, 8]) {
  %s: float16[4, 8] = aten.silu.default(self=%g)
  %y: float32[4, 8] = aten.mul.Tensor(self=%s, other=%u)
  return (%y)
}
)",
                 fuse_silu_gate, nullptr);
}

}  // namespace
}  // namespace kiln::lowering
