// x * sigmoid(x) (either operand order) -> aten.silu(x).
//
// The ATen dialect decomposes silu this way; putting it back lets the silu
// gate and convolution-activation rewrites see it.
#include "lowering/pass.h"
#include "lowering/rewrite.h"

namespace kiln::lowering {

namespace {

Expected<bool> fuse(PatternContext& ctx, ir::Node& n) {
  if (n.op != ir::OpKind::kMulTensor || n.outputs.size() != 1) return false;
  ir::Value* a = PatternContext::tensor_arg(n, "self");
  ir::Value* b = PatternContext::tensor_arg(n, "other");
  if (!a || !b) return false;
  ir::Value* out = n.outputs[0];
  for (auto [x, s] : {std::pair{a, b}, std::pair{b, a}}) {
    ir::Node* sig = ctx.producer_if(s, ir::OpKind::kSigmoid);
    if (!sig || PatternContext::tensor_arg(*sig, "self") != x || !ctx.single_use(s)) continue;
    if (!is_floating(x->type.dtype) || x->type.dtype != out->type.dtype || !same_sizes(x->type.sizes, out->type.sizes))
      return false;
    ir::Node* silu = ctx.insert_before(&n, ir::OpKind::kSilu, n.name, {{"self", x}}, out->type);
    ctx.replace_uses(out, silu->outputs[0]);
    return true;
  }
  return false;
}

}  // namespace

Status fuse_silu(ir::Module& m) { return rewrite_to_fixed_point(m, fuse); }

}  // namespace kiln::lowering
