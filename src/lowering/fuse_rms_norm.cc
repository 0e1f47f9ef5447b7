// RMS norm spelled out elementwise -> aten.rms_norm.
//
//   x * rsqrt(mean(x^2, dim=-1, keepdim=True) + eps)   (x^2 as pow(x, 2) or x * x)
//     -> rms_norm(x, [N], None, eps)
//   rms_norm(x, [N], None, eps) * weight  (weight [N], either operand order)
//     -> rms_norm(x, [N], weight, eps)
//
// Casts are left where the model put them: Llama computes the norm in float32
// and casts back before the weight multiply, so with a reduced-precision model
// the cast stays between the fused norm and the weight and the weight is not
// folded in; the norm still runs in float32 and the multiply in the model's
// dtype, exactly as written. (For a float32 model the casts are identities
// that remove-identity-casts drops first, and the weight folds in.)
#include "lowering/pass.h"
#include "lowering/rewrite.h"

namespace kiln::lowering {

namespace {

// `v` is x * x or pow(x, 2), used only once; returns x.
ir::Value* squared(const PatternContext& ctx, ir::Value* v) {
  if (!v->producer || !ctx.single_use(v)) return nullptr;
  const ir::Node& n = *v->producer;
  if (n.op == ir::OpKind::kPowTensorScalar) {
    if (ctx.number(n, "exponent") != 2.0) return nullptr;
    return PatternContext::tensor_arg(n, "self");
  }
  if (n.op == ir::OpKind::kMulTensor) {
    ir::Value* a = PatternContext::tensor_arg(n, "self");
    return a && a == PatternContext::tensor_arg(n, "other") ? a : nullptr;
  }
  return nullptr;
}

struct RmsCore {
  ir::Value* x = nullptr;
  double eps = 0;
};

// `r` is rsqrt(mean(x^2, -1, keepdim=True) + eps) with every step used once.
std::optional<RmsCore> match_rsqrt(const PatternContext& ctx, ir::Value* r) {
  ir::Node* rsqrt = ctx.producer_if(r, ir::OpKind::kRsqrt);
  if (!rsqrt || !ctx.single_use(r)) return std::nullopt;
  ir::Value* sum = PatternContext::tensor_arg(*rsqrt, "self");
  if (!sum || !sum->producer || !ctx.single_use(sum) || !plain_add(ctx, *sum->producer)) return std::nullopt;
  const auto mean_eps = tensor_and_number(ctx, *sum->producer);
  if (!mean_eps) return std::nullopt;
  auto [mean, eps] = *mean_eps;
  ir::Node* mean_node = ctx.producer_if(mean, ir::OpKind::kMeanDim);
  if (!mean_node || !ctx.single_use(mean)) return std::nullopt;
  ir::Value* sq = PatternContext::tensor_arg(*mean_node, "self");
  ir::Value* x = sq ? squared(ctx, sq) : nullptr;
  if (!x) return std::nullopt;
  const auto dims = int_list(*mean_node, "dim");
  if (!dims || dims->size() != 1 || !is_last_dim((*dims)[0], x->type.sizes.size())) return std::nullopt;
  if (bool_value(*mean_node, "keepdim") != true || !absent(*mean_node, "dtype")) return std::nullopt;
  return RmsCore{x, eps};
}

Expected<bool> fuse_core(PatternContext& ctx, ir::Node& n) {
  ir::Value* a = PatternContext::tensor_arg(n, "self");
  ir::Value* b = PatternContext::tensor_arg(n, "other");
  if (!a || !b || n.outputs.size() != 1) return false;
  for (auto [x, r] : {std::pair{a, b}, std::pair{b, a}}) {
    std::optional<RmsCore> core = match_rsqrt(ctx, r);
    if (!core || core->x != x) continue;
    const ir::TensorType& t = x->type;
    const ir::Value* out = n.outputs[0];
    if (!is_floating(t.dtype) || t.sizes.empty() || !t.sizes.back().is_static()) return false;
    if (out->type.dtype != t.dtype || !same_sizes(out->type.sizes, t.sizes)) return false;
    ir::Node* rms = ctx.insert_before(
        &n, ir::OpKind::kRmsNorm, n.name,
        {{"input", x}, {"normalized_shape", std::vector<int64_t>{t.sizes.back().value}}, {"eps", core->eps}}, t);
    ctx.replace_uses(n.outputs[0], rms->outputs[0]);
    return true;
  }
  return false;
}

// rms_norm(x, [N], None, eps) * weight -> rms_norm(x, [N], weight, eps).
Expected<bool> fuse_weight(PatternContext& ctx, ir::Node& n) {
  ir::Value* a = PatternContext::tensor_arg(n, "self");
  ir::Value* b = PatternContext::tensor_arg(n, "other");
  if (!a || !b || n.outputs.size() != 1) return false;
  for (auto [r, w] : {std::pair{a, b}, std::pair{b, a}}) {
    ir::Node* rms = ctx.producer_if(r, ir::OpKind::kRmsNorm);
    if (!rms || !ctx.single_use(r) || !absent(*rms, "weight")) continue;
    const auto shape = int_list(*rms, "normalized_shape");
    const ir::TensorType& out = n.outputs[0]->type;
    if (!shape || shape->size() != 1 || w->type.sizes.size() != 1 || !w->type.sizes[0].is_static() ||
        w->type.sizes[0].value != (*shape)[0])
      continue;
    if (w->type.dtype != r->type.dtype || out.dtype != r->type.dtype || !same_sizes(out.sizes, r->type.sizes)) continue;
    std::vector<ir::NamedArg> args;
    for (const ir::NamedArg& arg : rms->args) {
      if (arg.name == "weight") continue;
      args.push_back(arg);
      if (arg.name == "normalized_shape") args.push_back({"weight", w});
    }
    ir::Node* fused = ctx.insert_before(&n, ir::OpKind::kRmsNorm, n.name, std::move(args), out);
    ctx.replace_uses(n.outputs[0], fused->outputs[0]);
    return true;
  }
  return false;
}

Expected<bool> fuse(PatternContext& ctx, ir::Node& n) {
  if (n.op != ir::OpKind::kMulTensor) return false;
  KILN_ASSIGN_OR_RETURN(bool core, fuse_core(ctx, n));
  if (core) return true;
  return fuse_weight(ctx, n);
}

}  // namespace

Status fuse_rms_norm(ir::Module& m) { return rewrite_to_fixed_point(m, fuse); }

}  // namespace kiln::lowering
