#include <gtest/gtest.h>

#include "unit/lowering/rewrite_test_util.h"

namespace kiln::lowering {
namespace {

using testing::expect_rewrite;

TEST(FuseConvActivation, Conv2dAndRelu) {
  expect_rewrite(R"(graph(%p_w: float32[4, 3, 3, 3], %p_b: float32[4], %x: float32[1, 3, 5, 5]) {
  %conv: float32[1, 4, 3, 3] = aten.conv2d.default(input=%x, weight=%p_w, bias=%p_b)
  %y: float32[1, 4, 3, 3] = aten.relu.default(self=%conv)
  return (%y)
}
)",
                 fuse_conv_activation, R"(graph(%p_w: float32[4, 3, 3, 3], %p_b: float32[4], %x: float32[1, 3, 5, 5]) {
  %y: float32[1, 4, 3, 3] = kiln.conv_act(input=%x, weight=%p_w, bias=%p_b, activation="relu")
  return (%y)
}
)",
                 {}, 0.0);
}

TEST(FuseConvActivation, AtenConvolutionAndRelu6) {
  expect_rewrite(
      R"(graph(%p_w: float32[4, 1, 3, 3], %x: float32[2, 4, 6, 6]) {
  %conv: float32[2, 4, 3, 3] = aten.convolution.default(input=%x, weight=%p_w, bias=None, stride=[2, 2], padding=[1, 1], dilation=[1, 1], transposed=false, output_padding=[0, 0], groups=4)
  %y: float32[2, 4, 3, 3] = aten.hardtanh.default(self=%conv, min_val=0.0, max_val=6.0)
  return (%y)
}
)",
      fuse_conv_activation, R"(graph(%p_w: float32[4, 1, 3, 3], %x: float32[2, 4, 6, 6]) {
  %y: float32[2, 4, 3, 3] = kiln.conv_act(input=%x, weight=%p_w, bias=None, stride=[2, 2], padding=[1, 1], dilation=[1, 1], groups=4, activation="hardtanh", min_val=0.0, max_val=6.0)
  return (%y)
}
)",
      {}, 0.0);
}

TEST(FuseConvActivation, Conv1dWithEachOtherActivation) {
  const char* acts[][2] = {{"aten.silu.default(self=%conv)", "silu"},
                           {"aten.hardswish.default(self=%conv)", "hardswish"},
                           {"aten.gelu.default(self=%conv)", "gelu"},
                           {"aten.gelu.default(self=%conv, approximate=\"tanh\")", "gelu_tanh"},
                           {"aten.sigmoid.default(self=%conv)", "sigmoid"}};
  for (const auto& [op, name] : acts) {
    const std::string before = std::string(R"(graph(%p_w: float32[2, 3, 2], %x: float32[2, 3, 7]) {
  %conv: float32[2, 2, 6] = aten.conv1d.default(input=%x, weight=%p_w)
  %y: float32[2, 2, 6] = )") + op +
                               R"(
  return (%y)
}
)";
    const std::string after = std::string(R"(graph(%p_w: float32[2, 3, 2], %x: float32[2, 3, 7]) {
  %y: float32[2, 2, 6] = kiln.conv_act(input=%x, weight=%p_w, activation=")") +
                              name + R"(")
  return (%y)
}
)";
    SCOPED_TRACE(name);
    expect_rewrite(before.c_str(), fuse_conv_activation, after.c_str(), {}, 0.0);
  }
}

TEST(FuseConvActivation, SharedResultTransposedOrUnbatchedIsLeftAlone) {
  expect_rewrite(R"(graph(%p_w: float32[4, 3, 1, 1], %x: float32[1, 3, 2, 2]) {
  %conv: float32[1, 4, 2, 2] = aten.conv2d.default(input=%x, weight=%p_w)
  %y: float32[1, 4, 2, 2] = aten.relu.default(self=%conv)
  return (%y, %conv)
}
)",
                 fuse_conv_activation, nullptr);
  expect_rewrite(
      R"(graph(%p_w: float32[3, 2, 2, 2], %x: float32[1, 3, 2, 2]) {
  %conv: float32[1, 2, 3, 3] = aten.convolution.default(input=%x, weight=%p_w, bias=None, stride=[1, 1], padding=[0, 0], dilation=[1, 1], transposed=true, output_padding=[0, 0], groups=1)
  %y: float32[1, 2, 3, 3] = aten.relu.default(self=%conv)
  return (%y)
}
)",
      fuse_conv_activation, nullptr);
  expect_rewrite(R"(graph(%p_w: float32[4, 3, 1, 1], %x: float32[3, 2, 2]) {
  %conv: float32[4, 2, 2] = aten.conv2d.default(input=%x, weight=%p_w)
  %y: float32[4, 2, 2] = aten.relu.default(self=%conv)
  return (%y)
}
)",
                 fuse_conv_activation, nullptr);
}

}  // namespace
}  // namespace kiln::lowering
