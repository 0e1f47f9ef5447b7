#include <gtest/gtest.h>

#include "unit/lowering/rewrite_test_util.h"

namespace kiln::lowering {
namespace {

using testing::expect_rewrite;

TEST(FuseLayerNorm, NativeLayerNormWithUnusedStatisticsBecomesLayerNorm) {
  expect_rewrite(R"(graph(%p_w: float32[8], %p_b: float32[8], %x: float32[2, 3, 8]) {
  %y: float32[2, 3, 8], %mean: float32[2, 3, 1], %rstd: float32[2, 3, 1] = aten.native_layer_norm.default(input=%x, normalized_shape=[8], weight=%p_w, bias=%p_b, eps=1e-05)
  %z: float32[2, 3, 8] = aten.add.Tensor(self=%y, other=%x)
  return (%z)
}
)",
                 fuse_layer_norm, R"(graph(%p_w: float32[8], %p_b: float32[8], %x: float32[2, 3, 8]) {
  %y: float32[2, 3, 8] = aten.layer_norm.default(input=%x, normalized_shape=[8], weight=%p_w, bias=%p_b, eps=1e-05)
  %z: float32[2, 3, 8] = aten.add.Tensor(self=%y, other=%x)
  return (%z)
}
)");
}

TEST(FuseLayerNorm, UsedStatisticsKeepNativeLayerNorm) {
  expect_rewrite(R"(graph(%x: float32[2, 8]) {
  %y: float32[2, 8], %mean: float32[2, 1], %rstd: float32[2, 1] = aten.native_layer_norm.default(input=%x, normalized_shape=[8], weight=None, bias=None, eps=1e-05)
  return (%y, %rstd)
}
)",
                 fuse_layer_norm, nullptr);
}

TEST(FuseLayerNorm, NativeGroupNormWithUnusedStatisticsBecomesGroupNorm) {
  expect_rewrite(R"(graph(%p_w: float32[6], %p_b: float32[6], %x: float32[2, 6, 4, 5]) {
  %y: float32[2, 6, 4, 5], %mean: float32[2, 3], %rstd: float32[2, 3] = aten.native_group_norm.default(input=%x, weight=%p_w, bias=%p_b, N=2, C=6, HxW=20, group=3, eps=1e-05)
  %z: float32[2, 6, 4, 5] = aten.relu.default(self=%y)
  return (%z)
}
)",
                 fuse_layer_norm, R"(graph(%p_w: float32[6], %p_b: float32[6], %x: float32[2, 6, 4, 5]) {
  %y: float32[2, 6, 4, 5] = aten.group_norm.default(input=%x, num_groups=3, weight=%p_w, bias=%p_b, eps=1e-05)
  %z: float32[2, 6, 4, 5] = aten.relu.default(self=%y)
  return (%z)
}
)");
  expect_rewrite(R"(graph(%x: float32[2, 6, 4]) {
  %y: float32[2, 6, 4], %mean: float32[2, 2], %rstd: float32[2, 2] = aten.native_group_norm.default(input=%x, weight=None, bias=None, N=2, C=6, HxW=4, group=2, eps=1e-05)
  return (%y, %mean)
}
)",
                 fuse_layer_norm, nullptr);  // statistics used
}

}  // namespace
}  // namespace kiln::lowering
