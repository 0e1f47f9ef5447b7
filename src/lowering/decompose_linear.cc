// aten.linear(input, weight, bias) -> matmul(input, permute(weight, [1, 0])) (+ bias).
//
// The engine builders take matmul and add; the transposed weight depends on
// weights only, so the fold-constants run after this pass stores it once.
#include "lowering/pass.h"
#include "lowering/rewrite.h"

namespace kiln::lowering {

namespace {

Expected<bool> decompose(PatternContext& ctx, ir::Node& n) {
  if (n.op != ir::OpKind::kLinear || n.outputs.size() != 1) return false;
  ir::Value* input = PatternContext::tensor_arg(n, "input");
  ir::Value* weight = PatternContext::tensor_arg(n, "weight");
  ir::Value* bias = PatternContext::tensor_arg(n, "bias");
  ir::Value* out = n.outputs[0];
  if (!input || !weight || weight->type.sizes.size() != 2 || input->type.sizes.empty()) return false;
  if (!absent(n, "bias") && !bias) return false;
  const DType dt = out->type.dtype;
  if (input->type.dtype != dt || weight->type.dtype != dt || (bias && bias->type.dtype != dt)) return false;

  ir::TensorType wt_type{dt, {weight->type.sizes[1], weight->type.sizes[0]}};
  ir::Node* wt = ctx.insert_before(&n, ir::OpKind::kPermute, n.name + "_weight_t",
                                   {{"self", weight}, {"dims", std::vector<int64_t>{1, 0}}}, wt_type);
  ir::Node* mm = ctx.insert_before(&n, ir::OpKind::kMatmul, bias ? n.name + "_matmul" : n.name,
                                   {{"self", input}, {"other", wt->outputs[0]}}, out->type);
  ir::Value* result = mm->outputs[0];
  if (bias) {
    ir::Node* add =
        ctx.insert_before(&n, ir::OpKind::kAddTensor, n.name, {{"self", result}, {"other", bias}}, out->type);
    result = add->outputs[0];
  }
  ctx.replace_uses(out, result);
  return true;
}

}  // namespace

Status decompose_linear(ir::Module& m) { return rewrite_to_fixed_point(m, decompose); }

}  // namespace kiln::lowering
