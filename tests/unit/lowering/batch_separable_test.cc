// check_batch_separable: programs whose output rows follow their input rows
// are accepted (with each output's rows per input row); ops that work along
// the batch dimension, reshape it away, take it as a weight or read its size
// as data are refused, naming the node.
#include <gtest/gtest.h>

#include "lowering/pass.h"
#include "unit/lowering/rewrite_test_util.h"

namespace kiln::lowering {
namespace {

using testing::module_from;

Status check(const char* text, std::vector<int64_t>* factors = nullptr) {
  ir::Module m = module_from(text);
  return check_batch_separable(m, "s0", factors);
}

void expect_refused(const char* text, const std::string& node, const std::string& why) {
  Status s = check(text);
  ASSERT_FALSE(s.is_ok()) << text;
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_NE(s.message().find(node), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(why), std::string::npos) << s.message();
}

TEST(BatchSeparable, RowWiseProgramsAreAcceptedWithTheirRowsPerInputRow) {
  std::vector<int64_t> factors;
  Status s = check(R"(graph(%x: float32[s0, 4, 8], %p_w: float32[3, 8], %p_b: float32[3], %p_g: float32[1, 4, 1]) {
  %flat: float32[4*s0, 8] = aten.view.default(self=%x, size=[-1, 8])
  %lin: float32[4*s0, 3] = aten.linear.default(input=%flat, weight=%p_w, bias=%p_b)
  %back: float32[s0, 4, 3] = aten.view.default(self=%lin, size=[-1, 4, 3])
  %scaled: float32[s0, 4, 3] = aten.mul.Tensor(self=%back, other=%p_g)
  %sm: float32[s0, 4, 3] = aten.softmax.int(self=%scaled, dim=-1)
  %t: float32[s0, 3, 4] = aten.transpose.int(self=%sm, dim0=1, dim1=2)
  %m: float32[s0, 3] = aten.mean.dim(self=%t, dim=[2], keepdim=false)
  return (%m, %lin, %p_b)
}
)",
                   &factors);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(factors, (std::vector<int64_t>{1, 4, 0}));
}

TEST(BatchSeparable, OpsAlongTheBatchDimensionAreRefused) {
  expect_refused(R"(graph(%x: float32[s0, 8]) {
  %sm: float32[s0, 8] = aten.softmax.int(self=%x, dim=0)
  return (%sm)
}
)",
                 "aten.softmax.int", "works along dimension 0");
  expect_refused(R"(graph(%x: float32[s0, 8]) {
  %sm: float32[s0, 8] = aten.softmax.int(self=%x, dim=-2)
  return (%sm)
}
)",
                 "aten.softmax.int", "works along dimension 0");
  expect_refused(R"(graph(%x: float32[s0, 8]) {
  %s: float32[8] = aten.sum.dim_IntList(self=%x, dim=[0], keepdim=false)
  return (%s)
}
)",
                 "aten.sum.dim_IntList", "without their dimension");
  expect_refused(R"(graph(%x: float32[s0, 8]) {
  %t: float32[8, s0] = aten.transpose.int(self=%x, dim0=0, dim1=1)
  return (%t)
}
)",
                 "aten.transpose.int", "not a multiple of s0");
  expect_refused(R"(graph(%x: float32[s0, 8]) {
  %c: float32[2*s0, 8] = aten.cat.default(tensors=[%x, %x], dim=0)
  return (%c)
}
)",
                 "aten.cat.default", "works along dimension 0");
  expect_refused(R"(graph(%x: float32[s0, 3, 8]) {
  %p: float32[s0, 8, 3] = aten.permute.default(self=%x, dims=[0, 2, 1])
  %q: float32[8, s0, 3] = aten.permute.default(self=%p, dims=[1, 0, 2])
  return (%q)
}
)",
                 "node 'q'", "not a multiple of s0");
}

TEST(BatchSeparable, RowsAsAWeightOrMixedWithOtherRowsAreRefused) {
  expect_refused(R"(graph(%x: float32[s0, 8], %p_w: float32[4, 8]) {
  %t: float32[8, s0] = aten.t.default(self=%x)
  %m: float32[4, s0] = aten.mm.default(self=%p_w, mat2=%t)
  return (%m)
}
)",
                 "aten.t.default", "not a multiple of s0");
  expect_refused(R"(graph(%x: float32[s0, 8], %c_i: int64[3]) {
  %e: float32[3, 8] = aten.embedding.default(weight=%x, indices=%c_i)
  return (%e)
}
)",
                 "aten.embedding.default", "without their dimension");
  // Batched products of rows by rows, batch by batch, are row-wise.
  EXPECT_TRUE(check(R"(graph(%x: float32[s0, 8], %y: float32[s0, 8, 8]) {
  %v: float32[s0, 8, 1] = aten.unsqueeze.default(self=%x, dim=2)
  %m: float32[s0, 8, 1] = aten.bmm.default(self=%y, mat2=%v)
  return (%m)
}
)")
                  .is_ok());
  expect_refused(R"(graph(%x: float32[s0, 8], %p_k: float32[4, 8]) {
  %a: float32[s0, 8] = aten.add.Tensor(self=%x, other=%p_k)
  return (%a)
}
)",
                 "aten.add.Tensor", "does not broadcast along dimension 0");
}

TEST(BatchSeparable, AttentionOverTheRowsThemselvesIsRefusedAttentionPerBatchIsNot) {
  // [s0, E]: the rows are the sequence; padding would add keys.
  expect_refused(R"(graph(%x: float32[s0, 8]) {
  %y: float32[s0, 8] = aten.scaled_dot_product_attention.default(query=%x, key=%x, value=%x)
  return (%y)
}
)",
                 "aten.scaled_dot_product_attention.default", "whose dimension 0 is the sequence");
  Status batched = check(R"(graph(%x: float32[s0, 2, 5, 8], %c_m: bool[1, 1, 5, 5]) {
  %y: float32[s0, 2, 5, 8] = aten.scaled_dot_product_attention.default(query=%x, key=%x, value=%x, attn_mask=%c_m)
  return (%y)
}
)");
  EXPECT_TRUE(batched.is_ok()) << batched.message();
}

TEST(BatchSeparable, InputsStateAndSizesAsDataAreRefused) {
  expect_refused(R"(graph(%x: float32[4, s0]) {
  %r: float32[4, s0] = aten.relu.default(self=%x)
  return (%r)
}
)",
                 "input 'x'", "other than as its leading size");
  Status s = check(R"(graph(%x: float32[s0, 8]) {
  %n: symint = aten.sym_size.int(self=%x, dim=0)
  %t: float32[] = aten.scalar_tensor.default(s=%n)
  return (%t)
}
)");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("as data"), std::string::npos) << s.message();
  Status fill = check(R"(graph(%x: float32[s0, 8]) {
  %n: symint = aten.sym_size.int(self=%x, dim=0)
  %f: float32[s0, 8] = aten.full.default(size=[%n, 8], fill_value=%n)
  return (%f)
}
)");
  ASSERT_FALSE(fill.is_ok());
  EXPECT_NE(fill.message().find("argument 'fill_value'"), std::string::npos) << fill.message();
  // Sizing a view by it is what sizes are for.
  Status view = check(R"(graph(%x: float32[s0, 8]) {
  %n: symint = aten.sym_size.int(self=%x, dim=0)
  %v: float32[s0, 2, 4] = aten.view.default(self=%x, size=[%n, 2, 4])
  return (%v)
}
)");
  EXPECT_TRUE(view.is_ok()) << view.message();
  ir::Module m = module_from(R"(graph(%x: float32[s0, 8], %b_state: float32[8]) {
  %r: float32[s0, 8] = aten.relu.default(self=%x)
  return (%b_state, %r)
}
)");
  m.output_specs[0] = {ir::OutputSpec::Kind::kBufferMutation, "state"};
  Status w = check_batch_separable(m, "s0", nullptr);
  ASSERT_FALSE(w.is_ok());
  EXPECT_NE(w.message().find("writes buffer 'state'"), std::string::npos) << w.message();
}

}  // namespace
}  // namespace kiln::lowering
