#include <gtest/gtest.h>

#include <limits>

#include "unit/lowering/rewrite_test_util.h"

namespace kiln::lowering {
namespace {

using testing::clone_module;
using testing::expect_rewrite;
using testing::expect_same_outputs;
using testing::module_from;

TEST(FuseAttention, ScaledDotProductAttentionBecomesKilnAttention) {
  expect_rewrite(
      R"(graph(%q: float32[2, 2, 4, 8], %k: float32[2, 2, 6, 8], %v: float32[2, 2, 6, 8], %m: float32[2, 1, 4, 6]) {
  %y: float32[2, 2, 4, 8] = aten.scaled_dot_product_attention.default(query=%q, key=%k, value=%v, attn_mask=%m, scale=0.3)
  return (%y)
}
)",
      fuse_attention,
      R"(graph(%q: float32[2, 2, 4, 8], %k: float32[2, 2, 6, 8], %v: float32[2, 2, 6, 8], %m: float32[2, 1, 4, 6]) {
  %y: float32[2, 2, 4, 8] = kiln.attention(query=%q, key=%k, value=%v, attn_mask=%m, scale=0.3)
  return (%y)
}
)",
      {}, 0.0);
  expect_rewrite(R"(graph(%q: float32[3, 4, 8], %k: float32[3, 4, 8], %v: float32[3, 4, 2]) {
  %y: float32[3, 4, 2] = aten.scaled_dot_product_attention.default(query=%q, key=%k, value=%v, attn_mask=None, dropout_p=0.0, is_causal=true)
  return (%y)
}
)",
                 fuse_attention, R"(graph(%q: float32[3, 4, 8], %k: float32[3, 4, 8], %v: float32[3, 4, 2]) {
  %y: float32[3, 4, 2] = kiln.attention(query=%q, key=%k, value=%v, is_causal=true)
  return (%y)
}
)",
                 {}, 0.0);
}

TEST(FuseAttention, DropoutAndGroupedQueriesStayScaledDotProductAttention) {
  ir::Module m =
      testing::module_from(R"(graph(%q: float32[1, 4, 3, 8], %k: float32[1, 2, 3, 8], %v: float32[1, 2, 3, 8]) {
  %a: float32[1, 4, 3, 8] = aten.scaled_dot_product_attention.default(query=%q, key=%k, value=%v, dropout_p=0.1)
  %b: float32[1, 4, 3, 8] = aten.scaled_dot_product_attention.default(query=%q, key=%k, value=%v, enable_gqa=true)
  return (%a, %b)
}
)");
  const std::string before = ir::print_graph(m.graph);
  ASSERT_TRUE(fuse_attention(m).is_ok());
  EXPECT_EQ(ir::print_graph(m.graph), before);
}

// transformers' repeat_kv before attention: the copies of the key/value heads
// are not made; the attention reads the heads themselves.
TEST(FuseAttention, RepeatedKeyValueHeadsBecomeGroupedQueryAttention) {
  expect_rewrite(
      R"(graph(%q: float32[1, 4, 3, 8], %k: float32[1, 2, 5, 8], %v: float32[1, 2, 5, 6], %m: float32[1, 1, 3, 5]) {
  %ku: float32[1, 2, 1, 5, 8] = aten.unsqueeze.default(self=%k, dim=2)
  %ke: float32[1, 2, 2, 5, 8] = aten.expand.default(self=%ku, size=[1, 2, 2, 5, 8])
  %kr: float32[1, 4, 5, 8] = aten.reshape.default(self=%ke, shape=[1, 4, 5, 8])
  %vu: float32[1, 2, 1, 5, 6] = aten.unsqueeze.default(self=%v, dim=2)
  %ve: float32[1, 2, 2, 5, 6] = aten.expand.default(self=%vu, size=[1, 2, 2, 5, 6])
  %vr: float32[1, 4, 5, 6] = aten.reshape.default(self=%ve, shape=[1, 4, 5, 6])
  %y: float32[1, 4, 3, 6] = aten.scaled_dot_product_attention.default(query=%q, key=%kr, value=%vr, attn_mask=%m, scale=0.25)
  return (%y)
}
)",
      fuse_attention,
      R"(graph(%q: float32[1, 4, 3, 8], %k: float32[1, 2, 5, 8], %v: float32[1, 2, 5, 6], %m: float32[1, 1, 3, 5]) {
  %y: float32[1, 4, 3, 6] = kiln.attention(query=%q, key=%k, value=%v, attn_mask=%m, scale=0.25, enable_gqa=true)
  return (%y)
}
)",
      {}, 1e-6);
}

TEST(FuseAttention, RepeatsThatAreNotPerHeadStay) {
  // Keys repeated along the sequence (unsqueeze at dim 3), or keys and values repeated differently.
  ir::Module m = testing::module_from(
      R"(graph(%q: float32[1, 2, 3, 8], %k: float32[1, 2, 5, 8], %v: float32[1, 2, 10, 8], %v2: float32[1, 1, 5, 8]) {
  %ku: float32[1, 2, 5, 1, 8] = aten.unsqueeze.default(self=%k, dim=3)
  %ke: float32[1, 2, 5, 2, 8] = aten.expand.default(self=%ku, size=[1, 2, 5, 2, 8])
  %kr: float32[1, 2, 10, 8] = aten.reshape.default(self=%ke, shape=[1, 2, 10, 8])
  %a: float32[1, 2, 3, 8] = kiln.attention(query=%q, key=%kr, value=%v)
  %vu: float32[1, 1, 1, 5, 8] = aten.unsqueeze.default(self=%v2, dim=2)
  %ve: float32[1, 1, 2, 5, 8] = aten.expand.default(self=%vu, size=[1, 1, 2, 5, 8])
  %vr: float32[1, 2, 5, 8] = aten.reshape.default(self=%ve, shape=[1, 2, 5, 8])
  %b: float32[1, 2, 3, 8] = kiln.attention(query=%q, key=%k, value=%vr)
  return (%a, %b)
}
)");
  const std::string before = ir::print_graph(m.graph);
  ASSERT_TRUE(fuse_attention(m).is_ok());
  EXPECT_EQ(ir::print_graph(m.graph), before);
}

TEST(FuseAttention, MatmulSoftmaxMatmulWithScaleMaskAndDropout) {
  expect_rewrite(
      R"(graph(%q: float32[2, 2, 4, 8], %k: float32[2, 2, 6, 8], %v: float32[2, 2, 6, 5], %mask: float32[4, 6]) {
  %kt: float32[2, 2, 8, 6] = aten.transpose.int(self=%k, dim0=-2, dim1=-1)
  %s: float32[2, 2, 4, 6] = aten.matmul.default(self=%q, other=%kt)
  %ss: float32[2, 2, 4, 6] = aten.div.Tensor(self=%s, other=4.0)
  %sm: float32[2, 2, 4, 6] = aten.add.Tensor(self=%mask, other=%ss)
  %p: float32[2, 2, 4, 6] = aten.softmax.int(self=%sm, dim=-1)
  %pd: float32[2, 2, 4, 6] = aten.dropout.default(input=%p, p=0.1, train=false)
  %y: float32[2, 2, 4, 5] = aten.matmul.default(self=%pd, other=%v)
  return (%y)
}
)",
      fuse_attention,
      R"(graph(%q: float32[2, 2, 4, 8], %k: float32[2, 2, 6, 8], %v: float32[2, 2, 6, 5], %mask: float32[4, 6]) {
  %y: float32[2, 2, 4, 5] = kiln.attention(query=%q, key=%k, value=%v, attn_mask=%mask, scale=0.25, is_causal=false)
  return (%y)
}
)");
}

TEST(FuseAttention, UnscaledScoresGetScaleOne) {
  expect_rewrite(R"(graph(%q: float32[3, 4, 8], %k: float32[3, 6, 8], %v: float32[3, 6, 8]) {
  %kt: float32[3, 8, 6] = aten.permute.default(self=%k, dims=[0, 2, 1])
  %s: float32[3, 4, 6] = aten.bmm.default(self=%q, mat2=%kt)
  %p: float32[3, 4, 6] = aten._softmax.default(self=%s, dim=2, half_to_float=false)
  %y: float32[3, 4, 8] = aten.bmm.default(self=%p, mat2=%v)
  return (%y)
}
)",
                 fuse_attention, R"(graph(%q: float32[3, 4, 8], %k: float32[3, 6, 8], %v: float32[3, 6, 8]) {
  %y: float32[3, 4, 8] = kiln.attention(query=%q, key=%k, value=%v, scale=1.0, is_causal=false)
  return (%y)
}
)");
}

// SDPA's decomposition in the ATen dialect (as GPT-2 exports): q and k^T scaled
// by sqrt(scale) each, 3-d bmm views, a float mask and _safe_softmax's guard.
constexpr const char* kAtenAttention =
    R"(graph(%qi: float32[1, 2, 5, 4], %ki: float32[1, 2, 5, 4], %vi: float32[1, 2, 5, 4], %c_mask: float32[1, 1, 5, 5]) {
  %mul: float32[1, 2, 5, 4] = aten.mul.Scalar(self=%qi, other=0.5)
  %permute: float32[1, 2, 4, 5] = aten.permute.default(self=%ki, dims=[0, 1, 3, 2])
  %mul_1: float32[1, 2, 4, 5] = aten.mul.Scalar(self=%permute, other=0.5)
  %expand: float32[1, 2, 5, 4] = aten.expand.default(self=%mul, size=[1, 2, 5, 4])
  %view: float32[2, 5, 4] = aten.view.default(self=%expand, size=[2, 5, 4])
  %expand_1: float32[1, 2, 4, 5] = aten.expand.default(self=%mul_1, size=[1, 2, 4, 5])
  %view_1: float32[2, 4, 5] = aten.view.default(self=%expand_1, size=[2, 4, 5])
  %bmm: float32[2, 5, 5] = aten.bmm.default(self=%view, mat2=%view_1)
  %view_2: float32[1, 2, 5, 5] = aten.view.default(self=%bmm, size=[1, 2, 5, 5])
  %add: float32[1, 2, 5, 5] = aten.add.Tensor(self=%view_2, other=%c_mask)
  %sm: float32[1, 2, 5, 5] = aten._softmax.default(self=%add, dim=-1, half_to_float=false)
  %eq: bool[1, 2, 5, 5] = aten.eq.Scalar(self=%add, other=-inf)
  %ln: bool[1, 2, 5, 5] = aten.logical_not.default(self=%eq)
  %any: bool[1, 2, 5, 1] = aten.any.dim(self=%ln, dim=-1, keepdim=true)
  %ln_1: bool[1, 2, 5, 1] = aten.logical_not.default(self=%any)
  %fl: float32[1, 2, 5, 5] = aten.full_like.default(self=%sm, fill_value=0, pin_memory=false, memory_format=4)
  %w: float32[1, 2, 5, 5] = aten.where.self(condition=%ln_1, self=%fl, other=%sm)
  %expand_2: float32[1, 2, 5, 5] = aten.expand.default(self=%w, size=[1, 2, 5, 5])
  %view_3: float32[2, 5, 5] = aten.view.default(self=%expand_2, size=[2, 5, 5])
  %expand_3: float32[1, 2, 5, 4] = aten.expand.default(self=%vi, size=[1, 2, 5, 4])
  %clone: float32[1, 2, 5, 4] = aten.clone.default(self=%expand_3, memory_format=1)
  %view_4: float32[2, 5, 4] = aten.view.default(self=%clone, size=[2, 5, 4])
  %bmm_1: float32[2, 5, 4] = aten.bmm.default(self=%view_3, mat2=%view_4)
  %view_5: float32[1, 2, 5, 4] = aten.view.default(self=%bmm_1, size=[1, 2, 5, 4])
  return (%view_5)
}
)";

// A causal mask whose first row masks every key (that row's output is 0).
Tensor causal_mask_with_empty_row() {
  Tensor m = Tensor::zeros(DType::Float32, {1, 1, 5, 5});
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j)
      if (j > i || i == 0) m.data<float>()[i * 5 + j] = -std::numeric_limits<float>::infinity();
  return m;
}

TEST(FuseAttention, AtenDialectBmmFormWithSafeSoftmax) {
  ir::Module m = expect_rewrite(
      kAtenAttention, fuse_attention,
      R"(graph(%qi: float32[1, 2, 5, 4], %ki: float32[1, 2, 5, 4], %vi: float32[1, 2, 5, 4], %c_mask: float32[1, 1, 5, 5]) {
  %view_5: float32[1, 2, 5, 4] = kiln.attention(query=%qi, key=%ki, value=%vi, attn_mask=%c_mask, scale=0.25, is_causal=false)
  return (%view_5)
}
)",
      {{"mask", causal_mask_with_empty_row()}});
  auto out = testing::run_module(m, testing::random_user_inputs(m, 5));
  ASSERT_TRUE(out.has_value());
  for (int i = 0; i < 4; ++i) EXPECT_EQ((*out)[0].value_at(i), 0.0);  // the fully masked row
}

// The decompose pass writes the guard's full_like(sm, 0) as where(true, 0, sm):
// the guard is still found.
TEST(FuseAttention, SafeSoftmaxGuardAfterDecomposition) {
  ir::Module m = module_from(kAtenAttention, {{"mask", causal_mask_with_empty_row()}});
  const ir::Module original = clone_module(m);
  ASSERT_TRUE(decompose_composites(m).is_ok());
  auto count = [&](ir::OpKind op) {
    int c = 0;
    for (const auto& n : m.graph.nodes()) c += n->op == op;
    return c;
  };
  EXPECT_EQ(count(ir::OpKind::kFullLike), 0);
  EXPECT_EQ(count(ir::OpKind::kWhere), 2);
  ASSERT_TRUE(fuse_attention(m).is_ok());
  ASSERT_TRUE(eliminate_dead_code(m).is_ok());
  EXPECT_EQ(count(ir::OpKind::kAttention), 1);
  EXPECT_EQ(count(ir::OpKind::kWhere), 0);
  expect_same_outputs(original, m);
}

TEST(FuseAttention, SoftmaxOverAnotherDimOrSharedScoresIsLeftAlone) {
  expect_rewrite(R"(graph(%q: float32[3, 4, 8], %k: float32[3, 4, 8], %v: float32[3, 4, 8]) {
  %kt: float32[3, 8, 4] = aten.transpose.int(self=%k, dim0=1, dim1=2)
  %s: float32[3, 4, 4] = aten.matmul.default(self=%q, other=%kt)
  %p: float32[3, 4, 4] = aten.softmax.int(self=%s, dim=1)
  %y: float32[3, 4, 8] = aten.matmul.default(self=%p, other=%v)
  return (%y)
}
)",
                 fuse_attention, nullptr);
  expect_rewrite(R"(graph(%q: float32[3, 4, 8], %k: float32[3, 4, 8], %v: float32[3, 4, 8]) {
  %kt: float32[3, 8, 4] = aten.transpose.int(self=%k, dim0=1, dim1=2)
  %s: float32[3, 4, 4] = aten.matmul.default(self=%q, other=%kt)
  %p: float32[3, 4, 4] = aten.softmax.int(self=%s, dim=-1)
  %y: float32[3, 4, 8] = aten.matmul.default(self=%p, other=%v)
  return (%y, %s)
}
)",
                 fuse_attention, nullptr);
  // k is not transposed: q k, not q k^T.
  expect_rewrite(R"(graph(%q: float32[3, 4, 4], %k: float32[3, 4, 4], %v: float32[3, 4, 8]) {
  %s: float32[3, 4, 4] = aten.matmul.default(self=%q, other=%k)
  %p: float32[3, 4, 4] = aten.softmax.int(self=%s, dim=-1)
  %y: float32[3, 4, 8] = aten.matmul.default(self=%p, other=%v)
  return (%y)
}
)",
                 fuse_attention, nullptr);
}

TEST(FuseAttention, BatchDimsThatOnlyMatchInProductAreLeftAlone) {
  // q viewed from [2, 3] batches and k from [3, 2]: the bmm lines them up by
  // flat index, which attention's broadcasting would not.
  expect_rewrite(R"(graph(%q: float32[2, 3, 4, 8], %k: float32[3, 2, 4, 8], %vi: float32[2, 3, 4, 8]) {
  %kt: float32[3, 2, 8, 4] = aten.permute.default(self=%k, dims=[0, 1, 3, 2])
  %qv: float32[6, 4, 8] = aten.view.default(self=%q, size=[6, 4, 8])
  %kv: float32[6, 8, 4] = aten.view.default(self=%kt, size=[6, 8, 4])
  %bmm: float32[6, 4, 4] = aten.bmm.default(self=%qv, mat2=%kv)
  %s: float32[2, 3, 4, 4] = aten.view.default(self=%bmm, size=[2, 3, 4, 4])
  %p: float32[2, 3, 4, 4] = aten.softmax.int(self=%s, dim=-1)
  %pv: float32[6, 4, 4] = aten.view.default(self=%p, size=[6, 4, 4])
  %v: float32[6, 4, 8] = aten.view.default(self=%vi, size=[6, 4, 8])
  %o: float32[6, 4, 8] = aten.bmm.default(self=%pv, mat2=%v)
  %y: float32[2, 3, 4, 8] = aten.view.default(self=%o, size=[2, 3, 4, 8])
  return (%y)
}
)",
                 fuse_attention, nullptr);
}

}  // namespace
}  // namespace kiln::lowering
