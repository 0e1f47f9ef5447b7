#include "lowering/pipeline.h"

#include <gtest/gtest.h>

#include "unit/lowering/rewrite_test_util.h"

namespace kiln::lowering {
namespace {

TEST(Pipeline, PassesInOrder) {
  std::vector<std::string> names;
  for (const PassInfo& p : default_pipeline()) names.push_back(p.name);
  const std::vector<std::string> want = {"merge-storage-aliases",
                                         "functionalize",
                                         "split-complex",
                                         "decompose",
                                         "eliminate-dead-code",
                                         "fold-constants",
                                         "remove-static-asserts",
                                         "remove-identity-casts",
                                         "decompose-linear",
                                         "fold-batch-norm",
                                         "fuse-layer-norm",
                                         "fuse-rms-norm",
                                         "fuse-gelu",
                                         "fuse-hardswish",
                                         "fuse-silu",
                                         "fuse-silu-gate",
                                         "fuse-attention",
                                         "fuse-conv-activation",
                                         "fold-constants",
                                         "fuse-parallel-matmuls",
                                         "eliminate-dead-code",
                                         "order-outputs"};
  EXPECT_EQ(names, want);
}

// Runs the whole pipeline, checks the op histogram and that outputs are unchanged.
void expect_pipeline(const char* text, std::map<std::string, Tensor> weights,
                     const std::map<std::string, int>& want_ops) {
  ir::Module m = testing::module_from(text, std::move(weights));
  ir::Module before = testing::clone_module(m);
  std::vector<std::string> dumped;
  PipelineOptions opts;
  opts.print_after = {"all"};
  opts.dump = [&](const std::string& pass, const std::string&) { dumped.push_back(pass); };
  Status st = run_pipeline(m, default_pipeline(), opts);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(dumped.size(), default_pipeline().size());
  std::map<std::string, int> ops;
  for (const auto& n : m.graph.nodes()) ++ops[std::string(ir::op_target(n->op))];
  EXPECT_EQ(ops, want_ops) << ir::print_graph(m.graph);
  testing::expect_same_outputs(before, m, 1e-4);
}

TEST(Pipeline, ConvolutionBlock) {
  expect_pipeline(
      R"(graph(%p_w: float32[4, 3, 3, 3], %p_g: float32[4], %p_b: float32[4], %b_m: float32[4], %b_v: float32[4], %p_fc: float32[2, 4], %x: float32[2, 3, 8, 8]) {
  %conv: float32[2, 4, 8, 8] = aten.conv2d.default(input=%x, weight=%p_w, padding=[1, 1])
  %bn: float32[2, 4, 8, 8] = aten.batch_norm.default(input=%conv, weight=%p_g, bias=%p_b, running_mean=%b_m, running_var=%b_v, training=false, momentum=0.1, eps=1e-05, cudnn_enabled=true)
  %act: float32[2, 4, 8, 8] = aten.hardtanh.default(self=%bn, min_val=0.0, max_val=6.0)
  %pool: float32[2, 4] = aten.mean.dim(self=%act, dim=[2, 3])
  %y: float32[2, 2] = aten.linear.default(input=%pool, weight=%p_fc)
  return (%y)
}
)",
      {{"v", cpu::testing::random_tensor(DType::Float32, {4}, 2, 1, 0.4, 1.0)}},
      {{"kiln.conv_act", 1}, {"aten.mean.dim", 1}, {"aten.matmul.default", 1}});
}

// An op forced out of engines (fallback_ops) must stay a node of its own: the
// rewrites that would fuse it away are skipped, the others still run.
TEST(Pipeline, ForcedFallbackOpsAreNotFusedAway) {
  const char* text = R"(graph(%p_w: float32[4, 3, 3, 3], %p_fc: float32[2, 4], %x: float32[2, 3, 8, 8]) {
  %conv: float32[2, 4, 8, 8] = aten.conv2d.default(input=%x, weight=%p_w, padding=[1, 1])
  %act: float32[2, 4, 8, 8] = aten.relu.default(self=%conv)
  %pool: float32[2, 4] = aten.mean.dim(self=%act, dim=[2, 3])
  %y: float32[2, 2] = aten.linear.default(input=%pool, weight=%p_fc)
  return (%y)
}
)";
  for (const char* entry : {"relu", "aten.relu", "torch.ops.aten.relu.default"}) {
    ir::Module m = testing::module_from(text, {});
    ir::Module before = testing::clone_module(m);
    PipelineOptions opts;
    opts.keep_ops = {entry};
    ASSERT_TRUE(run_pipeline(m, default_pipeline(), opts).is_ok());
    std::map<std::string, int> ops;
    for (const auto& n : m.graph.nodes()) ++ops[std::string(ir::op_target(n->op))];
    EXPECT_EQ(ops, (std::map<std::string, int>{{"aten.conv2d.default", 1},
                                               {"aten.relu.default", 1},
                                               {"aten.mean.dim", 1},
                                               {"aten.matmul.default", 1}}))
        << entry << "\n"
        << ir::print_graph(m.graph);
    testing::expect_same_outputs(before, m, 1e-4);
  }
}

// A decomposed op forced out of engines stays a node of its own, while the
// other decompositions still run (the decompose pass is not skipped whole).
TEST(Pipeline, ForcedFallbackOpIsNotDecomposedWhileOthersAre) {
  const char* text =
      R"(graph(%x: float32[2, 3], %y: float32[2, 3], %e: float32[2, 3, 5], %b: float32[2, 3, 4], %c: float32[2, 4, 5]) {
  %s: float32[2, 2, 3] = aten.stack.default(tensors=[%x, %y])
  %d: float32[2, 3, 5] = aten.baddbmm.default(self=%e, batch1=%b, batch2=%c)
  return (%s, %d)
}
)";
  ir::Module m = testing::module_from(text, {});
  ir::Module before = testing::clone_module(m);
  PipelineOptions opts;
  opts.keep_ops = {"aten.stack"};
  ASSERT_TRUE(run_pipeline(m, default_pipeline(), opts).is_ok());
  std::map<std::string, int> ops;
  for (const auto& n : m.graph.nodes()) ++ops[std::string(ir::op_target(n->op))];
  EXPECT_EQ(ops["aten.stack.default"], 1) << ir::print_graph(m.graph);
  EXPECT_EQ(ops["aten.baddbmm.default"], 0) << ir::print_graph(m.graph);
  testing::expect_same_outputs(before, m, 1e-5);
}

TEST(Pipeline, TransformerBlock) {
  // Pre-norm block: native layer norm, q/k/v projections, SDPA, tanh-GELU MLP,
  // and an RMS-normed SiLU-gated branch.
  expect_pipeline(
      R"(graph(%p_lw: float32[8], %p_lb: float32[8], %p_wq: float32[8, 8], %p_wk: float32[8, 8], %p_wv: float32[8, 8], %p_rw: float32[8], %p_wg: float32[16, 8], %p_wu: float32[16, 8], %x: float32[2, 5, 8]) {
  %ln: float32[2, 5, 8], %mu: float32[2, 5, 1], %rs: float32[2, 5, 1] = aten.native_layer_norm.default(input=%x, normalized_shape=[8], weight=%p_lw, bias=%p_lb, eps=1e-05)
  %q: float32[2, 5, 8] = aten.linear.default(input=%ln, weight=%p_wq)
  %k: float32[2, 5, 8] = aten.linear.default(input=%ln, weight=%p_wk)
  %v: float32[2, 5, 8] = aten.linear.default(input=%ln, weight=%p_wv)
  %a: float32[2, 5, 8] = aten.scaled_dot_product_attention.default(query=%q, key=%k, value=%v, is_causal=true)
  %h: float32[2, 5, 8] = aten.add.Tensor(self=%x, other=%a)
  %half: float32[2, 5, 8] = aten.mul.Tensor(self=%h, other=0.5)
  %cube: float32[2, 5, 8] = aten.pow.Tensor_Scalar(self=%h, exponent=3.0)
  %kc: float32[2, 5, 8] = aten.mul.Tensor(self=%cube, other=0.044715)
  %in: float32[2, 5, 8] = aten.add.Tensor(self=%h, other=%kc)
  %sc: float32[2, 5, 8] = aten.mul.Tensor(self=%in, other=0.79788456080286541)
  %th: float32[2, 5, 8] = aten.tanh.default(self=%sc)
  %one: float32[2, 5, 8] = aten.add.Tensor(self=%th, other=1.0)
  %gelu: float32[2, 5, 8] = aten.mul.Tensor(self=%half, other=%one)
  %hf: float32[2, 5, 8] = aten.to.dtype(self=%gelu, dtype=dtype.float32)
  %sq: float32[2, 5, 8] = aten.pow.Tensor_Scalar(self=%hf, exponent=2)
  %ms: float32[2, 5, 1] = aten.mean.dim(self=%sq, dim=[-1], keepdim=true)
  %eps: float32[2, 5, 1] = aten.add.Tensor(self=%ms, other=1e-06)
  %r: float32[2, 5, 1] = aten.rsqrt.default(self=%eps)
  %n: float32[2, 5, 8] = aten.mul.Tensor(self=%hf, other=%r)
  aten._assert_tensor_metadata.default(a=%n, dtype=dtype.float32)
  %nb: float32[2, 5, 8] = aten.to.dtype(self=%n, dtype=dtype.float32)
  %rn: float32[2, 5, 8] = aten.mul.Tensor(self=%p_rw, other=%nb)
  %g: float32[2, 5, 16] = aten.linear.default(input=%rn, weight=%p_wg)
  %u: float32[2, 5, 16] = aten.linear.default(input=%rn, weight=%p_wu)
  %s: float32[2, 5, 16] = aten.silu.default(self=%g)
  %y: float32[2, 5, 16] = aten.mul.Tensor(self=%s, other=%u)
  return (%y)
}
)",
      {},
      // q, k and v become one product and three slices, gate and up one and two.
      {{"aten.layer_norm.default", 1},
       {"aten.matmul.default", 2},
       {"aten.slice.Tensor", 5},
       {"kiln.attention", 1},
       {"aten.add.Tensor", 1},
       {"aten.gelu.default", 1},
       {"aten.rms_norm.default", 1},
       {"kiln.silu_mul", 1}});
}

}  // namespace
}  // namespace kiln::lowering
