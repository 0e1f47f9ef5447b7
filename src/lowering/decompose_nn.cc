// Composites of torch.nn.functional and torch that the default dialect keeps,
// written in core ops as ATen defines them, one small function each:
//
//   losses, reduction 0 none, 1 mean, 2 sum:
//     mse (x - t)^2, l1 |x - t|, smooth_l1 and huber (quadratic below beta or
//     delta), soft_margin log1p(exp(-t x)), margin_ranking, hinge_embedding,
//     binary_cross_entropy (logs clamped at -100), ..._with_logits (through
//     log_sigmoid), kl_div, poisson_nll, cosine_embedding, triplet_margin,
//     nll_loss_nd (gather of the target's entries) and cross_entropy
//     (log_softmax then nll, with label smoothing; or class probabilities)
//   distances: pairwise_distance (norm of x1 - x2 + eps over the last dim),
//     cosine_similarity, dist
//   resampling to static sizes: upsample_nearest{1,2,3}d and nearest-exact as
//     index_select with index tables computed here as ATen computes them (in
//     float); linear, bilinear, trilinear and bicubic as weighted sums of
//     index_selects, one dim at a time from the last (ATen's order)
//   pooling and normalization: adaptive_avg_pool1d, avg_pool1d, max_pool1d,
//     max_pool1d_with_indices and adaptive_max_pool1d as their 2-d forms over
//     a unit height; max_pool2d_with_indices with
//     unread indices as max_pool2d; instance_norm from the input's statistics
//   shape composites: roll, rot90, new_full, atleast_{1,2,3}d, stack
//     (unsqueezes and a cat), hstack, vstack, dstack, column_stack, repeat of
//     static sizes (an expand between reshapes), diff (slices and
//     subtractions, prepend and append joined by a cat), softmax and
//     log_softmax over a dim other than the last (between two transposes),
//     meshgrid, repeat_interleave of an int,
//     pixel_unshuffle, channel_shuffle, mH, matrix_H, numpy_T, real,
//     resolve_conj, resolve_neg, conj_physical (of real tensors), diag,
//     diag_embed, diagflat, diagonal_copy, unsafe_chunk, unsafe_split, take
//   arithmetic: count_nonzero, nansum, nanmean, prelu, isclose, isreal,
//     float_power (in float64), linalg_vecdot, addr, addmv, addbmm, baddbmm, cross,
//     linalg_cross, renorm, trapezoid and trapz, subtract, sgn, angle,
//     sum_to_size, cdist, rrelu outside training, _safe_softmax
//   more shape composites: tensor_split, hsplit, vsplit, dsplit,
//     split_with_sizes_copy, unfold_copy, as_strided_copy, take_along_dim,
//     cartesian_prod, combinations of static sizes (an index_select of a
//     position table), argwhere (nonzero), flip of static sizes (index_selects
//     of reversed positions), unfold along a static dim (an index_select of
//     every window's positions), fftshift and ifftshift (rolls by half);
//     slice_scatter of static bounds as
//     index_copy at constant positions
//   einsum of static sizes: sums, permutes and one bmm per operand pair
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
  const auto r = int_value(n, "reduction", 1);
  if (!r || l->type.dtype != b.out().dtype) return nullptr;
  if (*r == 0) return same_sizes(l->type.sizes, b.out().sizes) ? l : nullptr;
  if (*r != 1 && *r != 2) return nullptr;
  return b.add(*r == 1 ? OpKind::kMean : OpKind::kSum, {{"self", l}}, b.out());
}

// ---- losses

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
  const auto margin = number_or(ctx, n, "margin", 0.0);
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
  const auto margin = number_or(ctx, n, "margin", 1.0);
  if (!floating_pair(n, x, t) || !margin || !same_sizes(x->type.sizes, t->type.sizes)) return false;
  Nodes b(ctx, n);
  ir::Value* clamped = b.unary(OpKind::kClampMin, b.unary(OpKind::kRsubScalar, x, {{"other", *margin}}), {{"min", 0.0}});
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
    ir::Value* tl = b.binary(OpKind::kMulTensor, t, b.unary(OpKind::kLog, b.binary(OpKind::kAddTensor, x, *eps, dt)), dt);
    l = tl ? b.binary(OpKind::kSubTensor, x, tl, dt) : nullptr;
  }
  if (l && *full) {
    ir::Value* s = b.binary(OpKind::kSubTensor, b.binary(OpKind::kMulTensor, t, b.unary(OpKind::kLog, t), dt), t, dt);
    ir::Value* h = b.binary(OpKind::kMulTensor,
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
  const auto margin = number_or(ctx, n, "margin", 0.0);
  if (!floating_pair(n, x1, x2) || !t || !margin || !same_sizes(x1->type.sizes, x2->type.sizes)) return false;
  const size_t d = t->type.sizes.size();
  if (x1->type.sizes.size() != d + 1) return false;
  Nodes b(ctx, n);
  const DType dt = x1->type.dtype;
  const ir::TensorType row = reduced(x1->type, {static_cast<int64_t>(d)}, false);
  auto sum = [&](ir::Value* v) {
    return b.add(OpKind::kSumDimIntList, {{"self", v}, {"dim", std::vector<int64_t>{static_cast<int64_t>(d)}}, {"keepdim", false}},
                 row);
  };
  ir::Value* prod = sum(b.binary(OpKind::kMulTensor, x1, x2, dt));
  ir::Value* m1 = b.binary(OpKind::kAddTensor, sum(b.binary(OpKind::kMulTensor, x1, x1, dt)), 1e-12, dt);
  ir::Value* m2 = b.binary(OpKind::kAddTensor, sum(b.binary(OpKind::kMulTensor, x2, x2, dt)), 1e-12, dt);
  ir::Value* cos = b.binary(OpKind::kDivTensor, prod, b.unary(OpKind::kSqrt, b.binary(OpKind::kMulTensor, m1, m2, dt)), dt);
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
    ir::Value* w = b.add(OpKind::kIndexSelect, {{"self", weight}, {"dim", int64_t{0}}, {"index", flat}},
                         static_type(dt, {count}));
    c.weight = b.add(OpKind::kReshape, {{"self", w}, {"shape", *ts}}, wt);
  } else {
    c.weight = b.add(OpKind::kFullLike, {{"self", t}, {"fill_value", 1.0}, {"dtype", dt}}, wt);
  }
  c.weight = b.fill(c.weight, ignored, 0.0);
  return c;
}

// nll_loss over class dim 1 (or 0 for one sample): -weight[t] x[t], 0 where
// t is ignore_index; mean divides by the sum of the weights taken.
ir::Value* nll(Nodes& b, ir::Value* x, ir::Value* t, ir::Value* weight, int64_t ignore,
               int64_t reduction) {
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
  const auto reduction = int_value(n, "reduction", 1);
  const auto ignore = int_value(n, "ignore_index", -100);
  const auto ls = number_or(ctx, n, "label_smoothing", 0.0);
  const auto xs = x ? static_sizes(x->type) : std::nullopt;
  if (!x || !t || n.outputs.size() != 1 || !is_floating(x->type.dtype) || n.outputs[0]->type.dtype != x->type.dtype ||
      !reduction || *reduction < 0 || *reduction > 2 || !ignore || !ls || !xs || xs->empty() || (!absent(n, "weight") && !w))
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
    return mean_divisor ? b.binary(OpKind::kDivTensor, total, mean_divisor, dt) : b.binary(OpKind::kDivTensor, total, count, dt);
  };
  if (is_floating(t->type.dtype)) {
    if (t->type.dtype != dt || !same_sizes(t->type.sizes, x->type.sizes)) return false;
    ir::Value* tt = t;
    if (*ls > 0)
      tt = b.binary(OpKind::kAddTensor, b.binary(OpKind::kMulTensor, t, 1.0 - *ls, dt), *ls / static_cast<double>(classes), dt);
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
  const auto p = number_or(ctx, n, "p", 2.0);
  const auto eps = number_or(ctx, n, "eps", 1e-6);
  const auto keepdim = bool_value(n, "keepdim", false);
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
  const auto margin = number_or(ctx, n, "margin", 1.0);
  const auto p = number_or(ctx, n, "p", 2.0);
  const auto eps = number_or(ctx, n, "eps", 1e-6);
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
  const auto eps = number_or(ctx, n, "eps", 1e-8);
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
    return b.add(OpKind::kSumDimIntList, {{"self", v}, {"dim", dims}, {"keepdim", false}}, reduced(v->type, dims, false));
  };
  // Each squared norm over the broadcast shape, as ATen expands both first.
  ir::Value* e1 = b.add(OpKind::kExpandAs, {{"self", x1}, {"other", prod}}, prod->type);
  ir::Value* e2 = b.add(OpKind::kExpandAs, {{"self", x2}, {"other", prod}}, prod->type);
  ir::Value* n1 = sum(b.binary(OpKind::kMulTensor, e1, e1, dt));
  ir::Value* n2 = sum(b.binary(OpKind::kMulTensor, e2, e2, dt));
  ir::Value* denom = b.unary(OpKind::kSqrt, b.unary(OpKind::kClampMin, b.binary(OpKind::kMulTensor, n1, n2, dt),
                                                  {{"min", *eps * *eps}}));
  if (!same_sizes(row.sizes, b.out().sizes)) return false;
  return b.done(b.binary(OpKind::kDivTensor, sum(prod), denom, dt));
}

// dist(x, y, p) = norm(x - y, p) over every element.
Expected<bool> dist(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* y = PatternContext::tensor_arg(n, "other");
  const auto p = number_or(ctx, n, "p", 2.0);
  if (!floating_pair(n, x, y) || !p || *p == 0) return false;
  Nodes b(ctx, n);
  ir::Value* d = b.binary(OpKind::kSubTensor, x, y, x->type.dtype);
  if (!d) return false;
  std::vector<int64_t> all(d->type.sizes.size());
  std::iota(all.begin(), all.end(), 0);
  return b.done(b.p_norm(d, *p, all, false));
}

// ---- resampling

// The source scale ATen uses for one dim: 1 / factor when a scale factor is
// given (factor > 0), else in / out; (in - 1) / (out - 1) with align_corners.
// In float, as ATen's kernels compute it for float tensors.
float resample_scale(int64_t in, int64_t out, double factor, bool align_corners) {
  if (align_corners) return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
  return factor > 0 ? static_cast<float>(1.0 / factor) : static_cast<float>(in) / static_cast<float>(out);
}

// `x` resampled along `dim` (to `out` entries): sum over taps k of
// index_select(x, dim, idx[k]) * w[k], w shaped to broadcast along `dim`.
ir::Value* taps(Nodes& b, ir::Value* x, int64_t dim, const std::vector<std::vector<int64_t>>& idx,
                const std::vector<std::vector<float>>& w) {
  ir::TensorType t = x->type;
  const int64_t out = static_cast<int64_t>(idx[0].size());
  t.sizes[static_cast<size_t>(dim)] = ir::Dim::of(out);
  std::vector<int64_t> wshape(t.sizes.size() - static_cast<size_t>(dim), 1);
  wshape[0] = out;
  ir::Value* acc = nullptr;
  for (size_t k = 0; k < idx.size(); ++k) {
    ir::Value* g = b.add(OpKind::kIndexSelect, {{"self", x}, {"dim", dim}, {"index", b.constant(index_table(idx[k]))}}, t);
    if (w.empty()) return g;
    Tensor wt = Tensor::zeros(DType::Float32, wshape);
    std::copy(w[k].begin(), w[k].end(), wt.data<float>());
    ir::Value* term = b.binary(OpKind::kMulTensor, g, b.constant(wt.to(t.dtype)), t.dtype);
    acc = acc ? b.binary(OpKind::kAddTensor, acc, term, t.dtype) : term;
  }
  return acc;
}

// upsample_* and _upsample_nearest_exact*: each spatial dim (the last 1, 2 or
// 3) resampled from the last, to the output's static sizes.
Expected<bool> upsample(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, n.op == OpKind::kUpsampleBilinear2dAaDefault ? "self" : "input");
  if (!x || n.outputs.size() != 1 || !is_floating(x->type.dtype) || n.outputs[0]->type.dtype != x->type.dtype)
    return false;
  int spatial = 0;
  enum class Mode { kNearest, kNearestExact, kLinear, kCubic, kLinearAntialiased } mode = Mode::kNearest;
  switch (n.op) {
    case OpKind::kUpsampleNearest1d: spatial = 1; break;
    case OpKind::kUpsampleNearest2d: spatial = 2; break;
    case OpKind::kUpsampleNearest3d: spatial = 3; break;
    case OpKind::kUpsampleNearestExact1d: spatial = 1, mode = Mode::kNearestExact; break;
    case OpKind::kUpsampleNearestExact2d: spatial = 2, mode = Mode::kNearestExact; break;
    case OpKind::kUpsampleNearestExact3d: spatial = 3, mode = Mode::kNearestExact; break;
    case OpKind::kUpsampleLinear1d: spatial = 1, mode = Mode::kLinear; break;
    case OpKind::kUpsampleBilinear2d: spatial = 2, mode = Mode::kLinear; break;
    case OpKind::kUpsampleTrilinear3d: spatial = 3, mode = Mode::kLinear; break;
    case OpKind::kUpsampleBicubic2d: spatial = 2, mode = Mode::kCubic; break;
    case OpKind::kUpsampleBilinear2dAa:
    case OpKind::kUpsampleBilinear2dAaDefault: spatial = 2, mode = Mode::kLinearAntialiased; break;
    default: return false;
  }
  const auto in = static_sizes(x->type);
  const auto out = static_sizes(n.outputs[0]->type);
  if (!in || !out || in->size() != out->size() || in->size() != static_cast<size_t>(spatial) + 2) return false;
  bool align_corners = false;
  if (mode == Mode::kLinear || mode == Mode::kCubic || mode == Mode::kLinearAntialiased) {
    const auto a = bool_value(n, "align_corners");
    if (!a) return false;
    align_corners = *a;
  }
  std::optional<std::vector<double>> factors;
  if (n.op == OpKind::kUpsampleBilinear2dAaDefault) {
    // scales_h / scales_w: each optional (0: from the sizes).
    std::vector<double> f;
    for (const char* name : {"scales_h", "scales_w"}) {
      if (absent(n, name)) {
        f.push_back(0.0);
        continue;
      }
      const double* v = std::get_if<double>(n.find(name));
      if (!v) return false;
      f.push_back(*v);
    }
    if (f[0] > 0 || f[1] > 0) factors = f;
  } else if (!absent(n, "scale_factors")) {
    const auto* f = std::get_if<std::vector<double>>(n.find("scale_factors"));
    if (!f || f->size() != static_cast<size_t>(spatial)) return false;
    factors = *f;
  }
  Nodes b(ctx, n);
  ir::Value* y = x;
  for (int s = spatial - 1; s >= 0; --s) {
    const size_t dim = 2 + static_cast<size_t>(s);
    const int64_t isz = (*in)[dim], osz = (*out)[dim];
    if (isz == osz && mode != Mode::kCubic && mode != Mode::kLinearAntialiased &&
        !(mode == Mode::kLinear && !align_corners && factors))
      continue;
    if (isz <= 0 || osz <= 0) return false;
    const double factor = factors ? (*factors)[static_cast<size_t>(s)] : 0.0;
    std::vector<std::vector<int64_t>> idx;
    std::vector<std::vector<float>> w;
    if (mode == Mode::kNearest || mode == Mode::kNearestExact) {
      const float scale = resample_scale(isz, osz, factor, false);
      idx.assign(1, std::vector<int64_t>(static_cast<size_t>(osz)));
      for (int64_t o = 0; o < osz; ++o) {
        const float src = mode == Mode::kNearest ? static_cast<float>(o) * scale : (static_cast<float>(o) + 0.5f) * scale;
        idx[0][static_cast<size_t>(o)] = std::min(static_cast<int64_t>(std::floor(src)), isz - 1);
      }
    } else if (mode == Mode::kLinear) {
      const float scale = resample_scale(isz, osz, factor, align_corners);
      idx.assign(2, std::vector<int64_t>(static_cast<size_t>(osz)));
      w.assign(2, std::vector<float>(static_cast<size_t>(osz)));
      for (int64_t o = 0; o < osz; ++o) {
        const float src = align_corners ? scale * static_cast<float>(o)
                                        : std::max(scale * (static_cast<float>(o) + 0.5f) - 0.5f, 0.0f);
        const int64_t i0 = std::min(static_cast<int64_t>(src), isz - 1);
        const int64_t i1 = i0 + (i0 < isz - 1 ? 1 : 0);
        const float l1 = std::min(src - static_cast<float>(i0), 1.0f);
        idx[0][static_cast<size_t>(o)] = i0;
        idx[1][static_cast<size_t>(o)] = i1;
        w[0][static_cast<size_t>(o)] = 1.0f - l1;
        w[1][static_cast<size_t>(o)] = l1;
      }
    } else if (mode == Mode::kLinearAntialiased) {
      // ATen's antialiased bilinear (as Pillow's resampling): output o reads the
      // inputs within `support` of its center scale * (o + 0.5), each weighted
      // by the triangle filter stretched by the scale when shrinking, the
      // weights normalized to sum to 1; align_corners only changes the scale.
      const float scale = resample_scale(isz, osz, factor, align_corners);
      const float support = scale >= 1.0f ? scale : 1.0f;
      const float invscale = scale >= 1.0f ? 1.0f / scale : 1.0f;
      const int64_t most = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
      idx.assign(static_cast<size_t>(most), std::vector<int64_t>(static_cast<size_t>(osz)));
      w.assign(static_cast<size_t>(most), std::vector<float>(static_cast<size_t>(osz), 0.0f));
      for (int64_t o = 0; o < osz; ++o) {
        const float center = scale * (static_cast<float>(o) + 0.5f);
        const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5f), 0);
        const int64_t size =
            std::clamp<int64_t>(std::min<int64_t>(static_cast<int64_t>(center + support + 0.5f), isz) - lo, 0, most);
        float total = 0.0f;
        for (int64_t j = 0; j < most; ++j) {
          idx[static_cast<size_t>(j)][static_cast<size_t>(o)] = std::min(lo + j, isz - 1);
          if (j >= size) continue;
          const float t = std::abs((static_cast<float>(j + lo) - center + 0.5f) * invscale);
          const float v = t < 1.0f ? 1.0f - t : 0.0f;
          w[static_cast<size_t>(j)][static_cast<size_t>(o)] = v;
          total += v;
        }
        if (total != 0.0f)
          for (int64_t j = 0; j < size; ++j) w[static_cast<size_t>(j)][static_cast<size_t>(o)] /= total;
      }
    } else {
      // Keys' cubic convolution with A = -0.75, taps clamped to the edge.
      const float scale = resample_scale(isz, osz, factor, align_corners);
      const float A = -0.75f;
      auto near = [&](float t) { return ((A + 2) * t - (A + 3)) * t * t + 1; };
      auto far = [&](float t) { return ((A * t - 5 * A) * t + 8 * A) * t - 4 * A; };
      idx.assign(4, std::vector<int64_t>(static_cast<size_t>(osz)));
      w.assign(4, std::vector<float>(static_cast<size_t>(osz)));
      for (int64_t o = 0; o < osz; ++o) {
        const float src = align_corners ? scale * static_cast<float>(o) : scale * (static_cast<float>(o) + 0.5f) - 0.5f;
        const float f = std::floor(src);
        const float t = src - f;
        const float c[4] = {far(t + 1.0f), near(t), near(1.0f - t), far(2.0f - t)};
        for (int k = 0; k < 4; ++k) {
          idx[static_cast<size_t>(k)][static_cast<size_t>(o)] =
              std::clamp<int64_t>(static_cast<int64_t>(f) - 1 + k, 0, isz - 1);
          w[static_cast<size_t>(k)][static_cast<size_t>(o)] = c[k];
        }
      }
    }
    y = taps(b, y, static_cast<int64_t>(dim), idx, w);
  }
  if (y == x) y = b.add(OpKind::kClone, {{"self", x}}, x->type);
  return b.done(y);
}

// ---- pooling and normalization

// adaptive_avg_pool1d, avg_pool1d, max_pool1d: the 2-d op over [..., 1, L].
Expected<bool> pool1d(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const bool with_indices = n.op == OpKind::kMaxPool1dWithIndices || n.op == OpKind::kAdaptiveMaxPool1d;
  if (!x || n.outputs.size() != (with_indices ? 2u : 1u) || !is_floating(x->type.dtype) || x->type.sizes.size() < 2 ||
      x->type.sizes.size() > 3)
    return false;
  const int64_t h = static_cast<int64_t>(x->type.sizes.size()) - 1;  // the unit height's dim
  std::vector<ir::TensorType> pooled;
  for (const ir::Value* o : n.outputs) {
    if (o->type.sizes.size() != x->type.sizes.size()) return false;
    pooled.push_back(o->type);
    pooled.back().sizes.insert(pooled.back().sizes.begin() + h, ir::Dim::of(1));
  }
  auto pair = [&](const char* arg, int64_t first, std::optional<std::vector<int64_t>> def) -> std::optional<std::vector<int64_t>> {
    auto v = int_list(n, arg, def);
    if (!v || v->size() > 1) return std::nullopt;
    if (v->empty()) return std::vector<int64_t>{};
    return std::vector<int64_t>{first, (*v)[0]};
  };
  std::vector<ir::NamedArg> args;
  OpKind op;
  if (n.op == OpKind::kAdaptiveAvgPool1d || n.op == OpKind::kAdaptiveMaxPool1d) {
    auto size = pair("output_size", 1, std::nullopt);
    if (!size || size->empty()) return false;
    op = n.op == OpKind::kAdaptiveAvgPool1d ? OpKind::kAdaptiveAvgPool2d : OpKind::kAdaptiveMaxPool2d;
    args = {{"output_size", *size}};
  } else {
    auto k = pair("kernel_size", 1, std::nullopt);
    auto s = pair("stride", 1, std::vector<int64_t>{});
    auto p = pair("padding", 0, std::vector<int64_t>{0});
    const auto ceil = bool_value(n, "ceil_mode", false);
    if (!k || k->empty() || !s || !p || p->empty() || !ceil) return false;
    if (s->empty()) s = k;
    args = {{"kernel_size", *k}, {"stride", *s}, {"padding", *p}};
    if (n.op == OpKind::kAvgPool1d) {
      const auto include = bool_value(n, "count_include_pad", true);
      if (!include) return false;
      op = OpKind::kAvgPool2d;
      args.push_back({"ceil_mode", *ceil});
      args.push_back({"count_include_pad", *include});
    } else {
      auto d = pair("dilation", 1, std::vector<int64_t>{1});
      if (!d || d->empty()) return false;
      op = with_indices ? OpKind::kMaxPool2dWithIndices : OpKind::kMaxPool2d;
      args.push_back({"dilation", *d});
      args.push_back({"ceil_mode", *ceil});
    }
  }
  Nodes b(ctx, n);
  ir::TensorType tall = x->type;
  tall.sizes.insert(tall.sizes.begin() + h, ir::Dim::of(1));
  args.insert(args.begin(), {"self", b.add(OpKind::kUnsqueeze, {{"self", x}, {"dim", h}}, tall)});
  const std::vector<ir::Value*> p = b.add_multi(op, std::move(args), pooled);
  // With a unit height a 2-d pool's index (h * width + w) is the 1-d one.
  for (size_t i = 1; i < p.size(); ++i)
    ctx.replace_uses(n.outputs[i], b.add(OpKind::kSqueezeDims, {{"self", p[i]}, {"dim", std::vector<int64_t>{h}}},
                                         n.outputs[i]->type));
  return b.done(b.add(OpKind::kSqueezeDims, {{"self", p[0]}, {"dim", std::vector<int64_t>{h}}}, n.outputs[0]->type));
}

// max_pool2d_with_indices whose indices nothing reads (the aten dialect's
// form of max_pool2d) is max_pool2d.
Expected<bool> pool_values_only(PatternContext& ctx, ir::Node& n) {
  if (n.outputs.size() != 2 || ctx.uses(n.outputs[1]) != 0) return false;
  Nodes b(ctx, n);
  return b.done(b.add(OpKind::kMaxPool2d, n.args, b.out()));
}

// instance_norm from the input's statistics: (x - mean) / sqrt(var + eps) over
// each sample's and channel's spatial dims (biased variance), then weight and
// bias per channel.
Expected<bool> instance_norm(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "input");
  ir::Value* w = PatternContext::tensor_arg(n, "weight");
  ir::Value* bias = PatternContext::tensor_arg(n, "bias");
  const auto use_input_stats = bool_value(n, "use_input_stats");
  const auto eps = ctx.number(n, "eps");
  if (!x || n.outputs.size() != 1 || !is_floating(x->type.dtype) || n.outputs[0]->type.dtype != x->type.dtype ||
      x->type.sizes.size() < 3 || !use_input_stats || !*use_input_stats || !eps)
    return false;
  if ((w && w->type.dtype != x->type.dtype) || (bias && bias->type.dtype != x->type.dtype)) return false;
  const size_t rank = x->type.sizes.size();
  std::vector<int64_t> dims;
  for (size_t d = 2; d < rank; ++d) dims.push_back(static_cast<int64_t>(d));
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  const ir::TensorType kept = reduced(x->type, dims, true);
  ir::Value* mean = b.add(OpKind::kMeanDim, {{"self", x}, {"dim", dims}, {"keepdim", true}}, kept);
  ir::Value* c = b.binary(OpKind::kSubTensor, x, mean, dt);
  ir::Value* var = b.add(OpKind::kMeanDim, {{"self", b.binary(OpKind::kMulTensor, c, c, dt)}, {"dim", dims}, {"keepdim", true}},
                         kept);
  ir::Value* y = b.binary(OpKind::kMulTensor, c, b.unary(OpKind::kRsqrt, b.binary(OpKind::kAddTensor, var, *eps, dt)), dt);
  auto per_channel = [&](ir::Value* v) -> ir::Value* {
    if (v->type.sizes.size() != 1) return nullptr;
    ir::TensorType col{dt, {v->type.sizes[0]}};
    std::vector<int64_t> shape{-1};
    for (size_t d = 2; d < rank; ++d) {
      col.sizes.push_back(ir::Dim::of(1));
      shape.push_back(1);
    }
    if (!v->type.sizes[0].is_static()) return nullptr;
    shape[0] = v->type.sizes[0].value;
    return b.add(OpKind::kView, {{"self", v}, {"size", shape}}, col);
  };
  if (w) {
    ir::Value* wc = per_channel(w);
    if (!wc) return false;
    y = b.binary(OpKind::kMulTensor, y, wc, dt);
  }
  if (bias) {
    ir::Value* bc = per_channel(bias);
    if (!bc) return false;
    y = b.binary(OpKind::kAddTensor, y, bc, dt);
  }
  return b.done(y);
}

// ---- shape composites

// roll(x, shifts, dims): each dim the concatenation of its last `shift`
// entries and the rest; no dims: the flattened tensor rolled, reshaped back.
Expected<bool> roll(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto shifts = int_list(n, "shifts");
  const auto dims = int_list(n, "dims", std::vector<int64_t>{});
  const auto sizes = x ? static_sizes(x->type) : std::nullopt;
  if (!x || n.outputs.size() != 1 || !shifts || !dims || !sizes) return false;
  Nodes b(ctx, n);
  auto roll_dim = [&](ir::Value* v, const std::vector<int64_t>& vs, int64_t d, int64_t shift) {
    const int64_t size = vs[static_cast<size_t>(d)];
    const int64_t s = size == 0 ? 0 : ((shift % size) + size) % size;
    if (s == 0) return v;
    auto part = [&](int64_t start, int64_t end) {
      std::vector<int64_t> ps = vs;
      ps[static_cast<size_t>(d)] = end - start;
      return b.add(OpKind::kSliceTensor, {{"self", v}, {"dim", d}, {"start", start}, {"end", end}},
                   static_type(v->type.dtype, ps));
    };
    std::vector<ir::Value*> parts{part(size - s, size), part(0, size - s)};
    return b.add(OpKind::kCat, {{"tensors", parts}, {"dim", d}}, v->type);
  };
  ir::Value* y = x;
  if (dims->empty()) {
    if (shifts->size() != 1) return false;
    int64_t total = 1;
    for (int64_t s : *sizes) total *= s;
    ir::Value* flat = b.add(OpKind::kReshape, {{"self", x}, {"shape", std::vector<int64_t>{total}}},
                            static_type(x->type.dtype, {total}));
    y = roll_dim(flat, {total}, 0, (*shifts)[0]);
    y = b.add(OpKind::kReshape, {{"self", y}, {"shape", *sizes}}, x->type);
  } else {
    if (shifts->size() != dims->size()) return false;
    for (size_t i = 0; i < dims->size(); ++i) {
      const int64_t d = norm_dim((*dims)[i], sizes->size());
      if (d < 0) return false;
      y = roll_dim(y, *sizes, d, (*shifts)[i]);
    }
  }
  if (y == x) y = b.add(OpKind::kClone, {{"self", x}}, x->type);
  return b.done(y);
}

// rot90(x, k, dims): k = 1: flip dims[1] then transpose; 2: flip both; 3: flip dims[0] then transpose.
Expected<bool> rot90(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto k = int_value(n, "k", 1);
  const auto dims = int_list(n, "dims", std::vector<int64_t>{0, 1});
  if (!x || n.outputs.size() != 1 || !k || !dims || dims->size() != 2) return false;
  const int64_t d0 = norm_dim((*dims)[0], x->type.sizes.size()), d1 = norm_dim((*dims)[1], x->type.sizes.size());
  if (d0 < 0 || d1 < 0 || d0 == d1) return false;
  const int64_t turns = ((*k % 4) + 4) % 4;
  Nodes b(ctx, n);
  if (turns == 0) return b.done(b.add(OpKind::kClone, {{"self", x}}, x->type));
  if (turns == 2) return b.done(b.add(OpKind::kFlip, {{"self", x}, {"dims", std::vector<int64_t>{d0, d1}}}, x->type));
  ir::Value* f = b.add(OpKind::kFlip, {{"self", x}, {"dims", std::vector<int64_t>{turns == 1 ? d1 : d0}}}, x->type);
  return b.done(b.add(OpKind::kTranspose, {{"self", f}, {"dim0", d0}, {"dim1", d1}}, n.outputs[0]->type));
}

// new_full(x, size, value) = full(size, value) in the result's dtype.
Expected<bool> new_full(PatternContext& ctx, ir::Node& n) {
  const auto size = int_list(n, "size");
  const ir::Arg* value = n.find("fill_value");
  if (!size || !value || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  return b.done(
      b.add(OpKind::kFull, {{"size", *size}, {"fill_value", *value}, {"dtype", b.out().dtype}}, b.out()));
}

// atleast_nd(x): a 0-d tensor as [1, ...], a 1-d [n] as [1, n] (2-d) or
// [1, n, 1] (3-d), a 2-d [m, n] as [m, n, 1] (3-d); others as they are.
ir::Value* at_least(Nodes& b, ir::Value* x, size_t rank) {
  const size_t r = x->type.sizes.size();
  if (r >= rank) return x;
  if (rank == 1) return b.unsqueezed(x, {0});
  if (rank == 2) return b.unsqueezed(x, r == 0 ? std::vector<int64_t>{0, 0} : std::vector<int64_t>{0});
  if (r == 0) return b.unsqueezed(x, {0, 0, 0});
  if (r == 1) return b.unsqueezed(x, {0, 2});
  return b.unsqueezed(x, {2});
}

Expected<bool> atleast(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1) return false;
  const size_t rank = n.op == OpKind::kAtleast1d ? 1 : n.op == OpKind::kAtleast2d ? 2 : 3;
  Nodes b(ctx, n);
  ir::Value* y = at_least(b, x, rank);
  if (y == x) y = b.add(OpKind::kAlias, {{"self", x}}, x->type);
  return b.done(y);
}

// hstack, vstack, dstack, column_stack: a cat of the tensors made 1-, 2- or
// 3-d (column_stack: vectors as columns).
Expected<bool> stack_like(PatternContext& ctx, ir::Node& n) {
  const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("tensors"));
  if (!ins || ins->empty() || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  std::vector<ir::Value*> parts;
  int64_t dim = 0;
  for (ir::Value* v : *ins) {
    switch (n.op) {
      case OpKind::kHstack: parts.push_back(at_least(b, v, 1)); break;
      case OpKind::kVstack: parts.push_back(at_least(b, v, 2)); break;
      case OpKind::kDstack: parts.push_back(at_least(b, v, 3)); break;
      default:
        parts.push_back(v->type.sizes.size() == 0   ? b.unsqueezed(v, {0, 1})
                        : v->type.sizes.size() == 1 ? b.unsqueezed(v, {1})
                                                    : v);
    }
  }
  if (n.op == OpKind::kHstack) dim = parts[0]->type.sizes.size() == 1 ? 0 : 1;
  if (n.op == OpKind::kDstack) dim = 2;
  if (n.op == OpKind::kColumnStack) dim = 1;
  return b.done(b.add(OpKind::kCat, {{"tensors", parts}, {"dim", dim}}, b.out()));
}

// stack(tensors, dim): each tensor with a unit dim inserted at dim, joined
// along it (sizes may be symbolic).
Expected<bool> stack(PatternContext& ctx, ir::Node& n) {
  const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("tensors"));
  const auto dim = int_value(n, "dim", 0);
  if (!ins || ins->empty() || !dim || n.outputs.size() != 1) return false;
  const int64_t d = norm_dim(*dim, (*ins)[0]->type.sizes.size() + 1);
  if (d < 0) return false;
  Nodes b(ctx, n);
  std::vector<ir::Value*> parts;
  for (ir::Value* v : *ins) {
    if (v->type.dtype != b.out().dtype || v->type.sizes.size() != (*ins)[0]->type.sizes.size()) return false;
    parts.push_back(b.unsqueezed(v, {d}));
  }
  return b.done(b.add(OpKind::kCat, {{"tensors", parts}, {"dim", d}}, b.out()));
}

// repeat(x, repeats) of static sizes: x viewed with leading unit dims to
// len(repeats) dims and a unit dim before each repeated one, expanded there
// to its count, and the pairs merged.
Expected<bool> repeat(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto reps = int_list(n, "repeats");
  const auto sx = x ? static_sizes(x->type) : std::nullopt;
  if (!sx || !reps || reps->size() < sx->size() || n.outputs.size() != 1 || n.outputs[0]->type.dtype != x->type.dtype)
    return false;
  std::vector<int64_t> padded(reps->size() - sx->size(), 1);
  padded.insert(padded.end(), sx->begin(), sx->end());
  std::vector<int64_t> viewed, wide, merged;
  bool repeated = false;
  for (size_t i = 0; i < reps->size(); ++i) {
    const int64_t r = (*reps)[i];
    if (r < 0) return false;
    if (r != 1) {
      viewed.push_back(1);
      wide.push_back(r);
      repeated = true;
    }
    viewed.push_back(padded[i]);
    wide.push_back(padded[i]);
    merged.push_back(r * padded[i]);
  }
  const DType dt = x->type.dtype;
  if (!same_sizes(static_type(dt, merged).sizes, n.outputs[0]->type.sizes)) return false;
  Nodes b(ctx, n);
  ir::Value* v = b.reshape(x, viewed);
  if (!repeated) return b.done(b.add(OpKind::kClone, {{"self", v}}, b.out()));
  ir::Value* e = b.add(OpKind::kExpand, {{"self", v}, {"size", wide}}, static_type(dt, wide));
  return b.done(b.reshape(e, merged));
}

// diff(x, n, dim, prepend, append): prepend, x and append joined along dim
// (of static size), then n times the later entries minus the earlier ones.
// Bool tensors (whose diff is an exclusive or) and n reaching the length
// (an empty result) are left as they are.
Expected<bool> diff(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto order = int_value(n, "n", 1);
  const auto dim = int_value(n, "dim", -1);
  if (!x || !order || *order < 0 || !dim || n.outputs.size() != 1 || x->type.dtype == DType::Bool ||
      n.outputs[0]->type.dtype != x->type.dtype)
    return false;
  const size_t rank = x->type.sizes.size();
  const int64_t d = norm_dim(*dim, rank);
  if (d < 0) return false;
  std::vector<ir::Value*> parts;
  int64_t length = 0;
  for (const char* arg : {"prepend", "self", "append"}) {
    if (absent(n, arg)) continue;
    ir::Value* v = PatternContext::tensor_arg(n, arg);
    if (!v || v->type.dtype != x->type.dtype || v->type.sizes.size() != rank) return false;
    const ir::Dim& len = v->type.sizes[static_cast<size_t>(d)];
    if (!len.is_static()) return false;
    for (size_t k = 0; k < rank; ++k)
      if (static_cast<int64_t>(k) != d && !same_dim(v->type.sizes[k], x->type.sizes[k])) return false;
    parts.push_back(v);
    length += len.value;
  }
  if (*order >= length) return false;
  Nodes b(ctx, n);
  ir::Value* v = parts[0];
  if (parts.size() > 1) {
    ir::TensorType joined = x->type;
    joined.sizes[static_cast<size_t>(d)] = ir::Dim::of(length);
    v = b.add(OpKind::kCat, {{"tensors", parts}, {"dim", d}}, joined);
  }
  for (int64_t k = 0; k < *order; ++k, --length)
    v = b.binary(OpKind::kSubTensor, b.slice(v, d, 1, length), b.slice(v, d, 0, length - 1), x->type.dtype);
  if (!same_sizes(v->type.sizes, b.out().sizes)) return false;
  if (*order == 0) v = b.add(OpKind::kClone, {{"self", v}}, b.out());
  return b.done(v);
}

// softmax / log_softmax over a dim other than the last: that dim swapped with
// the last, the op over the last, swapped back (each row holds the same
// numbers, so the result is the same; engines take softmax over the last dim).
Expected<bool> softmax_other_dim(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto dim = int_value(n, "dim");
  if (!x || !dim || n.outputs.size() != 1 || !is_floating(x->type.dtype) ||
      bool_value(n, "half_to_float", false) != false)
    return false;
  const size_t rank = x->type.sizes.size();
  const int64_t d = norm_dim(*dim, rank), last = static_cast<int64_t>(rank) - 1;
  if (d < 0 || d == last) return false;
  Nodes b(ctx, n);
  auto swapped = [&](ir::Value* v, DType dt) {
    ir::TensorType t{dt, v->type.sizes};
    std::swap(t.sizes[static_cast<size_t>(d)], t.sizes[static_cast<size_t>(last)]);
    return b.add(OpKind::kTranspose, {{"self", v}, {"dim0", d}, {"dim1", last}}, t);
  };
  std::vector<ir::NamedArg> args = n.args;
  for (ir::NamedArg& a : args) {
    if (a.name == "self") a.value = swapped(x, x->type.dtype);
    if (a.name == "dim") a.value = last;
  }
  ir::TensorType rows = x->type;
  std::swap(rows.sizes[static_cast<size_t>(d)], rows.sizes[static_cast<size_t>(last)]);
  rows.dtype = b.out().dtype;
  return b.done(swapped(b.add(n.op, std::move(args), rows), b.out().dtype));
}

// meshgrid(tensors, indexing): each 0- or 1-d tensor viewed along its own dim
// (the first two swapped for "xy") and expanded to the grid.
Expected<bool> meshgrid(PatternContext& ctx, ir::Node& n) {
  const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("tensors"));
  std::string indexing = "ij";
  if (n.op == OpKind::kMeshgridIndexing) {
    const auto* s = std::get_if<std::string>(n.find("indexing"));
    if (!s || (*s != "ij" && *s != "xy")) return false;
    indexing = *s;
  }
  if (!ins || ins->empty() || ins->size() != n.outputs.size()) return false;
  const size_t k = ins->size();
  const auto grid = static_sizes(n.outputs[0]->type);
  if (!grid || grid->size() != k) return false;
  Nodes b(ctx, n);
  std::vector<ir::Value*> outs;
  for (size_t i = 0; i < k; ++i) {
    ir::Value* v = (*ins)[i];
    if (v->type.sizes.size() > 1) return false;
    size_t pos = i;
    if (indexing == "xy" && k >= 2 && i < 2) pos = 1 - i;
    std::vector<int64_t> shape(k, 1);
    shape[pos] = (*grid)[pos];
    ir::Value* col = b.add(OpKind::kView, {{"self", v}, {"size", shape}}, static_type(v->type.dtype, shape));
    outs.push_back(b.add(OpKind::kExpand, {{"self", col}, {"size", *grid}}, n.outputs[i]->type));
  }
  for (size_t i = 0; i < k; ++i) ctx.replace_uses(n.outputs[i], outs[i]);
  return true;
}

// repeat_interleave(x, repeats, dim): each entry along dim repeated `repeats`
// times in place: unsqueeze after dim, expand, merge (no dim: of the flattened x).
Expected<bool> repeat_interleave(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto repeats = int_value(n, "repeats");
  auto sizes = x ? static_sizes(x->type) : std::nullopt;
  if (!x || n.outputs.size() != 1 || !repeats || *repeats < 0 || !sizes) return false;
  Nodes b(ctx, n);
  ir::Value* y = x;
  int64_t d = 0;
  if (absent(n, "dim")) {
    int64_t total = 1;
    for (int64_t s : *sizes) total *= s;
    sizes = std::vector<int64_t>{total};
    y = b.add(OpKind::kReshape, {{"self", x}, {"shape", *sizes}}, static_type(x->type.dtype, *sizes));
  } else {
    const auto given = int_value(n, "dim");
    d = given ? norm_dim(*given, sizes->size()) : -1;
    if (d < 0) return false;
  }
  std::vector<int64_t> wide = *sizes;
  wide.insert(wide.begin() + d + 1, *repeats);
  y = b.unsqueezed(y, {d + 1});
  y = b.add(OpKind::kExpand, {{"self", y}, {"size", wide}}, static_type(x->type.dtype, wide));
  std::vector<int64_t> merged = *sizes;
  merged[static_cast<size_t>(d)] *= *repeats;
  return b.done(b.add(OpKind::kReshape, {{"self", y}, {"shape", merged}}, b.out()));
}

// pixel_unshuffle(x, r): [.., C, H r, W r] -> [.., C, H, r, W, r] -> [.., C, r, r, H, W] -> [.., C r r, H, W].
Expected<bool> pixel_unshuffle(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto r = int_value(n, "downscale_factor");
  const auto sizes = x ? static_sizes(x->type) : std::nullopt;
  if (!x || n.outputs.size() != 1 || !r || *r <= 0 || !sizes || sizes->size() < 3) return false;
  const size_t lead = sizes->size() - 3;
  const int64_t c = (*sizes)[lead], h = (*sizes)[lead + 1], w = (*sizes)[lead + 2];
  if (h % *r != 0 || w % *r != 0) return false;
  std::vector<int64_t> split(sizes->begin(), sizes->begin() + static_cast<int64_t>(lead));
  for (int64_t s : {c, h / *r, *r, w / *r, *r}) split.push_back(s);
  std::vector<int64_t> perm;
  for (size_t i = 0; i < lead; ++i) perm.push_back(static_cast<int64_t>(i));
  const int64_t l = static_cast<int64_t>(lead);
  for (int64_t p : {l, l + 2, l + 4, l + 1, l + 3}) perm.push_back(p);
  std::vector<int64_t> permuted;
  for (int64_t p : perm) permuted.push_back(split[static_cast<size_t>(p)]);
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* y = b.add(OpKind::kView, {{"self", x}, {"size", split}}, static_type(dt, split));
  y = b.add(OpKind::kPermute, {{"self", y}, {"dims", perm}}, static_type(dt, permuted));
  const auto out = static_sizes(b.out());
  if (!out) return false;
  return b.done(b.add(OpKind::kReshape, {{"self", y}, {"shape", *out}}, b.out()));
}

// channel_shuffle(x, g): [N, C, ...] -> [N, g, C / g, ...] -> transpose(1, 2) -> [N, C, ...].
Expected<bool> channel_shuffle(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto g = int_value(n, "groups");
  const auto sizes = x ? static_sizes(x->type) : std::nullopt;
  if (!x || n.outputs.size() != 1 || !g || *g <= 0 || !sizes || sizes->size() < 2 || (*sizes)[1] % *g != 0) return false;
  std::vector<int64_t> split{(*sizes)[0], *g, (*sizes)[1] / *g};
  split.insert(split.end(), sizes->begin() + 2, sizes->end());
  std::vector<int64_t> swapped = split;
  std::swap(swapped[1], swapped[2]);
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* y = b.add(OpKind::kView, {{"self", x}, {"size", split}}, static_type(dt, split));
  y = b.add(OpKind::kTranspose, {{"self", y}, {"dim0", int64_t{1}}, {"dim1", int64_t{2}}}, static_type(dt, swapped));
  return b.done(b.add(OpKind::kReshape, {{"self", y}, {"shape", *sizes}}, b.out()));
}

// mH, matrix_H (of real tensors): the last two dims swapped; numpy_T: every dim reversed.
Expected<bool> transposed(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1) return false;
  const int64_t rank = static_cast<int64_t>(x->type.sizes.size());
  Nodes b(ctx, n);
  if (n.op == OpKind::kNumpyT) {
    std::vector<int64_t> perm(static_cast<size_t>(rank));
    for (int64_t i = 0; i < rank; ++i) perm[static_cast<size_t>(i)] = rank - 1 - i;
    return b.done(b.add(OpKind::kPermute, {{"self", x}, {"dims", perm}}, b.out()));
  }
  if (rank < 2 || (n.op == OpKind::kMatrixH && rank != 2)) return false;
  return b.done(b.add(OpKind::kTranspose, {{"self", x}, {"dim0", rank - 2}, {"dim1", rank - 1}}, b.out()));
}

// real, resolve_conj, resolve_neg, conj_physical of a real tensor: the tensor.
Expected<bool> real_identity(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || n.outputs[0]->type.dtype != x->type.dtype) return false;
  Nodes b(ctx, n);
  const bool copy = n.op == OpKind::kConjPhysical || n.op == OpKind::kConjPhysicalInternal;
  return b.done(b.add(copy ? OpKind::kClone : OpKind::kAlias, {{"self", x}}, x->type));
}

// unsafe_chunk and unsafe_split are chunk and split (no aliasing checks to skip here).
Expected<bool> unsafe_split(PatternContext&, ir::Node& n) {
  n.op = n.op == OpKind::kUnsafeChunk ? OpKind::kChunk : OpKind::kSplitTensor;
  return true;
}

// diag_embed(x, offset, dim1, dim2): the last dim of x on a diagonal of two
// new dims: x padded to m = n + |offset|, expanded over an [m, m] grid and
// kept where the grid's diagonal is, then the two dims moved to dim1, dim2.
ir::Value* diag_embed_of(Nodes& b, ir::Value* x, int64_t offset, int64_t dim1, int64_t dim2, const ir::TensorType& out) {
  const auto sizes = static_sizes(x->type);
  if (!sizes || sizes->empty()) return nullptr;
  const size_t rank = sizes->size() + 1;
  const int64_t d1 = norm_dim(dim1, rank), d2 = norm_dim(dim2, rank);
  if (d1 < 0 || d2 < 0 || d1 == d2) return nullptr;
  const int64_t len = sizes->back(), m = len + std::abs(offset);
  const DType dt = x->type.dtype;
  std::vector<int64_t> padded = *sizes;
  padded.back() = m;
  ir::Value* p = x;
  if (offset != 0)
    p = b.add(OpKind::kConstantPadNd, {{"self", x}, {"pad", std::vector<int64_t>{0, std::abs(offset)}}, {"value", 0.0}},
              static_type(dt, padded));
  // offset >= 0: out[i, i + offset] = x[i] (x along rows); offset < 0: out[j - offset, j] = x[j] (along columns).
  p = b.unsqueezed(p, {static_cast<int64_t>(offset >= 0 ? rank - 1 : rank - 2)});
  std::vector<int64_t> grid(sizes->begin(), sizes->end() - 1);
  grid.push_back(m);
  grid.push_back(m);
  ir::Value* e = b.add(OpKind::kExpand, {{"self", p}, {"size", grid}}, static_type(dt, grid));
  Tensor off = Tensor::zeros(DType::Bool, {m, m});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < m; ++j) off.data<bool>()[i * m + j] = j - i != offset;
  ir::Value* y = b.add(OpKind::kMaskedFillScalar, {{"self", e}, {"mask", b.constant(off)}, {"value", 0.0}}, e->type);
  std::vector<int64_t> perm(rank);
  int64_t next = 0;
  for (size_t f = 0; f < rank; ++f)
    perm[f] = static_cast<int64_t>(f) == d1 ? static_cast<int64_t>(rank) - 2
              : static_cast<int64_t>(f) == d2 ? static_cast<int64_t>(rank) - 1
                                              : next++;
  bool identity = true;
  for (size_t f = 0; f < rank; ++f) identity = identity && perm[f] == static_cast<int64_t>(f);
  if (identity) return y;
  return b.add(OpKind::kPermute, {{"self", y}, {"dims", perm}}, out);
}

Expected<bool> diag_embed(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto offset = int_value(n, "offset", 0);
  const auto d1 = int_value(n, "dim1", -2), d2 = int_value(n, "dim2", -1);
  if (!x || n.outputs.size() != 1 || !offset || !d1 || !d2) return false;
  Nodes b(ctx, n);
  return b.done(diag_embed_of(b, x, *offset, *d1, *d2, b.out()));
}

// diag(x, k): a vector on the k-th diagonal of a matrix, or a matrix's k-th
// diagonal (a copy); diagflat(x, k): the flattened x on the k-th diagonal.
Expected<bool> diag(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto k = int_value(n, n.op == OpKind::kDiag ? "diagonal" : "offset", 0);
  const auto sizes = x ? static_sizes(x->type) : std::nullopt;
  if (!x || n.outputs.size() != 1 || !k || !sizes) return false;
  Nodes b(ctx, n);
  if (n.op == OpKind::kDiagflat && sizes->size() != 1) {
    int64_t total = 1;
    for (int64_t s : *sizes) total *= s;
    x = b.add(OpKind::kReshape, {{"self", x}, {"shape", std::vector<int64_t>{total}}}, static_type(x->type.dtype, {total}));
  } else if (sizes->size() == 2 && n.op == OpKind::kDiag) {
    ir::Value* d = b.add(OpKind::kDiagonal, {{"self", x}, {"offset", *k}, {"dim1", int64_t{0}}, {"dim2", int64_t{1}}}, b.out());
    return b.done(b.add(OpKind::kClone, {{"self", d}}, b.out()));
  } else if (sizes->size() != 1) {
    return false;
  }
  return b.done(diag_embed_of(b, x, *k, 0, 1, b.out()));
}

// diagonal_copy = a copy of the diagonal view.
Expected<bool> diagonal_copy(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  std::vector<ir::NamedArg> args{{"self", x}};
  for (const char* a : {"offset", "dim1", "dim2"})
    if (const ir::Arg* v = n.find(a)) args.push_back({a, *v});
  return b.done(b.add(OpKind::kClone, {{"self", b.add(OpKind::kDiagonal, std::move(args), b.out())}}, b.out()));
}

// take(x, index) = the flattened x at index (negative from the end), shaped as index.
Expected<bool> take(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* idx = PatternContext::tensor_arg(n, "index");
  const auto sizes = x ? static_sizes(x->type) : std::nullopt;
  const auto isizes = idx ? static_sizes(idx->type) : std::nullopt;
  if (!x || !idx || idx->type.dtype != DType::Int64 || n.outputs.size() != 1 || !sizes || !isizes) return false;
  int64_t total = 1, count = 1;
  for (int64_t s : *sizes) total *= s;
  for (int64_t s : *isizes) count *= s;
  Nodes b(ctx, n);
  ir::Value* flat = b.add(OpKind::kReshape, {{"self", x}, {"shape", std::vector<int64_t>{total}}},
                          static_type(x->type.dtype, {total}));
  ir::Value* i = b.add(OpKind::kReshape, {{"self", idx}, {"shape", std::vector<int64_t>{count}}},
                       static_type(DType::Int64, {count}));
  ir::Value* wrapped = b.add(OpKind::kAddTensor, {{"self", i}, {"other", total}}, i->type);
  i = b.add(OpKind::kWhere, {{"condition", b.compare(OpKind::kLtScalar, i, 0.0)}, {"self", wrapped}, {"other", i}}, i->type);
  ir::Value* g = b.add(OpKind::kIndexSelect, {{"self", flat}, {"dim", int64_t{0}}, {"index", i}},
                       static_type(x->type.dtype, {count}));
  return b.done(b.add(OpKind::kReshape, {{"self", g}, {"shape", *isizes}}, b.out()));
}

// ---- arithmetic

// count_nonzero(x, dims) = sum(x != 0, dims) as int64.
Expected<bool> count_nonzero(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || n.outputs[0]->type.dtype != DType::Int64) return false;
  std::vector<int64_t> dims;
  if (n.op == OpKind::kCountNonzeroDims) {
    const auto d = int_list(n, "dim");
    if (!d) return false;
    dims = *d;
  } else if (!absent(n, "dim")) {
    const auto d = int_value(n, "dim");
    if (!d) return false;
    dims = {*d};
  }
  const auto rd = reduced_dims(dims, x->type.sizes.size());
  if (!rd) return false;
  Nodes b(ctx, n);
  ir::Value* nz = b.compare(OpKind::kNeScalar, x, 0.0);
  return b.done(b.add(OpKind::kSumDimIntList, {{"self", nz}, {"dim", *rd}, {"keepdim", false}}, b.out()));
}

// nansum = sum with NaN as 0; nanmean = nansum / the count of non-NaN entries.
Expected<bool> nan_reduction(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || !is_floating(x->type.dtype) || n.outputs[0]->type.dtype != x->type.dtype ||
      !absent(n, "dtype"))
    return false;
  std::optional<std::vector<int64_t>> given;
  if (!absent(n, "dim")) {
    given = int_list(n, "dim");
    if (!given) return false;
  }
  const auto dims = reduced_dims(given, x->type.sizes.size());
  const auto keepdim = bool_value(n, "keepdim", false);
  if (!dims || !keepdim) return false;
  Nodes b(ctx, n);
  ir::Value* nan = b.add(OpKind::kIsnan, {{"self", x}}, {DType::Bool, x->type.sizes});
  ir::Value* sum = b.add(OpKind::kSumDimIntList, {{"self", b.fill(x, nan, 0.0)}, {"dim", *dims}, {"keepdim", *keepdim}},
                         b.out());
  if (n.op == OpKind::kNansum) return b.done(sum);
  ir::Value* kept = b.add(OpKind::kLogicalNot, {{"self", nan}}, nan->type);
  ir::TensorType count = b.out();
  count.dtype = DType::Int64;
  ir::Value* c = b.add(OpKind::kSumDimIntList, {{"self", kept}, {"dim", *dims}, {"keepdim", *keepdim}}, count);
  return b.done(b.add(OpKind::kDivTensor, {{"self", sum}, {"other", c}}, b.out()));
}

// prelu(x, w) = x > 0 ? x : w x, w per channel (dim 1) or one for all.
Expected<bool> prelu(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* w = PatternContext::tensor_arg(n, "weight");
  if (!floating_pair(n, x, w) || w->type.sizes.size() > 1) return false;
  const auto ws = static_sizes(w->type);
  if (!ws) return false;
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* wv = w;
  const int64_t count = ws->empty() ? 1 : (*ws)[0];
  if (count != 1) {
    if (x->type.sizes.size() < 2) return false;
    std::vector<int64_t> shape{count};
    for (size_t d = 2; d < x->type.sizes.size(); ++d) shape.push_back(1);
    wv = b.add(OpKind::kView, {{"self", w}, {"size", shape}}, static_type(dt, shape));
  }
  ir::Value* scaled = b.binary(OpKind::kMulTensor, x, wv, dt);
  if (!scaled || !same_sizes(scaled->type.sizes, x->type.sizes)) return false;
  return b.done(b.add(OpKind::kWhere, {{"condition", b.compare(OpKind::kGtScalar, x, 0.0)}, {"self", x}, {"other", scaled}},
                      x->type));
}

// isclose(a, b) = a == b, or (equal_nan) both NaN, or |a - b| finite and <= atol + |rtol b|.
Expected<bool> isclose(PatternContext& ctx, ir::Node& n) {
  ir::Value* a = PatternContext::tensor_arg(n, "self");
  ir::Value* o = PatternContext::tensor_arg(n, "other");
  const auto rtol = number_or(ctx, n, "rtol", 1e-5);
  const auto atol = number_or(ctx, n, "atol", 1e-8);
  const auto equal_nan = bool_value(n, "equal_nan", false);
  if (!a || !o || n.outputs.size() != 1 || !is_floating(a->type.dtype) || o->type.dtype != a->type.dtype || !rtol ||
      !atol || !equal_nan)
    return false;
  Nodes b(ctx, n);
  const DType dt = a->type.dtype;
  ir::Value* close = b.binary(OpKind::kEqTensor, a, o, DType::Bool);
  if (!close) return false;
  auto either = [&](OpKind op, ir::Value* p, ir::Value* q) {
    return b.add(op, {{"self", p}, {"other", q}}, close->type);
  };
  if (*equal_nan) {
    ir::Value* na = b.add(OpKind::kIsnan, {{"self", a}}, {DType::Bool, a->type.sizes});
    ir::Value* no = b.add(OpKind::kIsnan, {{"self", o}}, {DType::Bool, o->type.sizes});
    close = either(OpKind::kLogicalOr, close, either(OpKind::kLogicalAnd, na, no));
  }
  if (*rtol == 0 && *atol == 0) return b.done(close);
  ir::Value* allowed = b.binary(OpKind::kAddTensor, b.unary(OpKind::kAbs, b.binary(OpKind::kMulTensor, o, *rtol, dt)), *atol, dt);
  ir::Value* actual = b.unary(OpKind::kAbs, b.binary(OpKind::kSubTensor, a, o, dt));
  ir::Value* within = b.add(OpKind::kLeTensor, {{"self", actual}, {"other", allowed}}, close->type);
  ir::Value* finite = b.compare(OpKind::kLtScalar, actual, std::numeric_limits<double>::infinity());
  return b.done(either(OpKind::kLogicalOr, close, either(OpKind::kLogicalAnd, finite, within)));
}

// isreal of a real tensor: all true.
Expected<bool> isreal(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || n.outputs[0]->type.dtype != DType::Bool) return false;
  Nodes b(ctx, n);
  return b.done(b.add(OpKind::kFullLike, {{"self", x}, {"fill_value", true}, {"dtype", DType::Bool}}, b.out()));
}

// float_power(x, e) = pow in float64.
Expected<bool> float_power(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || n.outputs[0]->type.dtype != DType::Float64) return false;
  Nodes b(ctx, n);
  auto wide = [&](ir::Value* v) {
    if (v->type.dtype == DType::Float64) return v;
    return b.add(OpKind::kToCopy, {{"self", v}, {"dtype", DType::Float64}}, {DType::Float64, v->type.sizes});
  };
  if (n.op == OpKind::kFloatPowerTensorScalar) {
    const auto e = ctx.number(n, "exponent");
    if (!e) return false;
    return b.done(b.add(OpKind::kPowTensorScalar, {{"self", wide(x)}, {"exponent", *e}}, b.out()));
  }
  ir::Value* e = PatternContext::tensor_arg(n, "exponent");
  if (!e) return false;
  return b.done(b.add(OpKind::kPowTensorTensor, {{"self", wide(x)}, {"exponent", wide(e)}}, b.out()));
}

// linalg_vecdot(x, y, dim) = sum(x y, dim) (real tensors).
Expected<bool> vecdot(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "x");
  ir::Value* y = PatternContext::tensor_arg(n, "y");
  const auto dim = int_value(n, "dim", -1);
  if (!floating_pair(n, x, y) || !dim) return false;
  Nodes b(ctx, n);
  ir::Value* p = b.binary(OpKind::kMulTensor, x, y, x->type.dtype);
  const int64_t d = p ? norm_dim(*dim, p->type.sizes.size()) : -1;
  if (d < 0) return false;
  return b.done(b.add(OpKind::kSumDimIntList, {{"self", p}, {"dim", std::vector<int64_t>{d}}, {"keepdim", false}}, b.out()));
}

// beta self + alpha product (beta 0: self ignored, NaN included, as ATen does).
ir::Value* scaled_sum(Nodes& b, ir::Value* self, ir::Value* product, double beta, double alpha) {
  const DType dt = b.out().dtype;
  if (!product) return nullptr;
  if (alpha != 1) product = b.binary(OpKind::kMulTensor, product, alpha, dt);
  if (beta == 0) {
    if (same_sizes(product->type.sizes, b.out().sizes)) return product;
    const auto sizes = static_sizes(b.out());
    return sizes ? b.add(OpKind::kExpand, {{"self", product}, {"size", *sizes}}, b.out()) : nullptr;
  }
  ir::Value* s = beta == 1 ? self : b.binary(OpKind::kMulTensor, self, beta, dt);
  return b.binary(OpKind::kAddTensor, s, product, dt);
}

// addr(self, v1, v2) = beta self + alpha outer(v1, v2); addmv = ... + alpha mv(mat, vec);
// addbmm = ... + alpha sum(bmm(b1, b2), 0).
Expected<bool> add_product(PatternContext& ctx, ir::Node& n) {
  ir::Value* self = PatternContext::tensor_arg(n, "self");
  const auto beta = number_or(ctx, n, "beta", 1.0);
  const auto alpha = number_or(ctx, n, "alpha", 1.0);
  if (!self || n.outputs.size() != 1 || !is_floating(self->type.dtype) || n.outputs[0]->type.dtype != self->type.dtype ||
      !beta || !alpha || !static_sizes(n.outputs[0]->type))
    return false;
  const DType dt = self->type.dtype;
  Nodes b(ctx, n);
  ir::Value* product = nullptr;
  if (n.op == OpKind::kAddr) {
    ir::Value* v1 = PatternContext::tensor_arg(n, "vec1");
    ir::Value* v2 = PatternContext::tensor_arg(n, "vec2");
    if (!floating_pair(n, v1, v2) || v1->type.sizes.size() != 1 || v2->type.sizes.size() != 1) return false;
    product = b.add(OpKind::kOuter, {{"self", v1}, {"vec2", v2}}, {dt, {v1->type.sizes[0], v2->type.sizes[0]}});
  } else if (n.op == OpKind::kAddmv) {
    ir::Value* m = PatternContext::tensor_arg(n, "mat");
    ir::Value* v = PatternContext::tensor_arg(n, "vec");
    if (!floating_pair(n, m, v) || m->type.sizes.size() != 2 || v->type.sizes.size() != 1) return false;
    product = b.add(OpKind::kMv, {{"self", m}, {"vec", v}}, {dt, {m->type.sizes[0]}});
  } else {
    ir::Value* b1 = PatternContext::tensor_arg(n, "batch1");
    ir::Value* b2 = PatternContext::tensor_arg(n, "batch2");
    if (!floating_pair(n, b1, b2) || b1->type.sizes.size() != 3 || b2->type.sizes.size() != 3) return false;
    ir::Value* bmm = b.add(OpKind::kBmm, {{"self", b1}, {"mat2", b2}},
                           {dt, {b1->type.sizes[0], b1->type.sizes[1], b2->type.sizes[2]}});
    product = b.add(OpKind::kSumDimIntList, {{"self", bmm}, {"dim", std::vector<int64_t>{0}}, {"keepdim", false}},
                    {dt, {b1->type.sizes[1], b2->type.sizes[2]}});
  }
  return b.done(scaled_sum(b, self, product, *beta, *alpha));
}

// baddbmm(self, b1, b2) = beta self + alpha bmm(b1, b2), as ATen's
// decomposition writes it (beta 0: self ignored, NaN included); sizes may be
// symbolic.
Expected<bool> baddbmm(PatternContext& ctx, ir::Node& n) {
  ir::Value* self = PatternContext::tensor_arg(n, "self");
  ir::Value* b1 = PatternContext::tensor_arg(n, "batch1");
  ir::Value* b2 = PatternContext::tensor_arg(n, "batch2");
  const auto beta = number_or(ctx, n, "beta", 1.0);
  const auto alpha = number_or(ctx, n, "alpha", 1.0);
  if (!self || !floating_pair(n, b1, b2) || self->type.dtype != b1->type.dtype || !beta || !alpha ||
      b1->type.sizes.size() != 3 || b2->type.sizes.size() != 3)
    return false;
  const ir::TensorType product_type{b1->type.dtype, {b1->type.sizes[0], b1->type.sizes[1], b2->type.sizes[2]}};
  if (!same_sizes(product_type.sizes, n.outputs[0]->type.sizes)) return false;
  Nodes b(ctx, n);
  ir::Value* product = b.add(OpKind::kBmm, {{"self", b1}, {"mat2", b2}}, product_type);
  return b.done(scaled_sum(b, self, product, *beta, *alpha));
}

// cross(a, b, dim) = a[1 2 0] b[2 0 1] - a[2 0 1] b[1 2 0] along a dim of size 3
// (cross.default without dim: the first such dim).
Expected<bool> cross(PatternContext& ctx, ir::Node& n) {
  ir::Value* a = PatternContext::tensor_arg(n, "self");
  ir::Value* o = PatternContext::tensor_arg(n, "other");
  if (!floating_pair(n, a, o)) return false;
  const auto out = static_sizes(n.outputs[0]->type);
  if (!out) return false;
  int64_t d = -1;
  if (n.op == OpKind::kCross && absent(n, "dim")) {
    for (size_t i = 0; i < out->size() && d < 0; ++i)
      if ((*out)[i] == 3) d = static_cast<int64_t>(i);
  } else {
    const auto given = int_value(n, "dim", -1);
    d = given ? norm_dim(*given, out->size()) : -1;
  }
  if (d < 0 || (*out)[static_cast<size_t>(d)] != 3) return false;
  Nodes b(ctx, n);
  const DType dt = a->type.dtype;
  ir::Value* ea = b.add(OpKind::kExpand, {{"self", a}, {"size", *out}}, b.out());
  ir::Value* eo = b.add(OpKind::kExpand, {{"self", o}, {"size", *out}}, b.out());
  ir::Value* i120 = b.constant(index_table({1, 2, 0}));
  ir::Value* i201 = b.constant(index_table({2, 0, 1}));
  auto pick = [&](ir::Value* v, ir::Value* idx) {
    return b.add(OpKind::kIndexSelect, {{"self", v}, {"dim", d}, {"index", idx}}, b.out());
  };
  ir::Value* p = b.binary(OpKind::kMulTensor, pick(ea, i120), pick(eo, i201), dt);
  ir::Value* q = b.binary(OpKind::kMulTensor, pick(ea, i201), pick(eo, i120), dt);
  return b.done(b.binary(OpKind::kSubTensor, p, q, dt));
}

// renorm(x, p, dim, maxnorm): each slice along dim with p-norm above maxnorm
// scaled by maxnorm / (norm + 1e-7).
Expected<bool> renorm(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto p = ctx.number(n, "p");
  const auto dim = int_value(n, "dim");
  const auto maxnorm = ctx.number(n, "maxnorm");
  if (!x || n.outputs.size() != 1 || !is_floating(x->type.dtype) || !p || *p <= 0 || !dim || !maxnorm) return false;
  const int64_t d = norm_dim(*dim, x->type.sizes.size());
  if (d < 0) return false;
  std::vector<int64_t> others;
  for (size_t i = 0; i < x->type.sizes.size(); ++i)
    if (static_cast<int64_t>(i) != d) others.push_back(static_cast<int64_t>(i));
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* nv = others.empty() ? b.unary(OpKind::kAbs, x) : b.p_norm(x, *p, others, true);
  ir::Value* factor = b.binary(OpKind::kMulTensor, b.unary(OpKind::kReciprocal, b.binary(OpKind::kAddTensor, nv, 1e-7, dt)),
                               *maxnorm, dt);
  factor = b.add(OpKind::kWhere, {{"condition", b.compare(OpKind::kGtScalar, nv, *maxnorm)}, {"self", factor},
                                  {"other", b.add(OpKind::kFullLike, {{"self", nv}, {"fill_value", 1.0}}, nv->type)}},
                 nv->type);
  return b.done(b.binary(OpKind::kMulTensor, x, factor, dt));
}

// trapezoid(y, dx, dim) = (sum(y, dim) - (y[0] + y[-1]) / 2) dx.
Expected<bool> trapezoid(PatternContext& ctx, ir::Node& n) {
  ir::Value* y = PatternContext::tensor_arg(n, "y");
  const auto dx = number_or(ctx, n, "dx", 1.0);
  const auto dim = int_value(n, "dim", -1);
  if (!y || n.outputs.size() != 1 || !is_floating(y->type.dtype) || n.outputs[0]->type.dtype != y->type.dtype || !dx || !dim)
    return false;
  const int64_t d = norm_dim(*dim, y->type.sizes.size());
  if (d < 0 || !y->type.sizes[static_cast<size_t>(d)].is_static() || y->type.sizes[static_cast<size_t>(d)].value < 1)
    return false;
  const int64_t len = y->type.sizes[static_cast<size_t>(d)].value;
  Nodes b(ctx, n);
  const DType dt = y->type.dtype;
  const ir::TensorType row = reduced(y->type, {d}, false);
  ir::Value* s = b.add(OpKind::kSumDimIntList, {{"self", y}, {"dim", std::vector<int64_t>{d}}, {"keepdim", false}}, row);
  ir::Value* first = b.add(OpKind::kSelectInt, {{"self", y}, {"dim", d}, {"index", int64_t{0}}}, row);
  ir::Value* last = b.add(OpKind::kSelectInt, {{"self", y}, {"dim", d}, {"index", len - 1}}, row);
  ir::Value* ends = b.binary(OpKind::kMulTensor, b.binary(OpKind::kAddTensor, first, last, dt), 0.5, dt);
  return b.done(b.binary(OpKind::kMulTensor, b.binary(OpKind::kSubTensor, s, ends, dt), *dx, dt));
}

// ---- more shape and arithmetic composites

// subtract.Tensor is sub.Tensor spelled out.
Expected<bool> subtract(PatternContext& ctx, ir::Node& n) {
  if (!PatternContext::tensor_arg(n, "self") || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  return b.done(b.add(OpKind::kSubTensor, n.args, b.out()));
}

// The (start, end) pieces along `dim` of a size-`len` dim that a split op asks for.
std::optional<std::vector<std::pair<int64_t, int64_t>>> split_pieces(const ir::Node& n, int64_t len) {
  std::vector<int64_t> bounds;  // the split points
  auto from_indices = [&](const std::vector<int64_t>& idx) {
    for (int64_t i : idx) bounds.push_back(std::clamp<int64_t>(i < 0 ? i + len : i, 0, len));
  };
  switch (n.op) {
    case OpKind::kTensorSplitSections:
    case OpKind::kHsplitInt:
    case OpKind::kVsplitInt:
    case OpKind::kDsplitInt: {
      const auto k = int_value(n, "sections");
      if (!k || *k <= 0) return std::nullopt;
      if (n.op != OpKind::kTensorSplitSections && len % *k != 0) return std::nullopt;
      int64_t at = 0;
      for (int64_t i = 0; i + 1 < *k; ++i) {
        at += len / *k + (i < len % *k ? 1 : 0);
        bounds.push_back(at);
      }
      break;
    }
    case OpKind::kSplitWithSizesCopy: {
      const auto sizes = int_list(n, "split_sizes");
      if (!sizes) return std::nullopt;
      int64_t at = 0;
      for (size_t i = 0; i + 1 < sizes->size(); ++i) bounds.push_back(at += (*sizes)[i]);
      break;
    }
    default: {
      const auto idx = int_list(n, "indices");
      if (!idx) return std::nullopt;
      from_indices(*idx);
    }
  }
  std::vector<std::pair<int64_t, int64_t>> pieces;
  int64_t start = 0;
  for (int64_t e : bounds) {
    pieces.emplace_back(start, std::max(start, e));
    start = std::max(start, e);
  }
  pieces.emplace_back(start, len);
  return pieces;
}

// tensor_split, hsplit, vsplit, dsplit (views) and split_with_sizes_copy: one
// slice per output along the op's dim.
Expected<bool> split_like(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.empty()) return false;
  const size_t rank = x->type.sizes.size();
  int64_t d = 0;
  switch (n.op) {
    case OpKind::kHsplitInt:
    case OpKind::kHsplitArray: d = rank >= 2 ? 1 : 0; break;
    case OpKind::kVsplitInt:
    case OpKind::kVsplitArray:
      if (rank < 2) return false;
      break;
    case OpKind::kDsplitInt:
    case OpKind::kDsplitArray:
      if (rank < 3) return false;
      d = 2;
      break;
    default: {
      const auto given = int_value(n, "dim", 0);
      d = given ? norm_dim(*given, rank) : -1;
    }
  }
  if (d < 0 || static_cast<size_t>(d) >= rank || !x->type.sizes[static_cast<size_t>(d)].is_static()) return false;
  const auto pieces = split_pieces(n, x->type.sizes[static_cast<size_t>(d)].value);
  if (!pieces || pieces->size() != n.outputs.size()) return false;
  Nodes b(ctx, n);
  std::vector<ir::Value*> outs;
  for (size_t i = 0; i < pieces->size(); ++i) {
    const auto [start, end] = (*pieces)[i];
    ir::Value* v = b.add(OpKind::kSliceTensor, {{"self", x}, {"dim", d}, {"start", start}, {"end", end}}, n.outputs[i]->type);
    if (n.op == OpKind::kSplitWithSizesCopy) v = b.add(OpKind::kClone, {{"self", v}}, v->type);
    outs.push_back(v);
  }
  for (size_t i = 0; i < outs.size(); ++i) ctx.replace_uses(n.outputs[i], outs[i]);
  return true;
}

// unfold_copy / as_strided_copy: a copy of the view.
Expected<bool> view_copy(PatternContext& ctx, ir::Node& n) {
  if (!PatternContext::tensor_arg(n, "self") || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  ir::Value* v = b.add(n.op == OpKind::kUnfoldCopy ? OpKind::kUnfold : OpKind::kAsStrided, n.args, b.out());
  return b.done(b.add(OpKind::kClone, {{"self", v}}, b.out()));
}

// fftshift(x, dim) and ifftshift(x, dim) over static sizes: a roll by n // 2
// (fftshift) or -(n // 2) (ifftshift) along each dim, every dim when None.
Expected<bool> fftshift(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto sizes = x ? static_sizes(x->type) : std::nullopt;
  if (!sizes || n.outputs.size() != 1) return false;
  std::vector<int64_t> dims;
  if (absent(n, "dim")) {
    for (size_t d = 0; d < sizes->size(); ++d) dims.push_back(static_cast<int64_t>(d));
  } else if (const auto list = int_list(n, "dim")) {
    dims = *list;
  } else if (const auto one = int_value(n, "dim")) {
    dims = {*one};
  } else {
    return false;
  }
  std::vector<int64_t> shifts;
  for (int64_t& d : dims) {
    d = norm_dim(d, sizes->size());
    if (d < 0) return false;
    const int64_t half = (*sizes)[static_cast<size_t>(d)] / 2;
    shifts.push_back(n.op == OpKind::kFftFftshift ? half : -half);
  }
  Nodes b(ctx, n);
  return b.done(b.add(OpKind::kRoll, {{"self", x}, {"shifts", shifts}, {"dims", dims}}, b.out()));
}

// unfold(x, dimension, size, step) along a dim of static size: an
// index_select of every window's positions (window f holds f * step + j),
// viewed [.., windows, size, ..] and the window's dim moved last, as the view
// orders it (a gather every backend runs; after functionalization nothing
// writes through the view).
Expected<bool> unfold(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto dim = int_value(n, "dimension");
  const auto size = int_value(n, "size");
  const auto step = int_value(n, "step");
  if (!x || n.outputs.size() != 1 || !dim || !size || !step || *size < 0 || *step < 1) return false;
  const size_t rank = x->type.sizes.size();
  if (rank == 0) return false;
  const int64_t d = norm_dim(*dim, rank);
  if (d < 0 || !x->type.sizes[static_cast<size_t>(d)].is_static()) return false;
  const int64_t len = x->type.sizes[static_cast<size_t>(d)].value;
  if (*size > len) return false;
  const int64_t windows = (len - *size) / *step + 1;
  std::vector<int64_t> positions;
  for (int64_t f = 0; f < windows; ++f)
    for (int64_t j = 0; j < *size; ++j) positions.push_back(f * *step + j);
  Nodes b(ctx, n);
  ir::TensorType picked = x->type;
  picked.sizes[static_cast<size_t>(d)] = ir::Dim::of(windows * *size);
  ir::Value* v =
      b.add(OpKind::kIndexSelect, {{"self", x}, {"dim", d}, {"index", b.constant(index_table(positions))}}, picked);
  ir::TensorType split = x->type;  // [.., windows, size, ..]
  split.sizes[static_cast<size_t>(d)] = ir::Dim::of(windows);
  split.sizes.insert(split.sizes.begin() + d + 1, ir::Dim::of(*size));
  const auto sizes = static_sizes(split);
  if (!sizes) return false;
  v = b.add(OpKind::kView, {{"self", v}, {"size", *sizes}}, split);
  if (static_cast<size_t>(d) + 1 == rank) return b.done(v);
  std::vector<int64_t> perm;
  for (int64_t i = 0; i <= static_cast<int64_t>(rank); ++i)
    if (i != d + 1) perm.push_back(i);
  perm.push_back(d + 1);
  return b.done(b.add(OpKind::kPermute, {{"self", v}, {"dims", perm}}, b.out()));
}

// slice_scatter with bounds known at compile time (functionalize writes
// `x[:, a:b] = y` as one) is index_copy at the slice's positions, a constant
// index; engines write index_copy in place.
Expected<bool> slice_scatter(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* src = PatternContext::tensor_arg(n, "src");
  if (!x || !src || n.outputs.size() != 1 || src->type.dtype != x->type.dtype || x->type.sizes.empty()) return false;
  const auto dim = int_value(n, "dim", 0);
  const int64_t d = dim ? norm_dim(*dim, x->type.sizes.size()) : -1;
  if (d < 0 || !x->type.sizes[static_cast<size_t>(d)].is_static()) return false;
  const int64_t len = x->type.sizes[static_cast<size_t>(d)].value;
  const auto step = int_value(n, "step", 1);
  std::optional<int64_t> start = int64_t{0}, end = len;
  if (!absent(n, "start")) start = int_value(n, "start");
  if (!absent(n, "end")) end = int_value(n, "end");
  if (!start || !end || !step || *step <= 0) return false;
  auto clamp = [len](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + len : v, 0, len); };
  const int64_t s0 = clamp(*start), e0 = std::max(s0, clamp(*end));
  std::vector<int64_t> idx;
  for (int64_t i = s0; i < e0; i += *step) idx.push_back(i);
  if (src->type.sizes.size() != x->type.sizes.size() || !src->type.sizes[static_cast<size_t>(d)].is_static() ||
      src->type.sizes[static_cast<size_t>(d)].value != static_cast<int64_t>(idx.size()))
    return false;
  Nodes b(ctx, n);
  if (idx.empty()) return b.done(b.add(OpKind::kClone, {{"self", x}}, x->type));
  return b.done(b.add(OpKind::kIndexCopy, {{"self", x}, {"dim", d}, {"index", b.constant(index_table(idx))}, {"source", src}},
                      b.out()));
}

// _safe_softmax = softmax, 0 on rows that are -inf throughout.
Expected<bool> safe_softmax(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  const auto dim = int_value(n, "dim");
  if (!x || !dim || !absent(n, "dtype")) return false;
  const int64_t d = norm_dim(*dim, x->type.sizes.size());
  if (d < 0) return false;
  Nodes b(ctx, n);
  ir::Value* sm = b.add(OpKind::kSoftmax, {{"self", x}, {"dim", d}}, x->type);
  ir::Value* ninf = b.compare(OpKind::kEqScalar, x, -std::numeric_limits<double>::infinity());
  ir::TensorType rows = reduced(ninf->type, {d}, true);
  ir::Value* all = b.add(OpKind::kAllDim, {{"self", ninf}, {"dim", d}, {"keepdim", true}}, rows);
  return b.done(b.fill(sm, all, 0.0));
}

// sgn of a real tensor is sign; angle of a real one pi where negative, 0 elsewhere, NaN kept.
Expected<bool> sign_like(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = n.op == OpKind::kSgn ? PatternContext::tensor_arg(n, "self") : floating_operand(n);
  if (!x || n.outputs.size() != 1 || n.outputs[0]->type.dtype != x->type.dtype) return false;
  Nodes b(ctx, n);
  if (n.op == OpKind::kSgn) return b.done(b.unary(OpKind::kSign, x));
  ir::Value* zero = b.add(OpKind::kFullLike, {{"self", x}, {"fill_value", 0.0}}, x->type);
  ir::Value* r = b.fill(zero, b.compare(OpKind::kLtScalar, x, 0.0), 3.14159265358979323846);
  ir::Value* nan = b.add(OpKind::kIsnan, {{"self", x}}, {DType::Bool, x->type.sizes});
  return b.done(b.fill(r, nan, std::numeric_limits<double>::quiet_NaN()));
}

// sum_to_size(x, size): x summed over its leading dims and the dims `size` has as 1.
Expected<bool> sum_to_size(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto size = int_list(n, "size");
  const auto xs = x ? static_sizes(x->type) : std::nullopt;
  if (!x || n.outputs.size() != 1 || !size || !xs || size->size() > xs->size()) return false;
  const size_t lead = xs->size() - size->size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < xs->size(); ++i)
    if (i < lead || ((*size)[i - lead] == 1 && (*xs)[i] != 1)) dims.push_back(static_cast<int64_t>(i));
  Nodes b(ctx, n);
  if (dims.empty()) return b.done(b.add(OpKind::kAlias, {{"self", x}}, x->type));
  ir::Value* s = b.add(OpKind::kSumDimIntList, {{"self", x}, {"dim", dims}, {"keepdim", true}}, reduced(x->type, dims, true));
  return b.done(b.add(OpKind::kView, {{"self", s}, {"size", *size}}, b.out()));
}

// take_along_dim(x, idx, dim): gather of x and idx broadcast but for dim; no dim: of the flattened x.
Expected<bool> take_along_dim(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* idx = PatternContext::tensor_arg(n, "indices");
  const auto xs = x ? static_sizes(x->type) : std::nullopt;
  const auto is = idx ? static_sizes(idx->type) : std::nullopt;
  if (!x || !idx || idx->type.dtype != DType::Int64 || n.outputs.size() != 1 || !xs || !is) return false;
  Nodes b(ctx, n);
  if (absent(n, "dim")) {
    int64_t total = 1, count = 1;
    for (int64_t v : *xs) total *= v;
    for (int64_t v : *is) count *= v;
    ir::Value* fx = b.add(OpKind::kReshape, {{"self", x}, {"shape", std::vector<int64_t>{total}}}, static_type(x->type.dtype, {total}));
    ir::Value* fi = b.add(OpKind::kReshape, {{"self", idx}, {"shape", std::vector<int64_t>{count}}}, static_type(DType::Int64, {count}));
    return b.done(b.add(OpKind::kGather, {{"self", fx}, {"dim", int64_t{0}}, {"index", fi}}, b.out()));
  }
  const auto dim = int_value(n, "dim");
  if (!dim || xs->size() != is->size()) return false;
  const int64_t d = norm_dim(*dim, xs->size());
  if (d < 0) return false;
  std::vector<int64_t> xt = *xs, it = *is;
  for (size_t i = 0; i < xs->size(); ++i) {
    if (static_cast<int64_t>(i) == d) continue;
    const int64_t a = (*xs)[i], c = (*is)[i];
    if (a != c && a != 1 && c != 1) return false;
    xt[i] = it[i] = std::max(a, c);
  }
  ir::Value* ex = xt == *xs ? x : b.add(OpKind::kExpand, {{"self", x}, {"size", xt}}, static_type(x->type.dtype, xt));
  ir::Value* ei = it == *is ? idx : b.add(OpKind::kExpand, {{"self", idx}, {"size", it}}, static_type(DType::Int64, it));
  return b.done(b.add(OpKind::kGather, {{"self", ex}, {"dim", d}, {"index", ei}}, b.out()));
}

// trapezoid(y, x, dim) = sum((x[1:] - x[:-1]) (y[1:] + y[:-1]), dim) / 2, a 1-d x along dim.
Expected<bool> trapezoid_x(PatternContext& ctx, ir::Node& n) {
  ir::Value* y = floating_operand(n, "y");
  ir::Value* x = PatternContext::tensor_arg(n, "x");
  const auto dim = int_value(n, "dim", -1);
  const auto ys = y ? static_sizes(y->type) : std::nullopt;
  const auto xs = x ? static_sizes(x->type) : std::nullopt;
  if (!y || !x || x->type.dtype != y->type.dtype || !dim || !ys || !xs) return false;
  const int64_t d = norm_dim(*dim, ys->size());
  if (d < 0 || (*ys)[static_cast<size_t>(d)] < 2) return false;
  const int64_t len = (*ys)[static_cast<size_t>(d)];
  Nodes b(ctx, n);
  const DType dt = y->type.dtype;
  ir::Value* xv = x;
  int64_t xd = d;
  if (xs->size() == 1) {
    if ((*xs)[0] != len) return false;
    std::vector<int64_t> shape(ys->size(), 1);
    shape[static_cast<size_t>(d)] = len;
    xv = b.add(OpKind::kView, {{"self", x}, {"size", shape}}, static_type(dt, shape));
  } else if (xs->size() != ys->size() || (*xs)[static_cast<size_t>(d)] != len) {
    return false;
  }
  auto part = [&](ir::Value* v, int64_t axis, int64_t start, int64_t end) {
    const auto vs = *static_sizes(v->type);
    std::vector<int64_t> ps = vs;
    ps[static_cast<size_t>(axis)] = end - start;
    return b.add(OpKind::kSliceTensor, {{"self", v}, {"dim", axis}, {"start", start}, {"end", end}}, static_type(dt, ps));
  };
  ir::Value* dx = b.binary(OpKind::kSubTensor, part(xv, xd, 1, len), part(xv, xd, 0, len - 1), dt);
  ir::Value* sy = b.binary(OpKind::kAddTensor, part(y, d, 1, len), part(y, d, 0, len - 1), dt);
  ir::Value* p = dx && sy ? b.binary(OpKind::kMulTensor, dx, sy, dt) : nullptr;
  if (!p) return false;
  ir::Value* s = b.add(OpKind::kSumDimIntList, {{"self", p}, {"dim", std::vector<int64_t>{d}}, {"keepdim", false}},
                       reduced(p->type, {d}, false));
  if (!same_sizes(s->type.sizes, b.out().sizes)) return false;
  return b.done(b.binary(OpKind::kDivTensor, s, 2.0, dt));
}

// cartesian_prod(tensors): every combination as rows (meshgrid "ij", flattened, stacked).
Expected<bool> cartesian_prod(PatternContext& ctx, ir::Node& n) {
  const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("tensors"));
  if (!ins || ins->empty() || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  if (ins->size() == 1) return b.done(b.add(OpKind::kClone, {{"self", (*ins)[0]}}, b.out()));
  std::vector<int64_t> grid;
  for (ir::Value* v : *ins) {
    const auto vs = static_sizes(v->type);
    if (!vs || vs->size() != 1 || v->type.dtype != (*ins)[0]->type.dtype) return false;
    grid.push_back((*vs)[0]);
  }
  int64_t total = 1;
  for (int64_t g : grid) total *= g;
  std::vector<ir::Value*> cols;
  for (size_t i = 0; i < ins->size(); ++i) {
    std::vector<int64_t> shape(grid.size(), 1);
    shape[i] = grid[i];
    const DType dt = (*ins)[i]->type.dtype;
    ir::Value* v = b.add(OpKind::kView, {{"self", (*ins)[i]}, {"size", shape}}, static_type(dt, shape));
    v = b.add(OpKind::kExpand, {{"self", v}, {"size", grid}}, static_type(dt, grid));
    cols.push_back(b.add(OpKind::kReshape, {{"self", v}, {"shape", std::vector<int64_t>{total}}}, static_type(dt, {total})));
  }
  return b.done(b.add(OpKind::kStack, {{"tensors", cols}, {"dim", int64_t{1}}}, b.out()));
}

// combinations(x [n], r, with_replacement) as torch.combinations gives them
// (itertools' order: lexicographic in the positions): one index_select of a
// table of the C * r positions, viewed [C, r].
Expected<bool> combinations(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto r = int_value(n, "r", 2);
  const auto with_replacement = bool_value(n, "with_replacement", false);
  if (!x || n.outputs.size() != 1 || !r || !with_replacement) return false;
  // torch.export leaves the count an unbacked size (u0); it is known here.
  const auto xs = static_sizes(x->type);
  const auto& os = n.outputs[0]->type.sizes;
  if (!xs || xs->size() != 1 || os.size() != 2 || !os[1].is_static() || os[1].value != *r || *r < 1) return false;
  const int64_t len = (*xs)[0];
  const bool again = *with_replacement;  // a position may repeat
  std::vector<int64_t> table, pos(static_cast<size_t>(*r), 0);
  if (!again)
    for (int64_t k = 0; k < *r; ++k) pos[static_cast<size_t>(k)] = k;
  constexpr int64_t kMostEntries = int64_t{1} << 20;
  while (len > 0 && pos.back() < len && static_cast<int64_t>(table.size()) < kMostEntries) {
    table.insert(table.end(), pos.begin(), pos.end());
    int64_t k = *r - 1;  // the last position that can still move on
    while (k >= 0 && pos[static_cast<size_t>(k)] >= len - (again ? 1 : *r - k)) --k;
    if (k < 0) break;
    ++pos[static_cast<size_t>(k)];
    for (int64_t j = k + 1; j < *r; ++j)
      pos[static_cast<size_t>(j)] = pos[static_cast<size_t>(j - 1)] + (again ? 0 : 1);
  }
  const int64_t count = static_cast<int64_t>(table.size()) / *r;
  if (count == 0 || static_cast<int64_t>(table.size()) >= kMostEntries || (os[0].is_static() && os[0].value != count))
    return false;
  Nodes b(ctx, n);
  ir::Value* picked =
      b.add(OpKind::kIndexSelect, {{"self", x}, {"dim", int64_t{0}}, {"index", b.constant(index_table(table))}},
            static_type(x->type.dtype, {count * *r}));
  return b.done(b.add(OpKind::kView, {{"self", picked}, {"size", std::vector<int64_t>{count, *r}}},
                      static_type(x->type.dtype, {count, *r})));
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
      return b.add(OpKind::kSumDimIntList, {{"self", b.binary(OpKind::kMulTensor, v, v, dt)}, {"dim", std::vector<int64_t>{last}}, {"keepdim", true}},
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

// rrelu outside training is leaky_relu with the mean slope (lower + upper) / 2.
Expected<bool> rrelu(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  const auto lower = number_or(ctx, n, "lower", 1.0 / 8);
  const auto upper = number_or(ctx, n, "upper", 1.0 / 3);
  const auto training = bool_value(n, "training", false);
  if (!x || !lower || !upper || !training || *training) return false;
  Nodes b(ctx, n);
  return b.done(b.unary(OpKind::kLeakyRelu, x, {{"negative_slope", (*lower + *upper) / 2}}));
}

// flip(x, dims) along dims of static size: an index_select of the reversed
// positions per dim (a gather every backend runs; the CUDA engines have no
// flip layer of their own).
Expected<bool> flip(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto dims = int_list(n, "dims");
  if (!x || n.outputs.size() != 1 || !dims) return false;
  const auto sizes = static_sizes(x->type);
  if (!sizes) return false;
  const size_t rank = sizes->size();
  std::vector<bool> flipped(rank, false);
  for (int64_t d : *dims) {
    const int64_t nd = norm_dim(d, std::max<size_t>(rank, 1));
    if (nd < 0 || nd >= static_cast<int64_t>(std::max<size_t>(rank, 1)) || (rank > 0 && flipped[nd])) return false;
    if (rank > 0) flipped[static_cast<size_t>(nd)] = true;
  }
  Nodes b(ctx, n);
  ir::Value* y = x;
  for (size_t d = 0; d < rank; ++d) {
    if (!flipped[d] || (*sizes)[d] <= 1) continue;
    std::vector<int64_t> reversed((*sizes)[d]);
    for (int64_t i = 0; i < (*sizes)[d]; ++i) reversed[static_cast<size_t>(i)] = (*sizes)[d] - 1 - i;
    y = b.add(OpKind::kIndexSelect,
              {{"self", y}, {"dim", static_cast<int64_t>(d)}, {"index", b.constant(index_table(reversed))}}, b.out());
  }
  if (y == x) y = b.add(OpKind::kClone, {{"self", x}}, b.out());  // nothing moves: a copy, as flip makes
  return b.done(y);
}

// argwhere is nonzero.
Expected<bool> argwhere(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  return b.done(b.add(OpKind::kNonzero, {{"self", x}}, b.out()));
}

// ---- einsum

// einsum(equation, tensors) for floating operands of one dtype and static
// sizes, no label repeated within an operand, equal sizes for a label
// everywhere (no broadcasting of 1s): labels no later operand or the output
// needs are summed away, then operands are contracted left to right as one
// bmm each (batch labels, left labels, contracted labels / right labels),
// and the result permuted to the output's order.
struct Labeled {
  ir::Value* v = nullptr;
  std::vector<int> labels;
};

std::optional<std::vector<int>> einsum_labels(const std::string& term, size_t rank, size_t ell_rank) {
  std::vector<int> out;
  size_t named = 0;
  bool ellipsis = false;
  for (size_t i = 0; i < term.size(); ++i) {
    const char c = term[i];
    if (c == '.') {
      if (ellipsis || term.compare(i, 3, "...") != 0) return std::nullopt;
      ellipsis = true;
      i += 2;
      out.push_back(-1);  // placeholder
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      out.push_back(std::isupper(static_cast<unsigned char>(c)) ? c - 'A' : 26 + (c - 'a'));
      ++named;
    } else {
      return std::nullopt;
    }
  }
  if (!ellipsis) {
    if (rank != SIZE_MAX && named != rank) return std::nullopt;
    return out;
  }
  const size_t here = rank == SIZE_MAX ? ell_rank : rank - named;
  if (rank != SIZE_MAX && rank < named) return std::nullopt;
  std::vector<int> full;
  for (int l : out) {
    if (l != -1) {
      full.push_back(l);
      continue;
    }
    for (size_t j = 0; j < here; ++j) full.push_back(100 + static_cast<int>(ell_rank - here + j));
  }
  return full;
}

Expected<bool> einsum(PatternContext& ctx, ir::Node& n) {
  const auto* eq = std::get_if<std::string>(n.find("equation"));
  const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("tensors"));
  if (!eq || !ins || ins->empty() || n.outputs.size() != 1) return false;
  const DType dt = n.outputs[0]->type.dtype;
  if (!is_floating(dt)) return false;
  std::string e;
  for (char c : *eq)
    if (c != ' ') e += c;
  const size_t arrow = e.find("->");
  const std::string lhs = e.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != ins->size()) return false;
  // The ellipsis covers the most dims any operand gives it.
  size_t ell_rank = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    size_t named = 0;
    for (char c : terms[i]) named += std::isalpha(static_cast<unsigned char>(c)) ? 1 : 0;
    const size_t rank = (*ins)[i]->type.sizes.size();
    if (terms[i].find("...") != std::string::npos && rank >= named) ell_rank = std::max(ell_rank, rank - named);
  }
  std::map<int, int64_t> size_of;
  std::vector<Labeled> ops;
  std::map<int, int> count;
  for (size_t i = 0; i < terms.size(); ++i) {
    ir::Value* v = (*ins)[i];
    const auto vs = static_sizes(v->type);
    if (v->type.dtype != dt || !vs) return false;
    const auto labels = einsum_labels(terms[i], vs->size(), ell_rank);
    if (!labels || labels->size() != vs->size()) return false;
    for (size_t k = 0; k < labels->size(); ++k) {
      if (std::count(labels->begin(), labels->end(), (*labels)[k]) > 1) return false;  // a diagonal
      const auto [it, fresh] = size_of.emplace((*labels)[k], (*vs)[k]);
      if (!fresh && it->second != (*vs)[k]) return false;  // broadcasting: not taken here
      ++count[(*labels)[k]];
    }
    ops.push_back({v, *labels});
  }
  std::vector<int> out_labels;
  if (arrow == std::string::npos) {
    for (const auto& [l, c] : count)
      if (l >= 100) out_labels.push_back(l);
    for (const auto& [l, c] : count)
      if (l < 100 && c == 1) out_labels.push_back(l);
  } else {
    const auto o = einsum_labels(e.substr(arrow + 2), SIZE_MAX, ell_rank);
    if (!o) return false;
    out_labels = *o;
    for (int l : out_labels)
      if (!size_of.count(l) || std::count(out_labels.begin(), out_labels.end(), l) > 1) return false;
  }
  Nodes b(ctx, n);
  auto type_of_labels = [&](const std::vector<int>& ls) {
    std::vector<int64_t> s;
    for (int l : ls) s.push_back(size_of[l]);
    return static_type(dt, s);
  };
  auto has = [](const std::vector<int>& ls, int l) { return std::find(ls.begin(), ls.end(), l) != ls.end(); };
  // Sums away the labels of `t` not in `keep`.
  auto sum_out = [&](Labeled t, const std::vector<int>& keep) {
    std::vector<int64_t> dims;
    std::vector<int> left;
    for (size_t k = 0; k < t.labels.size(); ++k) {
      if (has(keep, t.labels[k]))
        left.push_back(t.labels[k]);
      else
        dims.push_back(static_cast<int64_t>(k));
    }
    if (dims.empty()) return t;
    t.v = b.add(OpKind::kSumDimIntList, {{"self", t.v}, {"dim", dims}, {"keepdim", false}}, type_of_labels(left));
    t.labels = left;
    return t;
  };
  auto permuted = [&](const Labeled& t, const std::vector<int>& order) {
    std::vector<int64_t> perm;
    bool identity = true;
    for (size_t k = 0; k < order.size(); ++k) {
      const auto at = std::find(t.labels.begin(), t.labels.end(), order[k]) - t.labels.begin();
      perm.push_back(at);
      identity = identity && at == static_cast<int64_t>(k);
    }
    if (identity) return t.v;
    return b.add(OpKind::kPermute, {{"self", t.v}, {"dims", perm}}, type_of_labels(order));
  };
  auto product = [&](const std::vector<int>& ls) {
    int64_t p = 1;
    for (int l : ls) p *= size_of[l];
    return p;
  };
  Labeled cur = ops[0];
  for (size_t i = 1; i <= ops.size(); ++i) {
    std::vector<int> needed = out_labels;  // by the output and the operands after i
    for (size_t j = i + 1; j < ops.size(); ++j) needed.insert(needed.end(), ops[j].labels.begin(), ops[j].labels.end());
    if (i == ops.size()) {
      cur = sum_out(cur, needed);
      break;
    }
    Labeled next = ops[i];
    std::vector<int> keep_cur = needed, keep_next = needed;
    keep_cur.insert(keep_cur.end(), next.labels.begin(), next.labels.end());
    keep_next.insert(keep_next.end(), cur.labels.begin(), cur.labels.end());
    cur = sum_out(cur, keep_cur);
    next = sum_out(next, keep_next);
    std::vector<int> batch, left, contract, right;
    for (int l : cur.labels) {
      if (!has(next.labels, l))
        left.push_back(l);
      else if (has(needed, l))
        batch.push_back(l);
      else
        contract.push_back(l);
    }
    for (int l : next.labels)
      if (!has(cur.labels, l)) right.push_back(l);
    std::vector<int> a_order = batch, b_order = batch;
    a_order.insert(a_order.end(), left.begin(), left.end());
    a_order.insert(a_order.end(), contract.begin(), contract.end());
    b_order.insert(b_order.end(), contract.begin(), contract.end());
    b_order.insert(b_order.end(), right.begin(), right.end());
    const int64_t B = product(batch), L = product(left), C = product(contract), R = product(right);
    ir::Value* a3 = b.add(OpKind::kReshape, {{"self", permuted(cur, a_order)}, {"shape", std::vector<int64_t>{B, L, C}}},
                          static_type(dt, {B, L, C}));
    ir::Value* b3 = b.add(OpKind::kReshape, {{"self", permuted(next, b_order)}, {"shape", std::vector<int64_t>{B, C, R}}},
                          static_type(dt, {B, C, R}));
    ir::Value* mm = b.add(OpKind::kBmm, {{"self", a3}, {"mat2", b3}}, static_type(dt, {B, L, R}));
    std::vector<int> labels = batch;
    labels.insert(labels.end(), left.begin(), left.end());
    labels.insert(labels.end(), right.begin(), right.end());
    const ir::TensorType t = type_of_labels(labels);
    cur = {b.add(OpKind::kReshape, {{"self", mm}, {"shape", *static_sizes(t)}}, t), labels};
  }
  if (cur.labels.size() != out_labels.size()) return false;
  ir::Value* result = permuted(cur, out_labels);
  if (result == cur.v && ops.size() == 1 && cur.v == ops[0].v) result = b.add(OpKind::kClone, {{"self", cur.v}}, cur.v->type);
  if (!same_sizes(result->type.sizes, b.out().sizes)) return false;
  return b.done(result);
}

constexpr Decomposition kNnDecompositions[] = {
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
    {OpKind::kUpsampleNearest1d, &upsample},
    {OpKind::kUpsampleNearest2d, &upsample},
    {OpKind::kUpsampleNearest3d, &upsample},
    {OpKind::kUpsampleNearestExact1d, &upsample},
    {OpKind::kUpsampleNearestExact2d, &upsample},
    {OpKind::kUpsampleNearestExact3d, &upsample},
    {OpKind::kUpsampleLinear1d, &upsample},
    {OpKind::kUpsampleBilinear2d, &upsample},
    {OpKind::kUpsampleBilinear2dAa, &upsample},
    {OpKind::kUpsampleBilinear2dAaDefault, &upsample},
    {OpKind::kUpsampleTrilinear3d, &upsample},
    {OpKind::kUpsampleBicubic2d, &upsample},
    {OpKind::kAdaptiveAvgPool1d, &pool1d},
    {OpKind::kAvgPool1d, &pool1d},
    {OpKind::kMaxPool1d, &pool1d},
    {OpKind::kMaxPool1dWithIndices, &pool1d},
    {OpKind::kAdaptiveMaxPool1d, &pool1d},
    {OpKind::kMaxPool2dWithIndices, &pool_values_only},
    {OpKind::kInstanceNorm, &instance_norm},
    {OpKind::kRoll, &roll},
    {OpKind::kRot90, &rot90},
    {OpKind::kNewFull, &new_full},
    {OpKind::kAtleast1d, &atleast},
    {OpKind::kAtleast2d, &atleast},
    {OpKind::kAtleast3d, &atleast},
    {OpKind::kHstack, &stack_like},
    {OpKind::kVstack, &stack_like},
    {OpKind::kDstack, &stack_like},
    {OpKind::kColumnStack, &stack_like},
    {OpKind::kStack, &stack},
    {OpKind::kRepeat, &repeat},
    {OpKind::kDiff, &diff},
    {OpKind::kSoftmax, &softmax_other_dim},
    {OpKind::kSoftmaxInternal, &softmax_other_dim},
    {OpKind::kLogSoftmax, &softmax_other_dim},
    {OpKind::kLogSoftmaxInternal, &softmax_other_dim},
    {OpKind::kMeshgridIndexing, &meshgrid},
    {OpKind::kMeshgrid, &meshgrid},
    {OpKind::kRepeatInterleaveSelfInt, &repeat_interleave},
    {OpKind::kPixelUnshuffle, &pixel_unshuffle},
    {OpKind::kChannelShuffle, &channel_shuffle},
    {OpKind::kMH, &transposed},
    {OpKind::kMatrixH, &transposed},
    {OpKind::kNumpyT, &transposed},
    {OpKind::kReal, &real_identity},
    {OpKind::kResolveConj, &real_identity},
    {OpKind::kResolveNeg, &real_identity},
    {OpKind::kConjPhysical, &real_identity},
    {OpKind::kConjPhysicalInternal, &real_identity},
    {OpKind::kCountNonzero, &count_nonzero},
    {OpKind::kCountNonzeroDims, &count_nonzero},
    {OpKind::kNansum, &nan_reduction},
    {OpKind::kNanmean, &nan_reduction},
    {OpKind::kPrelu, &prelu},
    {OpKind::kIsclose, &isclose},
    {OpKind::kIsreal, &isreal},
    {OpKind::kFloatPowerTensorTensor, &float_power},
    {OpKind::kFloatPowerTensorScalar, &float_power},
    {OpKind::kLinalgVecdot, &vecdot},
    {OpKind::kAddr, &add_product},
    {OpKind::kAddmv, &add_product},
    {OpKind::kAddbmm, &add_product},
    {OpKind::kBaddbmm, &baddbmm},
    {OpKind::kCross, &cross},
    {OpKind::kLinalgCross, &cross},
    {OpKind::kRenorm, &renorm},
    {OpKind::kDiagonalCopy, &diagonal_copy},
    {OpKind::kDiagEmbed, &diag_embed},
    {OpKind::kDiag, &diag},
    {OpKind::kDiagflat, &diag},
    {OpKind::kUnsafeChunk, &unsafe_split},
    {OpKind::kUnsafeSplitTensor, &unsafe_split},
    {OpKind::kTake, &take},
    {OpKind::kTrapezoidDx, &trapezoid},
    {OpKind::kTrapzDx, &trapezoid},
    {OpKind::kTrapezoidX, &trapezoid_x},
    {OpKind::kTrapzX, &trapezoid_x},
    {OpKind::kSubtractTensor, &subtract},
    {OpKind::kTensorSplitSections, &split_like},
    {OpKind::kTensorSplitIndices, &split_like},
    {OpKind::kHsplitInt, &split_like},
    {OpKind::kHsplitArray, &split_like},
    {OpKind::kVsplitInt, &split_like},
    {OpKind::kVsplitArray, &split_like},
    {OpKind::kDsplitInt, &split_like},
    {OpKind::kDsplitArray, &split_like},
    {OpKind::kSplitWithSizesCopy, &split_like},
    {OpKind::kUnfoldCopy, &view_copy},
    {OpKind::kUnfold, &unfold},
    {OpKind::kFftFftshift, &fftshift},
    {OpKind::kFftIfftshift, &fftshift},
    {OpKind::kAsStridedCopy, &view_copy},
    {OpKind::kSafeSoftmax, &safe_softmax},
    {OpKind::kSliceScatter, &slice_scatter},
    {OpKind::kSgn, &sign_like},
    {OpKind::kAngle, &sign_like},
    {OpKind::kSumToSize, &sum_to_size},
    {OpKind::kTakeAlongDim, &take_along_dim},
    {OpKind::kCartesianProd, &cartesian_prod},
    {OpKind::kCdist, &cdist},
    {OpKind::kCdistForward, &cdist},
    {OpKind::kRrelu, &rrelu},
    {OpKind::kArgwhere, &argwhere},
    {OpKind::kFlip, &flip},
    {OpKind::kCombinations, &combinations},
    {OpKind::kEinsum, &einsum},
};

}  // namespace

std::span<const Decomposition> nn_decompositions() { return kNnDecompositions; }

}  // namespace kiln::lowering
