#include <gtest/gtest.h>

#include "unit/lowering/rewrite_test_util.h"

namespace kiln::lowering {
namespace {

using testing::expect_rewrite;

TEST(DecomposeLinear, LinearWithBiasBecomesPermuteMatmulAdd) {
  expect_rewrite(R"(graph(%p_w: float32[4, 3], %p_b: float32[4], %x: float32[2, 5, 3]) {
  %y: float32[2, 5, 4] = aten.linear.default(input=%x, weight=%p_w, bias=%p_b)
  return (%y)
}
)",
                 decompose_linear, R"(graph(%p_w: float32[4, 3], %p_b: float32[4], %x: float32[2, 5, 3]) {
  %wt: float32[3, 4] = aten.permute.default(self=%p_w, dims=[1, 0])
  %mm: float32[2, 5, 4] = aten.matmul.default(self=%x, other=%wt)
  %y: float32[2, 5, 4] = aten.add.Tensor(self=%mm, other=%p_b)
  return (%y)
}
)");
}

TEST(DecomposeLinear, LinearWithoutBiasBecomesPermuteMatmul) {
  expect_rewrite(R"(graph(%p_w: float32[4, 3], %x: float32[5, 3]) {
  %y: float32[5, 4] = aten.linear.default(input=%x, weight=%p_w)
  %z: float32[5, 4] = aten.relu.default(self=%y)
  return (%z)
}
)",
                 decompose_linear, R"(graph(%p_w: float32[4, 3], %x: float32[5, 3]) {
  %wt: float32[3, 4] = aten.permute.default(self=%p_w, dims=[1, 0])
  %y: float32[5, 4] = aten.matmul.default(self=%x, other=%wt)
  %z: float32[5, 4] = aten.relu.default(self=%y)
  return (%z)
}
)");
}

TEST(DecomposeLinear, OneDimensionalWeightIsLeftAlone) {
  // linear with a [K] weight drops the output dim; a plain transpose cannot express that.
  expect_rewrite(R"(graph(%p_w: float32[3], %x: float32[5, 3]) {
  %y: float32[5] = aten.linear.default(input=%x, weight=%p_w)
  return (%y)
}
)",
                 decompose_linear, nullptr);
}

TEST(DecomposeLinear, FoldConstantsThenStoresTheTransposedWeight) {
  ir::Module m = testing::module_from(R"(graph(%p_w: float32[4, 3], %p_b: float32[4], %x: float32[2, 3]) {
  %y: float32[2, 4] = aten.linear.default(input=%x, weight=%p_w, bias=%p_b)
  return (%y)
}
)");
  ir::Module before = testing::clone_module(m);
  ASSERT_TRUE(decompose_linear(m).is_ok());
  ASSERT_TRUE(fold_constants(m).is_ok());
  auto want = ir::parse_graph(
      R"(graph(%p_w: float32[4, 3], %p_b: float32[4], %x: float32[2, 3], %_folded.wt: float32[3, 4]) {
  %mm: float32[2, 4] = aten.matmul.default(self=%x, other=%_folded.wt)
  %y: float32[2, 4] = aten.add.Tensor(self=%mm, other=%p_b)
  return (%y)
}
)");
  ASSERT_TRUE(want.has_value());
  std::string why;
  EXPECT_TRUE(ir::graphs_equal(m.graph, *want, &why)) << why << "\n" << ir::print_graph(m.graph);
  testing::expect_same_outputs(before, m);
}

}  // namespace
}  // namespace kiln::lowering
