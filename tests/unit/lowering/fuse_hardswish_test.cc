#include <gtest/gtest.h>

#include "unit/lowering/rewrite_test_util.h"

namespace kiln::lowering {
namespace {

using testing::expect_rewrite;

TEST(FuseHardswish, AtenDialectHardswishAndHardsigmoid) {
  // As mobilenet_v3 exports them: clamp(min=0), clamp(max=6), then * x and / 6.
  expect_rewrite(R"(graph(%x: float32[2, 4, 3, 3], %g: float32[2, 4, 1, 1]) {
  %add: float32[2, 4, 3, 3] = aten.add.Tensor(self=%x, other=3)
  %c0: float32[2, 4, 3, 3] = aten.clamp.default(self=%add, min=0)
  %c1: float32[2, 4, 3, 3] = aten.clamp.default(self=%c0, min=None, max=6)
  %mul: float32[2, 4, 3, 3] = aten.mul.Tensor(self=%x, other=%c1)
  %hs: float32[2, 4, 3, 3] = aten.div.Tensor(self=%mul, other=6)
  %add_1: float32[2, 4, 1, 1] = aten.add.Tensor(self=%g, other=3)
  %c2: float32[2, 4, 1, 1] = aten.clamp.default(self=%add_1, min=0)
  %c3: float32[2, 4, 1, 1] = aten.clamp.default(self=%c2, min=None, max=6)
  %sig: float32[2, 4, 1, 1] = aten.div.Tensor(self=%c3, other=6)
  %y: float32[2, 4, 3, 3] = aten.mul.Tensor(self=%sig, other=%hs)
  return (%y)
}
)",
                 fuse_hardswish, R"(graph(%x: float32[2, 4, 3, 3], %g: float32[2, 4, 1, 1]) {
  %hs: float32[2, 4, 3, 3] = aten.hardswish.default(self=%x)
  %sig: float32[2, 4, 1, 1] = aten.hardsigmoid.default(self=%g)
  %y: float32[2, 4, 3, 3] = aten.mul.Tensor(self=%sig, other=%hs)
  return (%y)
}
)",
                 {}, 0.0);
}

TEST(FuseHardswish, Relu6FormAndXTimesHardsigmoid) {
  expect_rewrite(R"(graph(%x: float32[8]) {
  %add: float32[8] = aten.add.Tensor(self=%x, other=3.0)
  %r6: float32[8] = aten.hardtanh.default(self=%add, min_val=0.0, max_val=6.0)
  %d: float32[8] = aten.mul.Tensor(self=%r6, other=0.16666666666666666)
  %y: float32[8] = aten.mul.Tensor(self=%x, other=%d)
  return (%y)
}
)",
                 fuse_hardswish, R"(graph(%x: float32[8]) {
  %y: float32[8] = aten.hardswish.default(self=%x)
  return (%y)
}
)",
                 {}, 1e-6);
}

TEST(FuseHardswish, OtherBoundsOrShiftsAreLeftAlone) {
  expect_rewrite(R"(graph(%x: float32[8]) {
  %add: float32[8] = aten.add.Tensor(self=%x, other=3)
  %c: float32[8] = aten.clamp.default(self=%add, min=0, max=5)
  %y: float32[8] = aten.div.Tensor(self=%c, other=6)
  return (%y)
}
)",
                 fuse_hardswish, nullptr);
  expect_rewrite(R"(graph(%x: float32[8]) {
  %add: float32[8] = aten.add.Tensor(self=%x, other=2)
  %c: float32[8] = aten.clamp.default(self=%add, min=0, max=6)
  %y: float32[8] = aten.div.Tensor(self=%c, other=6)
  return (%y)
}
)",
                 fuse_hardswish, nullptr);
  // The clamp is shared.
  expect_rewrite(R"(graph(%x: float32[8]) {
  %add: float32[8] = aten.add.Tensor(self=%x, other=3)
  %c: float32[8] = aten.clamp.default(self=%add, min=0, max=6)
  %y: float32[8] = aten.div.Tensor(self=%c, other=6)
  return (%y, %c)
}
)",
                 fuse_hardswish, nullptr);
}

}  // namespace
}  // namespace kiln::lowering
