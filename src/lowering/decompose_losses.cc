// Losses and distances of torch.nn.functional, written in core ops as ATen
// defines them, one small function each:
//
//   losses, reduction 0 none, 1 mean, 2 sum:
//     mse (x - t)^2, l1 |x - t|, smooth_l1 and huber (quadratic below beta or
//     delta), soft_margin log1p(exp(-t x)), margin_ranking, hinge_embedding,
//     binary_cross_entropy (logs clamped at -100), ..._with_logits (through
//     log_sigmoid), kl_div, poisson_nll, cosine_embedding, triplet_margin,
//     nll_loss_nd (gather of the target's entries) and cross_entropy
//     (log_softmax then nll, with label smoothing; or class probabilities)
//   distances: pairwise_distance (norm of x1 - x2 + eps over the last dim),
//     cosine_similarity, dist, cdist
//
// A node whose arguments a decomposition does not cover (symbolic sizes where
// it needs static ones, complex dtypes) is left as it is, and partitioning
// names it.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "lowering/decompose.h"

namespace kiln::lowering {

namespace {

using ir::OpKind;

// The loss `l` reduced as argument "reduction" says (0 none, 1 mean, 2 sum),
// at the root's output type; null for another reduction or a mismatched type.
ir::Value* reduce_loss(Nodes& b, const ir::Node& n, ir::Value* l) {
  if (!l) return nullptr;
  const auto r = int_value(n, "reduction");
  if (!r || l->type.dtype != b.out().dtype) return nullptr;
  if (*r == 0) return same_sizes(l->type.sizes, b.out().sizes) ? l : nullptr;
  if (*r != 1 && *r != 2) return nullptr;
  return b.add(*r == 1 ? OpKind::kMean : OpKind::kSum, {{"self", l}}, b.out());
}

Expected<bool> pointwise_loss(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* t = PatternContext::tensor_arg(n, "target");
  if (!floating_pair(n, x, t)) return false;
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* d = b.binary(OpKind::kSubTensor, x, t, dt);
  if (!d) return false;
  ir::Value* l = nullptr;
  switch (n.op) {
    case OpKind::kMseLoss: l = b.binary(OpKind::kMulTensor, d, d, dt); break;
    case OpKind::kL1Loss: l = b.unary(OpKind::kAbs, d); break;
    case OpKind::kSmoothL1Loss:
    case OpKind::kHuberLoss: {
      const bool huber = n.op == OpKind::kHuberLoss;
      const auto edge = number_or(ctx, n, huber ? "delta" : "beta", 1.0);
      if (!edge || *edge < 0) return false;
      ir::Value* z = b.unary(OpKind::kAbs, d);
      if (*edge == 0 && !huber) {
        l = z;
        break;
      }
      // smooth_l1: z < beta ? 0.5 z^2 / beta : z - 0.5 beta;  huber: z < delta ? 0.5 z^2 : delta (z - 0.5 delta)
      ir::Value* quad = b.binary(OpKind::kMulTensor, b.binary(OpKind::kMulTensor, d, d, dt), 0.5, dt);
      if (!huber) quad = b.binary(OpKind::kDivTensor, quad, *edge, dt);
      ir::Value* lin = b.binary(OpKind::kSubTensor, z, 0.5 * *edge, dt);
      if (huber) lin = b.binary(OpKind::kMulTensor, lin, *edge, dt);
      l = b.add(OpKind::kWhere, {{"condition", b.compare(OpKind::kLtScalar, z, *edge)}, {"self", quad}, {"other", lin}},
                d->type);
      break;
    }
    case OpKind::kSoftMarginLoss: {
      ir::Value* m = b.binary(OpKind::kMulTensor, b.unary(OpKind::kNeg, t), x, dt);
      l = m ? b.unary(OpKind::kLog1p, b.unary(OpKind::kExp, m)) : nullptr;
      break;
    }
    default: return false;
  }
  return b.done(reduce_loss(b, n, l));
}

// margin_ranking_loss = max(0, -target * (input1 - input2) + margin).
Expected<bool> margin_ranking_loss(PatternContext& ctx, ir::Node& n) {
  ir::Value* x1 = PatternContext::tensor_arg(n, "input1");
  ir::Value* x2 = PatternContext::tensor_arg(n, "input2");
  ir::Value* t = PatternContext::tensor_arg(n, "target");
  const auto margin = number_arg(ctx, n, "margin");
  if (!floating_pair(n, x1, x2) || !t || t->type.dtype != x1->type.dtype || !margin) return false;
  Nodes b(ctx, n);
  const DType dt = x1->type.dtype;
  ir::Value* d = b.binary(OpKind::kSubTensor, x1, x2, dt);
  ir::Value* m = d ? b.binary(OpKind::kMulTensor, b.unary(OpKind::kNeg, t), d, dt) : nullptr;
  if (!m) return false;
  ir::Value* l = b.unary(OpKind::kClampMin, b.binary(OpKind::kAddTensor, m, *margin, dt), {{"min", 0.0}});
  return b.done(reduce_loss(b, n, l));
}

// hinge_embedding_loss = (target != 1 ? max(0, margin - x) : 0) + (target != -1 ? x : 0).
Expected<bool> hinge_embedding_loss(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* t = PatternContext::tensor_arg(n, "target");
  const auto margin = number_arg(ctx, n, "margin");
  if (!floating_pair(n, x, t) || !margin || !same_sizes(x->type.sizes, t->type.sizes)) return false;
  Nodes b(ctx, n);
  ir::Value* clamped =
      b.unary(OpKind::kClampMin, b.unary(OpKind::kRsubScalar, x, {{"other", *margin}}), {{"min", 0.0}});
  ir::Value* from_margin = b.fill(clamped, b.compare(OpKind::kEqScalar, t, 1.0), 0.0);
  ir::Value* from_self = b.fill(x, b.compare(OpKind::kEqScalar, t, -1.0), 0.0);
  return b.done(reduce_loss(b, n, b.binary(OpKind::kAddTensor, from_margin, from_self, x->type.dtype)));
}

// binary_cross_entropy = (t - 1) * max(log1p(-x), -100) - t * max(log(x), -100), times weight.
Expected<bool> binary_cross_entropy(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* t = PatternContext::tensor_arg(n, "target");
  ir::Value* w = PatternContext::tensor_arg(n, "weight");
  if (!floating_pair(n, x, t) || (!absent(n, "weight") && (!w || w->type.dtype != x->type.dtype))) return false;
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* log_x = b.unary(OpKind::kClampMin, b.unary(OpKind::kLog, x), {{"min", -100.0}});
  ir::Value* log_1mx = b.unary(OpKind::kClampMin, b.unary(OpKind::kLog1p, b.unary(OpKind::kNeg, x)), {{"min", -100.0}});
  ir::Value* a = b.binary(OpKind::kMulTensor, b.binary(OpKind::kSubTensor, t, 1.0, dt), log_1mx, dt);
  ir::Value* c = b.binary(OpKind::kMulTensor, t, log_x, dt);
  if (!a || !c) return false;
  ir::Value* l = b.binary(OpKind::kSubTensor, a, c, dt);
  if (w) l = b.binary(OpKind::kMulTensor, l, w, dt);
  return b.done(reduce_loss(b, n, l));
}

// binary_cross_entropy_with_logits = (1 - t) x - (1 + (pos_weight - 1) t) log_sigmoid(x), times weight.
Expected<bool> binary_cross_entropy_with_logits(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* t = PatternContext::tensor_arg(n, "target");
  ir::Value* w = PatternContext::tensor_arg(n, "weight");
  ir::Value* pw = PatternContext::tensor_arg(n, "pos_weight");
  if (!floating_pair(n, x, t)) return false;
  if ((!absent(n, "weight") && (!w || w->type.dtype != x->type.dtype)) ||
      (!absent(n, "pos_weight") && (!pw || pw->type.dtype != x->type.dtype)))
    return false;
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* a = b.binary(OpKind::kMulTensor, b.unary(OpKind::kRsubScalar, t, {{"other", 1.0}}), x, dt);
  ir::Value* ls = b.unary(OpKind::kLogSigmoid, x);
  if (pw) {
    ir::Value* lw = b.binary(OpKind::kMulTensor, b.binary(OpKind::kSubTensor, pw, 1.0, dt), t, dt);
    if (!lw) return false;
    ls = b.binary(OpKind::kMulTensor, b.binary(OpKind::kAddTensor, lw, 1.0, dt), ls, dt);
  }
  if (!a || !ls) return false;
  ir::Value* l = b.binary(OpKind::kSubTensor, a, ls, dt);
  if (w && l) l = b.binary(OpKind::kMulTensor, l, w, dt);
  return b.done(reduce_loss(b, n, l));
}

// kl_div = log_target ? exp(t) (t - x) : xlogy(t, t) - t x.
Expected<bool> kl_div(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* t = PatternContext::tensor_arg(n, "target");
  const auto log_target = bool_value(n, "log_target", false);
  if (!floating_pair(n, x, t) || !log_target) return false;
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* l = nullptr;
  if (*log_target) {
    ir::Value* d = b.binary(OpKind::kSubTensor, t, x, dt);
    l = d ? b.binary(OpKind::kMulTensor, b.unary(OpKind::kExp, t), d, dt) : nullptr;
  } else {
    ir::Value* tx = b.binary(OpKind::kMulTensor, t, x, dt);
    l = tx ? b.binary(OpKind::kSubTensor, b.binary(OpKind::kXlogyTensor, t, t, dt), tx, dt) : nullptr;
  }
  return b.done(reduce_loss(b, n, l));
}

// poisson_nll_loss = log_input ? exp(x) - t x : x - t log(x + eps), plus
// Stirling's term t log t - t + log(2 pi t) / 2 where t > 1 when full.
Expected<bool> poisson_nll_loss(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "input");
  ir::Value* t = PatternContext::tensor_arg(n, "target");
  const auto log_input = bool_value(n, "log_input");
  const auto full = bool_value(n, "full");
  const auto eps = number_or(ctx, n, "eps", 1e-8);
  if (!floating_pair(n, x, t) || !log_input || !full || !eps) return false;
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* l = nullptr;
  if (*log_input) {
    ir::Value* tx = b.binary(OpKind::kMulTensor, t, x, dt);
    l = tx ? b.binary(OpKind::kSubTensor, b.unary(OpKind::kExp, x), tx, dt) : nullptr;
  } else {
    ir::Value* tl =
        b.binary(OpKind::kMulTensor, t, b.unary(OpKind::kLog, b.binary(OpKind::kAddTensor, x, *eps, dt)), dt);
    l = tl ? b.binary(OpKind::kSubTensor, x, tl, dt) : nullptr;
  }
  if (l && *full) {
    ir::Value* s = b.binary(OpKind::kSubTensor, b.binary(OpKind::kMulTensor, t, b.unary(OpKind::kLog, t), dt), t, dt);
    ir::Value* h =
        b.binary(OpKind::kMulTensor,
                 b.unary(OpKind::kLog, b.binary(OpKind::kMulTensor, t, 2 * 3.14159265358979323846, dt)), 0.5, dt);
    s = b.binary(OpKind::kAddTensor, s, h, dt);
    l = b.binary(OpKind::kAddTensor, l, b.fill(s, b.compare(OpKind::kLeScalar, t, 1.0), 0.0), dt);
  }
  return b.done(reduce_loss(b, n, l));
}

// cosine_embedding_loss: cos = <x1, x2> / sqrt((|x1|^2 + 1e-12) (|x2|^2 + 1e-12))
// over the dim after the target's; 1 - cos where target is 1, max(0, cos -
// margin) where it is -1, 0 elsewhere.
Expected<bool> cosine_embedding_loss(PatternContext& ctx, ir::Node& n) {
  ir::Value* x1 = PatternContext::tensor_arg(n, "input1");
  ir::Value* x2 = PatternContext::tensor_arg(n, "input2");
  ir::Value* t = PatternContext::tensor_arg(n, "target");
  const auto margin = number_arg(ctx, n, "margin");
  if (!floating_pair(n, x1, x2) || !t || !margin || !same_sizes(x1->type.sizes, x2->type.sizes)) return false;
  const size_t d = t->type.sizes.size();
  if (x1->type.sizes.size() != d + 1) return false;
  Nodes b(ctx, n);
  const DType dt = x1->type.dtype;
  const ir::TensorType row = reduced(x1->type, {static_cast<int64_t>(d)}, false);
  auto sum = [&](ir::Value* v) {
    return b.add(OpKind::kSumDimIntList,
                 {{"self", v}, {"dim", std::vector<int64_t>{static_cast<int64_t>(d)}}, {"keepdim", false}}, row);
  };
  ir::Value* prod = sum(b.binary(OpKind::kMulTensor, x1, x2, dt));
  ir::Value* m1 = b.binary(OpKind::kAddTensor, sum(b.binary(OpKind::kMulTensor, x1, x1, dt)), 1e-12, dt);
  ir::Value* m2 = b.binary(OpKind::kAddTensor, sum(b.binary(OpKind::kMulTensor, x2, x2, dt)), 1e-12, dt);
  ir::Value* cos =
      b.binary(OpKind::kDivTensor, prod, b.unary(OpKind::kSqrt, b.binary(OpKind::kMulTensor, m1, m2, dt)), dt);
  ir::Value* pos = b.unary(OpKind::kRsubScalar, cos, {{"other", 1.0}});
  ir::Value* neg = b.unary(OpKind::kClampMin, b.binary(OpKind::kSubTensor, cos, *margin, dt), {{"min", 0.0}});
  if (!same_sizes(row.sizes, t->type.sizes)) return false;
  ir::Value* l = b.binary(OpKind::kAddTensor, b.fill(pos, b.compare(OpKind::kNeScalar, t, 1.0), 0.0),
                          b.fill(neg, b.compare(OpKind::kNeScalar, t, -1.0), 0.0), dt);
  return b.done(reduce_loss(b, n, l));
}

// The class dim of a loss input: 0 for one sample [C], else 1.
int64_t class_dim(const ir::Value* x) { return x->type.sizes.size() == 1 ? 0 : 1; }

// For class-index targets: the targets with ignore_index replaced by class 0
// (so every index is in range) and each target's weight (weight[t], or 1),
// 0 where the target is ignored.
struct ClassTargets {
  ir::Value* safe = nullptr;
  ir::Value* weight = nullptr;
};
std::optional<ClassTargets> class_targets(Nodes& b, ir::Value* t, ir::Value* weight, int64_t ignore, DType dt) {
  const auto ts = static_sizes(t->type);
  if (!ts || t->type.dtype != DType::Int64) return std::nullopt;
  ir::Value* ignored = b.compare(OpKind::kEqScalar, t, static_cast<double>(ignore));
  ClassTargets c;
  c.safe = b.fill(t, ignored, 0.0);
  ir::TensorType wt{dt, t->type.sizes};
  if (weight) {
    int64_t count = 1;
    for (int64_t s : *ts) count *= s;
    ir::Value* flat = b.add(OpKind::kReshape, {{"self", c.safe}, {"shape", std::vector<int64_t>{count}}},
                            static_type(DType::Int64, {count}));
    ir::Value* w =
        b.add(OpKind::kIndexSelect, {{"self", weight}, {"dim", int64_t{0}}, {"index", flat}}, static_type(dt, {count}));
    c.weight = b.add(OpKind::kReshape, {{"self", w}, {"shape", *ts}}, wt);
  } else {
    c.weight = b.add(OpKind::kFullLike, {{"self", t}, {"fill_value", 1.0}, {"dtype", dt}}, wt);
  }
  c.weight = b.fill(c.weight, ignored, 0.0);
  return c;
}

// nll_loss over class dim 1 (or 0 for one sample): -weight[t] x[t], 0 where
// t is ignore_index; mean divides by the sum of the weights taken.
ir::Value* nll(Nodes& b, ir::Value* x, ir::Value* t, ir::Value* weight, int64_t ignore, int64_t reduction) {
  const DType dt = x->type.dtype;
  const int64_t cd = class_dim(x);
  if (t->type.sizes.size() + 1 != x->type.sizes.size()) return nullptr;
  const auto c = class_targets(b, t, weight, ignore, dt);
  if (!c) return nullptr;
  ir::Value* idx = b.unsqueezed(c->safe, {cd});
  ir::TensorType picked = idx->type;
  picked.dtype = dt;
  ir::Value* g = b.add(OpKind::kGather, {{"self", x}, {"dim", cd}, {"index", idx}}, picked);
  g = b.add(OpKind::kSqueezeDims, {{"self", g}, {"dim", std::vector<int64_t>{cd}}}, {dt, t->type.sizes});
  ir::Value* l = b.binary(OpKind::kMulTensor, b.unary(OpKind::kNeg, g), c->weight, dt);
  if (reduction == 0) return l;
  ir::Value* total = b.add(OpKind::kSum, {{"self", l}}, {dt, {}});
  if (reduction == 2) return total;
  return b.binary(OpKind::kDivTensor, total, b.add(OpKind::kSum, {{"self", c->weight}}, {dt, {}}), dt);
}

Expected<bool> nll_loss_nd(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* t = PatternContext::tensor_arg(n, "target");
  ir::Value* w = PatternContext::tensor_arg(n, "weight");
  const auto reduction = int_value(n, "reduction", 1);
  const auto ignore = int_value(n, "ignore_index", -100);
  if (!x || !t || n.outputs.size() != 1 || !is_floating(x->type.dtype) || n.outputs[0]->type.dtype != x->type.dtype ||
      !reduction || *reduction < 0 || *reduction > 2 || !ignore || (!absent(n, "weight") && !w))
    return false;
  if (w && w->type.dtype != x->type.dtype) return false;
  Nodes b(ctx, n);
  ir::Value* l = nll(b, x, t, w, *ignore, *reduction);
  if (!l || !same_sizes(l->type.sizes, b.out().sizes)) return false;
  return b.done(l);
}

// cross_entropy = nll_loss of log_softmax over the class dim for class
// indices, blended with the smoothed loss -sum(w log p) by label_smoothing;
// for class probabilities -sum(w t' log p), t' = t (1 - ls) + ls / C, mean
// over the samples.
Expected<bool> cross_entropy(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* t = PatternContext::tensor_arg(n, "target");
  ir::Value* w = PatternContext::tensor_arg(n, "weight");
  const auto reduction = int_value(n, "reduction");
  const auto ignore = int_value(n, "ignore_index");
  const auto ls = number_arg(ctx, n, "label_smoothing");
  const auto xs = x ? static_sizes(x->type) : std::nullopt;
  if (!x || !t || n.outputs.size() != 1 || !is_floating(x->type.dtype) || n.outputs[0]->type.dtype != x->type.dtype ||
      !reduction || *reduction < 0 || *reduction > 2 || !ignore || !ls || !xs || xs->empty() ||
      (!absent(n, "weight") && !w))
    return false;
  const DType dt = x->type.dtype;
  if (w && (w->type.dtype != dt || w->type.sizes.size() != 1)) return false;
  const int64_t cd = class_dim(x);
  const int64_t classes = (*xs)[static_cast<size_t>(cd)];
  int64_t numel = 1;
  for (int64_t s : *xs) numel *= s;
  Nodes b(ctx, n);
  ir::Value* logp = b.add(OpKind::kLogSoftmax, {{"self", x}, {"dim", cd}}, x->type);
  ir::Value* wv = nullptr;  // the weight along the class dim
  if (w) {
    std::vector<int64_t> shape(xs->size(), 1);
    shape[static_cast<size_t>(cd)] = classes;
    wv = b.add(OpKind::kView, {{"self", w}, {"size", shape}}, static_type(dt, shape));
  }
  const ir::TensorType row = reduced(x->type, {cd}, false);
  auto class_sum = [&](ir::Value* v) {
    return b.add(OpKind::kSumDimIntList, {{"self", v}, {"dim", std::vector<int64_t>{cd}}, {"keepdim", false}}, row);
  };
  auto reduce = [&](ir::Value* l, ir::Value* mean_divisor, double count) -> ir::Value* {
    if (*reduction == 0) return l;
    ir::Value* total = b.add(OpKind::kSum, {{"self", l}}, {dt, {}});
    if (*reduction == 2) return total;
    return mean_divisor ? b.binary(OpKind::kDivTensor, total, mean_divisor, dt)
                        : b.binary(OpKind::kDivTensor, total, count, dt);
  };
  if (is_floating(t->type.dtype)) {
    if (t->type.dtype != dt || !same_sizes(t->type.sizes, x->type.sizes)) return false;
    ir::Value* tt = t;
    if (*ls > 0)
      tt = b.binary(OpKind::kAddTensor, b.binary(OpKind::kMulTensor, t, 1.0 - *ls, dt),
                    *ls / static_cast<double>(classes), dt);
    ir::Value* p = b.binary(OpKind::kMulTensor, logp, tt, dt);
    if (wv) p = b.binary(OpKind::kMulTensor, p, wv, dt);
    ir::Value* l = b.unary(OpKind::kNeg, class_sum(p));
    return b.done(reduce(l, nullptr, static_cast<double>(numel / std::max<int64_t>(classes, 1))));
  }
  ir::Value* loss = nll(b, logp, t, w, *ignore, *reduction);
  if (!loss) return false;
  if (*ls > 0) {
    ir::Value* smooth = b.unary(OpKind::kNeg, class_sum(wv ? b.binary(OpKind::kMulTensor, logp, wv, dt) : logp));
    smooth = b.fill(smooth, b.compare(OpKind::kEqScalar, t, static_cast<double>(*ignore)), 0.0);
    ir::Value* divisor = nullptr;
    if (*reduction == 1) {
      const auto c = class_targets(b, t, w, *ignore, dt);
      if (!c) return false;
      divisor = b.add(OpKind::kSum, {{"self", c->weight}}, {dt, {}});
    }
    smooth = reduce(smooth, divisor, 0);
    loss = b.binary(OpKind::kAddTensor, b.binary(OpKind::kMulTensor, loss, 1.0 - *ls, dt),
                    b.binary(OpKind::kMulTensor, smooth, *ls / static_cast<double>(classes), dt), dt);
  }
  if (!loss || !same_sizes(loss->type.sizes, b.out().sizes)) return false;
  return b.done(loss);
}

// pairwise_distance(x1, x2, p, eps, keepdim) = norm(x1 - x2 + eps, p, last dim).
ir::Value* pairwise(Nodes& b, ir::Value* x1, ir::Value* x2, double p, double eps, bool keepdim) {
  ir::Value* d = b.binary(OpKind::kSubTensor, x1, x2, x1->type.dtype);
  if (!d || d->type.sizes.empty()) return nullptr;
  d = b.binary(OpKind::kAddTensor, d, eps, d->type.dtype);
  return b.p_norm(d, p, {static_cast<int64_t>(d->type.sizes.size()) - 1}, keepdim);
}

Expected<bool> pairwise_distance(PatternContext& ctx, ir::Node& n) {
  ir::Value* x1 = PatternContext::tensor_arg(n, "x1");
  ir::Value* x2 = PatternContext::tensor_arg(n, "x2");
  const auto p = number_arg(ctx, n, "p");
  const auto eps = number_arg(ctx, n, "eps");
  const auto keepdim = bool_value(n, "keepdim");
  if (!floating_pair(n, x1, x2) || !p || !eps || !keepdim || *p == 0) return false;
  Nodes b(ctx, n);
  return b.done(pairwise(b, x1, x2, *p, *eps, *keepdim));
}

// triplet_margin_loss = max(0, margin + d(a, p) - d(a, n)), d(a, n) the
// smaller of d(a, n) and d(p, n) when swap.
Expected<bool> triplet_margin_loss(PatternContext& ctx, ir::Node& n) {
  ir::Value* a = PatternContext::tensor_arg(n, "anchor");
  ir::Value* pos = PatternContext::tensor_arg(n, "positive");
  ir::Value* neg = PatternContext::tensor_arg(n, "negative");
  const auto margin = number_arg(ctx, n, "margin");
  const auto p = number_arg(ctx, n, "p");
  const auto eps = number_arg(ctx, n, "eps");
  const auto swap = bool_value(n, "swap", false);
  if (!floating_pair(n, a, pos) || !neg || neg->type.dtype != a->type.dtype || !margin || !p || !eps || !swap ||
      *p == 0)
    return false;
  Nodes b(ctx, n);
  const DType dt = a->type.dtype;
  ir::Value* dp = pairwise(b, a, pos, *p, *eps, false);
  ir::Value* dn = pairwise(b, a, neg, *p, *eps, false);
  if (!dp || !dn) return false;
  if (*swap) {
    ir::Value* ds = pairwise(b, pos, neg, *p, *eps, false);
    if (!ds) return false;
    dn = b.binary(OpKind::kMinimum, dn, ds, dt);
  }
  ir::Value* m = b.binary(OpKind::kSubTensor, b.binary(OpKind::kAddTensor, dp, *margin, dt), dn, dt);
  return b.done(m ? reduce_loss(b, n, b.unary(OpKind::kClampMin, m, {{"min", 0.0}})) : nullptr);
}

// cosine_similarity = sum(x1 x2, dim) / sqrt(max(sum(x1^2, dim) sum(x2^2, dim), eps^2)).
Expected<bool> cosine_similarity(PatternContext& ctx, ir::Node& n) {
  ir::Value* x1 = PatternContext::tensor_arg(n, "x1");
  ir::Value* x2 = PatternContext::tensor_arg(n, "x2");
  const auto dim = int_value(n, "dim", 1);
  const auto eps = number_arg(ctx, n, "eps");
  if (!floating_pair(n, x1, x2) || !dim || !eps) return false;
  Nodes b(ctx, n);
  const DType dt = x1->type.dtype;
  ir::Value* prod = b.binary(OpKind::kMulTensor, x1, x2, dt);
  if (!prod) return false;
  const int64_t d = norm_dim(*dim, prod->type.sizes.size());
  if (d < 0) return false;
  const std::vector<int64_t> dims{d};
  const ir::TensorType row = reduced(prod->type, dims, false);
  auto sum = [&](ir::Value* v) {
    return b.add(OpKind::kSumDimIntList, {{"self", v}, {"dim", dims}, {"keepdim", false}},
                 reduced(v->type, dims, false));
  };
  // Each squared norm over the broadcast shape, as ATen expands both first.
  ir::Value* e1 = b.add(OpKind::kExpandAs, {{"self", x1}, {"other", prod}}, prod->type);
  ir::Value* e2 = b.add(OpKind::kExpandAs, {{"self", x2}, {"other", prod}}, prod->type);
  ir::Value* n1 = sum(b.binary(OpKind::kMulTensor, e1, e1, dt));
  ir::Value* n2 = sum(b.binary(OpKind::kMulTensor, e2, e2, dt));
  ir::Value* denom = b.unary(
      OpKind::kSqrt, b.unary(OpKind::kClampMin, b.binary(OpKind::kMulTensor, n1, n2, dt), {{"min", *eps * *eps}}));
  if (!same_sizes(row.sizes, b.out().sizes)) return false;
  return b.done(b.binary(OpKind::kDivTensor, sum(prod), denom, dt));
}

// dist(x, y, p) = norm(x - y, p) over every element.
Expected<bool> dist(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* y = PatternContext::tensor_arg(n, "other");
  const auto p = number_arg(ctx, n, "p");
  if (!floating_pair(n, x, y) || !p || *p == 0) return false;
  Nodes b(ctx, n);
  ir::Value* d = b.binary(OpKind::kSubTensor, x, y, x->type.dtype);
  if (!d) return false;
  std::vector<int64_t> all(d->type.sizes.size());
  std::iota(all.begin(), all.end(), 0);
  return b.done(b.p_norm(d, *p, all, false));
}

// cdist(x1 [.., P, M], x2 [.., R, M], p) = the p-norm of every row difference
// (p = 0: the count of entries that differ);
// for p = 2 through products (|a|^2 + |b|^2 - 2 a.b, clamped at 0) where ATen
// takes that path (compute_mode 1, or 0 / None with P or R above 25).
Expected<bool> cdist(PatternContext& ctx, ir::Node& n) {
  ir::Value* x1 = PatternContext::tensor_arg(n, "x1");
  ir::Value* x2 = PatternContext::tensor_arg(n, "x2");
  const auto p = ctx.number(n, "p");
  const auto mode = absent(n, "compute_mode") ? std::optional<int64_t>(0) : int_value(n, "compute_mode");
  const auto s1 = x1 ? static_sizes(x1->type) : std::nullopt;
  const auto s2 = x2 ? static_sizes(x2->type) : std::nullopt;
  if (!floating_pair(n, x1, x2) || !p || *p < 0 || !mode || !s1 || !s2 || s1->size() < 2 || s1->size() != s2->size())
    return false;
  const size_t r = s1->size();
  const int64_t P = (*s1)[r - 2], R = (*s2)[r - 2], M = (*s1)[r - 1];
  if ((*s2)[r - 1] != M) return false;
  for (size_t i = 0; i + 2 < r; ++i)
    if ((*s1)[i] != (*s2)[i]) return false;
  Nodes b(ctx, n);
  const DType dt = x1->type.dtype;
  const std::vector<int64_t> batch(s1->begin(), s1->end() - 2);
  auto shape = [&](std::initializer_list<int64_t> tail) {
    std::vector<int64_t> v = batch;
    v.insert(v.end(), tail);
    return v;
  };
  const bool by_products = *p == 2 && (*mode == 1 || (*mode == 0 && (P > 25 || R > 25)));
  if (by_products) {
    const int64_t last = static_cast<int64_t>(r) - 1;
    auto sq = [&](ir::Value* v, int64_t rows) {
      return b.add(
          OpKind::kSumDimIntList,
          {{"self", b.binary(OpKind::kMulTensor, v, v, dt)}, {"dim", std::vector<int64_t>{last}}, {"keepdim", true}},
          static_type(dt, shape({rows, 1})));
    };
    std::vector<int64_t> perm;
    for (size_t i = 0; i + 2 < r; ++i) perm.push_back(static_cast<int64_t>(i));
    perm.push_back(last);
    perm.push_back(last - 1);
    ir::Value* t2 = b.add(OpKind::kPermute, {{"self", x2}, {"dims", perm}}, static_type(dt, shape({M, R})));
    ir::Value* dot = b.add(OpKind::kMatmul, {{"self", x1}, {"other", t2}}, static_type(dt, shape({P, R})));
    ir::Value* n2 = b.add(OpKind::kPermute, {{"self", sq(x2, R)}, {"dims", perm}}, static_type(dt, shape({1, R})));
    ir::Value* sum = b.binary(OpKind::kAddTensor, sq(x1, P), n2, dt);
    ir::Value* d2 = b.binary(OpKind::kSubTensor, sum, b.binary(OpKind::kMulTensor, dot, 2.0, dt), dt);
    return b.done(b.unary(OpKind::kSqrt, b.unary(OpKind::kClampMin, d2, {{"min", 0.0}})));
  }
  ir::Value* a = b.unsqueezed(x1, {static_cast<int64_t>(r) - 1});  // [.., P, 1, M]
  ir::Value* c = b.unsqueezed(x2, {static_cast<int64_t>(r) - 2});  // [.., 1, R, M]
  ir::Value* d = b.binary(OpKind::kSubTensor, a, c, dt);
  if (!d) return false;
  const std::vector<int64_t> last{static_cast<int64_t>(r)};
  return b.done(b.p_norm(d, *p, last, false));
}

constexpr Decomposition kLossDecompositions[] = {
    {OpKind::kMseLoss, &pointwise_loss},
    {OpKind::kL1Loss, &pointwise_loss},
    {OpKind::kSmoothL1Loss, &pointwise_loss},
    {OpKind::kHuberLoss, &pointwise_loss},
    {OpKind::kSoftMarginLoss, &pointwise_loss},
    {OpKind::kMarginRankingLoss, &margin_ranking_loss},
    {OpKind::kHingeEmbeddingLoss, &hinge_embedding_loss},
    {OpKind::kBinaryCrossEntropy, &binary_cross_entropy},
    {OpKind::kBinaryCrossEntropyWithLogits, &binary_cross_entropy_with_logits},
    {OpKind::kKlDiv, &kl_div},
    {OpKind::kPoissonNllLoss, &poisson_nll_loss},
    {OpKind::kCosineEmbeddingLoss, &cosine_embedding_loss},
    {OpKind::kTripletMarginLoss, &triplet_margin_loss},
    {OpKind::kNllLossNd, &nll_loss_nd},
    {OpKind::kCrossEntropyLoss, &cross_entropy},
    {OpKind::kPairwiseDistance, &pairwise_distance},
    {OpKind::kCosineSimilarity, &cosine_similarity},
    {OpKind::kDist, &dist},
    {OpKind::kCdist, &cdist},
    {OpKind::kCdistForward, &cdist},
};

}  // namespace

std::span<const Decomposition> loss_decompositions() { return kLossDecompositions; }

}  // namespace kiln::lowering
