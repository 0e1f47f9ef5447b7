// GELU spelled out elementwise -> aten.gelu.
//
//   0.5 * x * (1 + erf(x / sqrt(2)))                                -> gelu(x)
//   0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))       -> gelu(x, approximate="tanh")
//
// Products are matched as a whole, whatever their association and operand
// order: a tree of single-use mul / div-by-number nodes flattens into a
// constant coefficient and a list of factors (pow(x, 2) and pow(x, 3) count as
// repeated factors). Constants match within 1e-6 relative.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "lowering/pass.h"
#include "lowering/rewrite.h"

namespace kiln::lowering {

namespace {

struct Product {
  double coef = 1;
  std::vector<ir::Value*> factors;
};

void flatten(const PatternContext& ctx, ir::Value* v, bool root, Product& p) {
  const ir::Node* n = v->producer;
  if (n && (root || ctx.single_use(v))) {
    if (n->op == ir::OpKind::kMulTensor || n->op == ir::OpKind::kMulScalar) {
      if (auto tn = tensor_and_number(ctx, *n)) {
        p.coef *= tn->second;
        flatten(ctx, tn->first, false, p);
        return;
      }
      ir::Value* a = PatternContext::tensor_arg(*n, "self");
      ir::Value* b = PatternContext::tensor_arg(*n, "other");
      if (a && b) {
        flatten(ctx, a, false, p);
        flatten(ctx, b, false, p);
        return;
      }
    }
    if (n->op == ir::OpKind::kDivTensor || n->op == ir::OpKind::kDivScalar) {
      ir::Value* a = PatternContext::tensor_arg(*n, "self");
      const std::optional<double> c = ctx.number(*n, "other");
      if (a && c && *c != 0) {
        p.coef /= *c;
        flatten(ctx, a, false, p);
        return;
      }
    }
    if (n->op == ir::OpKind::kPowTensorScalar) {
      ir::Value* a = PatternContext::tensor_arg(*n, "self");
      const std::optional<double> e = ctx.number(*n, "exponent");
      if (a && (e == 2.0 || e == 3.0)) {
        for (int i = 0; i < static_cast<int>(*e); ++i) flatten(ctx, a, false, p);
        return;
      }
    }
  }
  p.factors.push_back(v);
}

Product product_of(const PatternContext& ctx, ir::Value* v, bool root) {
  Product p;
  flatten(ctx, v, root, p);
  return p;
}

// `v` is 1 + t (single use); returns t.
ir::Value* one_plus(const PatternContext& ctx, ir::Value* v) {
  if (!v->producer || !ctx.single_use(v) || !plain_add(ctx, *v->producer)) return nullptr;
  auto tn = tensor_and_number(ctx, *v->producer);
  return tn && tn->second == 1.0 ? tn->first : nullptr;
}

// `u` is x / sqrt(2).
bool is_erf_argument(const PatternContext& ctx, ir::Value* u, ir::Value* x) {
  const Product p = product_of(ctx, u, false);
  return p.factors.size() == 1 && p.factors[0] == x && near(p.coef, std::numbers::sqrt2 / 2);
}

// `u` is sqrt(2 / pi) * (x + 0.044715 * x^3).
bool is_tanh_argument(const PatternContext& ctx, ir::Value* u, ir::Value* x) {
  const Product outer = product_of(ctx, u, false);
  if (outer.factors.size() != 1 || !near(outer.coef, std::sqrt(2 / std::numbers::pi))) return false;
  ir::Value* sum = outer.factors[0];
  if (!sum->producer || !ctx.single_use(sum) || !plain_add(ctx, *sum->producer)) return false;
  ir::Value* a = PatternContext::tensor_arg(*sum->producer, "self");
  ir::Value* b = PatternContext::tensor_arg(*sum->producer, "other");
  if (!a || !b) return false;
  ir::Value* cubic = a == x ? b : b == x ? a : nullptr;
  if (!cubic) return false;
  const Product c = product_of(ctx, cubic, false);
  return c.factors.size() == 3 && std::all_of(c.factors.begin(), c.factors.end(), [&](auto* f) { return f == x; }) &&
         near(c.coef, 0.044715);
}

Expected<bool> fuse(PatternContext& ctx, ir::Node& n) {
  if ((n.op != ir::OpKind::kMulTensor && n.op != ir::OpKind::kMulScalar) || n.outputs.size() != 1) return false;
  ir::Value* out = n.outputs[0];
  const Product p = product_of(ctx, out, true);
  if (p.factors.size() != 2 || !near(p.coef, 0.5)) return false;
  for (auto [x, s] : {std::pair{p.factors[0], p.factors[1]}, std::pair{p.factors[1], p.factors[0]}}) {
    ir::Value* t = one_plus(ctx, s);
    if (!t || !t->producer || !ctx.single_use(t)) continue;
    ir::Value* u = PatternContext::tensor_arg(*t->producer, "self");
    if (!u) continue;
    std::optional<std::string> approximate;
    if (t->producer->op == ir::OpKind::kErf && is_erf_argument(ctx, u, x)) approximate = "none";
    if (t->producer->op == ir::OpKind::kTanh && is_tanh_argument(ctx, u, x)) approximate = "tanh";
    if (!approximate) continue;
    if (!is_floating(x->type.dtype) || x->type.dtype != out->type.dtype || !same_sizes(x->type.sizes, out->type.sizes))
      return false;
    std::vector<ir::NamedArg> args = {{"self", x}};
    if (*approximate != "none") args.push_back({"approximate", *approximate});
    ir::Node* gelu = ctx.insert_before(&n, ir::OpKind::kGelu, n.name, std::move(args), out->type);
    ctx.replace_uses(out, gelu->outputs[0]);
    return true;
  }
  return false;
}

}  // namespace

Status fuse_gelu(ir::Module& m) { return rewrite_to_fixed_point(m, fuse); }

}  // namespace kiln::lowering
