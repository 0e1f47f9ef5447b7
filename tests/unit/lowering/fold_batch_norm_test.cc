#include <gtest/gtest.h>

#include "unit/lowering/rewrite_test_util.h"

namespace kiln::lowering {
namespace {

using testing::expect_rewrite;

// Batch-norm parameters with a positive variance.
std::map<std::string, Tensor> bn_weights(int64_t c) {
  return {{"var", cpu::testing::random_tensor(DType::Float32, {c}, 3, 1, 0.4, 1.0)},
          {"mean", cpu::testing::random_tensor(DType::Float32, {c}, 3, 2)},
          {"gamma", cpu::testing::random_tensor(DType::Float32, {c}, 3, 3, 0.5, 1.0)},
          {"beta", cpu::testing::random_tensor(DType::Float32, {c}, 3, 4)}};
}

TEST(FoldBatchNorm, FoldsIntoTheConvolutionBefore) {
  ir::Module m = expect_rewrite(
      R"(graph(%p_w: float32[4, 3, 3, 3], %p_gamma: float32[4], %p_beta: float32[4], %b_mean: float32[4], %b_var: float32[4], %x: float32[2, 3, 6, 6]) {
  %conv: float32[2, 4, 6, 6] = aten.conv2d.default(input=%x, weight=%p_w, padding=[1, 1])
  %bn: float32[2, 4, 6, 6] = aten.batch_norm.default(input=%conv, weight=%p_gamma, bias=%p_beta, running_mean=%b_mean, running_var=%b_var, training=false, momentum=0.1, eps=1e-05, cudnn_enabled=true)
  %y: float32[2, 4, 6, 6] = aten.relu.default(self=%bn)
  return (%y)
}
)",
      fold_batch_norm,
      R"(graph(%p_w: float32[4, 3, 3, 3], %p_gamma: float32[4], %p_beta: float32[4], %b_mean: float32[4], %b_var: float32[4], %x: float32[2, 3, 6, 6], %_folded.bn.weight: float32[4, 3, 3, 3], %_folded.bn.bias: float32[4]) {
  %bn: float32[2, 4, 6, 6] = aten.conv2d.default(input=%x, weight=%_folded.bn.weight, bias=%_folded.bn.bias, padding=[1, 1])
  %y: float32[2, 4, 6, 6] = aten.relu.default(self=%bn)
  return (%y)
}
)",
      bn_weights(4));
  EXPECT_EQ(m.input_specs.back().kind, ir::InputSpec::Kind::kConstant);
  EXPECT_EQ(m.input_specs.back().target, "_folded.bn.bias");
}

TEST(FoldBatchNorm, AtenDialectConvolutionWithBias) {
  expect_rewrite(
      R"(graph(%p_w: float32[4, 2, 1, 1], %p_cb: float32[4], %p_gamma: float32[4], %p_beta: float32[4], %b_mean: float32[4], %b_var: float32[4], %x: float32[1, 2, 3, 3]) {
  %conv: float32[1, 4, 3, 3] = aten.convolution.default(input=%x, weight=%p_w, bias=%p_cb, stride=[1, 1], padding=[0, 0], dilation=[1, 1], transposed=false, output_padding=[0, 0], groups=1)
  %bn: float32[1, 4, 3, 3], %save_mean: float32[0], %save_invstd: float32[0] = aten._native_batch_norm_legit_no_training.default(input=%conv, weight=%p_gamma, bias=%p_beta, running_mean=%b_mean, running_var=%b_var, momentum=0.1, eps=0.001)
  return (%bn)
}
)",
      fold_batch_norm,
      R"(graph(%p_w: float32[4, 2, 1, 1], %p_cb: float32[4], %p_gamma: float32[4], %p_beta: float32[4], %b_mean: float32[4], %b_var: float32[4], %x: float32[1, 2, 3, 3], %fw: float32[4, 2, 1, 1], %fb: float32[4]) {
  %bn: float32[1, 4, 3, 3] = aten.convolution.default(input=%x, weight=%fw, bias=%fb, stride=[1, 1], padding=[0, 0], dilation=[1, 1], transposed=false, output_padding=[0, 0], groups=1)
  return (%bn)
}
)",
      bn_weights(4));
}

TEST(FoldBatchNorm, WithoutAConvolutionBecomesScaleAndShift) {
  expect_rewrite(
      R"(graph(%p_gamma: float32[3], %p_beta: float32[3], %b_mean: float32[3], %b_var: float32[3], %x: float32[2, 3, 4]) {
  %bn: float32[2, 3, 4] = aten.batch_norm.default(input=%x, weight=%p_gamma, bias=%p_beta, running_mean=%b_mean, running_var=%b_var, training=false, momentum=0.1, eps=1e-05, cudnn_enabled=true)
  return (%bn)
}
)",
      fold_batch_norm,
      R"(graph(%p_gamma: float32[3], %p_beta: float32[3], %b_mean: float32[3], %b_var: float32[3], %x: float32[2, 3, 4], %scale: float32[3, 1], %shift: float32[3, 1]) {
  %s: float32[2, 3, 4] = aten.mul.Tensor(self=%x, other=%scale)
  %bn: float32[2, 3, 4] = aten.add.Tensor(self=%s, other=%shift)
  return (%bn)
}
)",
      bn_weights(3));
}

TEST(FoldBatchNorm, AConvolutionWithAnotherUserIsNotFolded) {
  // The convolution's result is also returned, so its weights must stay; the
  // batch norm alone becomes scale and shift.
  expect_rewrite(
      R"(graph(%p_w: float32[2, 2, 1, 1], %b_mean: float32[2], %b_var: float32[2], %x: float32[1, 2, 2, 2]) {
  %conv: float32[1, 2, 2, 2] = aten.conv2d.default(input=%x, weight=%p_w)
  %bn: float32[1, 2, 2, 2] = aten.batch_norm.default(input=%conv, weight=None, bias=None, running_mean=%b_mean, running_var=%b_var, training=false, momentum=0.1, eps=1e-05, cudnn_enabled=true)
  return (%bn, %conv)
}
)",
      fold_batch_norm,
      R"(graph(%p_w: float32[2, 2, 1, 1], %b_mean: float32[2], %b_var: float32[2], %x: float32[1, 2, 2, 2], %scale: float32[2, 1, 1], %shift: float32[2, 1, 1]) {
  %conv: float32[1, 2, 2, 2] = aten.conv2d.default(input=%x, weight=%p_w)
  %s: float32[1, 2, 2, 2] = aten.mul.Tensor(self=%conv, other=%scale)
  %bn: float32[1, 2, 2, 2] = aten.add.Tensor(self=%s, other=%shift)
  return (%bn, %conv)
}
)",
      bn_weights(2));
}

TEST(FoldBatchNorm, StatisticsThatAreNotConstantStay) {
  // Running statistics given by the caller, a buffer the program writes, and training mode.
  auto unchanged = [](ir::Module m) {
    const std::string before = ir::print_graph(m.graph);
    ASSERT_TRUE(fold_batch_norm(m).is_ok());
    EXPECT_EQ(ir::print_graph(m.graph), before);
  };
  unchanged(testing::module_from(
      R"(graph(%p_w: float32[2, 2, 1, 1], %mean: float32[2], %var: float32[2], %x: float32[1, 2, 2, 2]) {
  %conv: float32[1, 2, 2, 2] = aten.conv2d.default(input=%x, weight=%p_w)
  %bn: float32[1, 2, 2, 2] = aten.batch_norm.default(input=%conv, weight=None, bias=None, running_mean=%mean, running_var=%var, training=false, momentum=0.1, eps=1e-05, cudnn_enabled=true)
  return (%bn)
}
)"));

  ir::Module m = testing::module_from(
      R"(graph(%b_mean: float32[2], %b_var: float32[2], %x: float32[1, 2, 2, 2]) {
  %bn: float32[1, 2, 2, 2] = aten.batch_norm.default(input=%x, weight=None, bias=None, running_mean=%b_mean, running_var=%b_var, training=false, momentum=0.1, eps=1e-05, cudnn_enabled=true)
  %v2: float32[2] = aten.add.Tensor(self=%b_var, other=1)
  return (%v2, %bn)
}
)",
      bn_weights(2));
  m.output_specs[0] = {ir::OutputSpec::Kind::kBufferMutation, "var"};
  unchanged(std::move(m));

  unchanged(testing::module_from(R"(graph(%b_mean: float32[2], %b_var: float32[2], %x: float32[1, 2, 2, 2]) {
  %bn: float32[1, 2, 2, 2] = aten.batch_norm.default(input=%x, weight=None, bias=None, running_mean=%b_mean, running_var=%b_var, training=true, momentum=0.1, eps=1e-05, cudnn_enabled=true)
  return (%bn)
}
)",
                                 bn_weights(2)));
}

TEST(FoldBatchNorm, FoldedWeightsHoldTheScaledValues) {
  // One channel: weight 2, conv bias 1, gamma 3, beta 0.5, mean 4, var 0.25 (eps 0).
  // scale = 3 / 0.5 = 6, so weight' = 12 and bias' = 1 * 6 + 0.5 - 4 * 6 = -17.5.
  auto one = [](double v) { return Tensor::scalar(DType::Float32, v).reshape({1}); };
  ir::Module m = testing::module_from(
      R"(graph(%p_w: float32[1, 1, 1], %p_cb: float32[1], %p_g: float32[1], %p_be: float32[1], %b_m: float32[1], %b_v: float32[1], %x: float32[1, 1, 3]) {
  %conv: float32[1, 1, 3] = aten.conv1d.default(input=%x, weight=%p_w, bias=%p_cb)
  %bn: float32[1, 1, 3] = aten.batch_norm.default(input=%conv, weight=%p_g, bias=%p_be, running_mean=%b_m, running_var=%b_v, training=false, momentum=0.1, eps=0.0, cudnn_enabled=true)
  return (%bn)
}
)",
      {{"w", one(2).reshape({1, 1, 1})},
       {"cb", one(1)},
       {"g", one(3)},
       {"be", one(0.5)},
       {"m", one(4)},
       {"v", one(0.25)}});
  ASSERT_TRUE(fold_batch_norm(m).is_ok());
  EXPECT_EQ(m.weights.at("_folded.bn.weight").item(), 12.0);
  EXPECT_EQ(m.weights.at("_folded.bn.bias").item(), -17.5);
}

}  // namespace
}  // namespace kiln::lowering
