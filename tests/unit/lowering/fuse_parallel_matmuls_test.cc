#include <gtest/gtest.h>

#include "unit/lowering/rewrite_test_util.h"

namespace kiln::lowering {
namespace {

using testing::expect_rewrite;

TEST(FuseParallelMatmuls, ProjectionsWithBiasesBecomeOneProductAndSlices) {
  // BERT's q, k and v: one input, three constant weights, three bias adds.
  expect_rewrite(R"(graph(%p_wq: float32[8, 4], %p_wk: float32[8, 4], %p_wv: float32[8, 6], %p_bq: float32[4], %p_bk: float32[4], %p_bv: float32[6], %x: float32[2, 5, 8]) {
  %mq: float32[2, 5, 4] = aten.matmul.default(self=%x, other=%p_wq)
  %q: float32[2, 5, 4] = aten.add.Tensor(self=%mq, other=%p_bq)
  %mk: float32[2, 5, 4] = aten.matmul.default(self=%x, other=%p_wk)
  %k: float32[2, 5, 4] = aten.add.Tensor(self=%p_bk, other=%mk)
  %mv: float32[2, 5, 6] = aten.matmul.default(self=%x, other=%p_wv)
  %v: float32[2, 5, 6] = aten.add.Tensor(self=%mv, other=%p_bv)
  %qk: float32[2, 5, 4] = aten.mul.Tensor(self=%q, other=%k)
  return (%qk, %v)
}
)",
                 fuse_parallel_matmuls, R"(graph(%p_wq: float32[8, 4], %p_wk: float32[8, 4], %p_wv: float32[8, 6], %p_bq: float32[4], %p_bk: float32[4], %p_bv: float32[6], %x: float32[2, 5, 8], %w: float32[8, 14], %b: float32[14]) {
  %m: float32[2, 5, 14] = aten.matmul.default(self=%x, other=%w)
  %a: float32[2, 5, 14] = aten.add.Tensor(self=%m, other=%b)
  %q: float32[2, 5, 4] = aten.slice.Tensor(self=%a, dim=2, start=0, end=4, step=1)
  %k: float32[2, 5, 4] = aten.slice.Tensor(self=%a, dim=2, start=4, end=8, step=1)
  %v: float32[2, 5, 6] = aten.slice.Tensor(self=%a, dim=2, start=8, end=14, step=1)
  %qk: float32[2, 5, 4] = aten.mul.Tensor(self=%q, other=%k)
  return (%qk, %v)
}
)");
}

TEST(FuseParallelMatmuls, WeightsWithoutBiasesToo) {
  // A gated MLP's gate and up projections.
  expect_rewrite(R"(graph(%p_wg: float32[8, 16], %p_wu: float32[8, 16], %x: float32[3, 8]) {
  %g: float32[3, 16] = aten.mm.default(self=%x, mat2=%p_wg)
  %u: float32[3, 16] = aten.mm.default(self=%x, mat2=%p_wu)
  %y: float32[3, 16] = aten.mul.Tensor(self=%g, other=%u)
  return (%y)
}
)",
                 fuse_parallel_matmuls, R"(graph(%p_wg: float32[8, 16], %p_wu: float32[8, 16], %x: float32[3, 8], %w: float32[8, 32]) {
  %m: float32[3, 32] = aten.mm.default(self=%x, mat2=%w)
  %g: float32[3, 16] = aten.slice.Tensor(self=%m, dim=1, start=0, end=16, step=1)
  %u: float32[3, 16] = aten.slice.Tensor(self=%m, dim=1, start=16, end=32, step=1)
  %y: float32[3, 16] = aten.mul.Tensor(self=%g, other=%u)
  return (%y)
}
)");
}

TEST(FuseParallelMatmuls, OtherInputsComputedWeightsAndLoneProductsStay) {
  // Different inputs, a weight computed at run time, or only one product: unchanged.
  for (const char* text : {R"(graph(%p_w1: float32[8, 4], %p_w2: float32[8, 4], %x: float32[3, 8], %z: float32[3, 8]) {
  %a: float32[3, 4] = aten.mm.default(self=%x, mat2=%p_w1)
  %b: float32[3, 4] = aten.mm.default(self=%z, mat2=%p_w2)
  %y: float32[3, 4] = aten.mul.Tensor(self=%a, other=%b)
  return (%y)
}
)",
                           R"(graph(%p_w1: float32[8, 4], %x: float32[3, 8], %w2: float32[8, 4]) {
  %a: float32[3, 4] = aten.mm.default(self=%x, mat2=%p_w1)
  %b: float32[3, 4] = aten.mm.default(self=%x, mat2=%w2)
  %y: float32[3, 4] = aten.mul.Tensor(self=%a, other=%b)
  return (%y)
}
)",
                           R"(graph(%p_w1: float32[8, 4], %p_b1: float32[4], %x: float32[3, 8]) {
  %a: float32[3, 4] = aten.mm.default(self=%x, mat2=%p_w1)
  %y: float32[3, 4] = aten.add.Tensor(self=%a, other=%p_b1)
  return (%y)
}
)"}) {
    expect_rewrite(text, fuse_parallel_matmuls, nullptr);
  }
}

}  // namespace
}  // namespace kiln::lowering
