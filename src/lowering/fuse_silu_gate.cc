// aten.silu(a) * b (either operand order) -> kiln.silu_mul(a, b).
//
// The gated MLP of Llama-style models: down(silu(gate(x)) * up(x)). The silu
// result must have no other user; a and b must share the result's dtype (no
// type promotion hides in the multiply).
#include "lowering/pass.h"
#include "lowering/rewrite.h"

namespace kiln::lowering {

namespace {

Expected<bool> fuse(PatternContext& ctx, ir::Node& n) {
  if (n.op != ir::OpKind::kMulTensor || n.outputs.size() != 1) return false;
  ir::Value* lhs = PatternContext::tensor_arg(n, "self");
  ir::Value* rhs = PatternContext::tensor_arg(n, "other");
  if (!lhs || !rhs) return false;
  ir::Value* out = n.outputs[0];
  for (auto [s, b] : {std::pair{lhs, rhs}, std::pair{rhs, lhs}}) {
    ir::Node* silu = ctx.producer_if(s, ir::OpKind::kSilu);
    if (!silu || !ctx.single_use(s)) continue;
    ir::Value* a = PatternContext::tensor_arg(*silu, "self");
    const DType dt = out->type.dtype;
    if (!a || !is_floating(dt) || a->type.dtype != dt || s->type.dtype != dt || b->type.dtype != dt) continue;
    ir::Node* fused = ctx.insert_before(&n, ir::OpKind::kSiluMul, n.name, {{"a", a}, {"b", b}}, out->type);
    ctx.replace_uses(out, fused->outputs[0]);
    return true;
  }
  return false;
}

}  // namespace

Status fuse_silu_gate(ir::Module& m) { return rewrite_to_fixed_point(m, fuse); }

}  // namespace kiln::lowering
