// Hard sigmoid and hard swish spelled out -> aten.hardsigmoid / aten.hardswish.
//
//   clamp(x + 3, 0, 6) / 6       -> hardsigmoid(x)
//   x * clamp(x + 3, 0, 6) / 6   -> hardswish(x)     (the product in either order)
//   x * hardsigmoid(x)           -> hardswish(x)
//
// The clamp may be one clamp / hardtanh or a chain of clamps (the ATen dialect
// writes clamp(min=0) then clamp(max=6)); "/ 6" may be "* (1/6)". The kernels
// compute the same steps in the same order, so float32 and float64 results do
// not change (16-bit floats round once instead of after every step).
#include <algorithm>
#include <limits>

#include "lowering/pass.h"
#include "lowering/rewrite.h"

namespace kiln::lowering {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// `v` is x + 3 clamped to [0, 6] through single-use clamps; returns x.
ir::Value* clamped_shift(const PatternContext& ctx, ir::Value* v) {
  double lo = -kInf, hi = kInf;
  while (v->producer && ctx.single_use(v)) {
    const ir::Node& n = *v->producer;
    std::optional<double> l, h;
    if (n.op == ir::OpKind::kClamp || n.op == ir::OpKind::kClampMin) {
      if (!absent(n, "min") && !(l = ctx.number(n, "min"))) return nullptr;
      if (!absent(n, "max") && !(h = ctx.number(n, "max"))) return nullptr;
    } else if (n.op == ir::OpKind::kHardtanh) {
      l = absent(n, "min_val") ? -1.0 : ctx.number(n, "min_val");
      h = absent(n, "max_val") ? 1.0 : ctx.number(n, "max_val");
      if (!l || !h) return nullptr;
    } else {
      break;
    }
    if (l) lo = std::max(lo, *l);
    if (h) hi = std::min(hi, *h);
    v = PatternContext::tensor_arg(n, "self");
    if (!v) return nullptr;
  }
  if (lo != 0.0 || hi != 6.0 || !v->producer || !ctx.single_use(v) || !plain_add(ctx, *v->producer)) return nullptr;
  auto tn = tensor_and_number(ctx, *v->producer);
  return tn && tn->second == 3.0 ? tn->first : nullptr;
}

// `n` is m / 6 or m * (1/6); returns m.
ir::Value* divided_by_six(const PatternContext& ctx, const ir::Node& n) {
  if (n.op == ir::OpKind::kDivTensor || n.op == ir::OpKind::kDivScalar) {
    ir::Value* m = PatternContext::tensor_arg(n, "self");
    return m && ctx.number(n, "other") == 6.0 ? m : nullptr;
  }
  if (n.op == ir::OpKind::kMulTensor || n.op == ir::OpKind::kMulScalar) {
    auto tn = tensor_and_number(ctx, n);
    return tn && near(tn->second, 1.0 / 6.0) ? tn->first : nullptr;
  }
  return nullptr;
}

// x * s or s * x with `s` single-use and `match(s)` giving x.
template <typename F>
ir::Value* times_itself(const PatternContext& ctx, const ir::Node& n, F&& match) {
  if (n.op != ir::OpKind::kMulTensor) return nullptr;
  ir::Value* a = PatternContext::tensor_arg(n, "self");
  ir::Value* b = PatternContext::tensor_arg(n, "other");
  if (!a || !b) return nullptr;
  for (auto [x, s] : {std::pair{a, b}, std::pair{b, a}})
    if (ctx.single_use(s) && match(s) == x) return x;
  return nullptr;
}

Expected<bool> fuse(PatternContext& ctx, ir::Node& n) {
  if (n.outputs.size() != 1) return false;
  ir::Value* out = n.outputs[0];
  ir::OpKind op = ir::OpKind::kUnknown;
  ir::Value* x = nullptr;
  if (ir::Value* m = divided_by_six(ctx, n)) {
    if ((x = clamped_shift(ctx, m))) {
      op = ir::OpKind::kHardsigmoid;
    } else if (m->producer && ctx.single_use(m) &&
               (x = times_itself(ctx, *m->producer, [&](ir::Value* s) { return clamped_shift(ctx, s); }))) {
      op = ir::OpKind::kHardswish;
    }
  }
  if (!x) {
    x = times_itself(ctx, n, [&](ir::Value* s) {
      ir::Node* hs = ctx.producer_if(s, ir::OpKind::kHardsigmoid);
      return hs ? PatternContext::tensor_arg(*hs, "self") : nullptr;
    });
    op = ir::OpKind::kHardswish;
  }
  if (!x || !is_floating(x->type.dtype) || x->type.dtype != out->type.dtype ||
      !same_sizes(x->type.sizes, out->type.sizes))
    return false;
  ir::Node* fused = ctx.insert_before(&n, op, n.name, {{"self", x}}, out->type);
  ctx.replace_uses(out, fused->outputs[0]);
  return true;
}

}  // namespace

Status fuse_hardswish(ir::Module& m) { return rewrite_to_fixed_point(m, fuse); }

}  // namespace kiln::lowering
