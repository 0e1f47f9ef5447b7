// Attention -> kiln.attention.
//
// (c) kiln.attention over key/value heads repeated for grouped-query
//     attention (unsqueeze, expand, reshape) reads the heads themselves
//     (enable_gqa=True).
//
// (a) aten.scaled_dot_product_attention without dropout or GQA.
// (b) Attention spelled out:
//
//       scores = matmul(q, k.transpose(-2, -1))      (scalar muls on q, k or
//       scores = scores * c | scores / c             the scores fold into one
//       scores = scores + mask                       scale; all optional)
//       p      = softmax(scores, dim=-1)
//       p      = dropout(p, train=False)             (optional)
//       out    = matmul(p, v)
//
//     In the ATen dialect each matmul is a bmm between 3-d views: operands go
//     through expand (a broadcast of batch dims), clone and view to
//     [batch, rows, cols], and the product is viewed back; SDPA's own
//     decomposition also scales q and k^T by sqrt(scale) each and guards the
//     softmax (_safe_softmax: rows with no finite score give 0):
//
//       where(logical_not(any(logical_not(eq(scores, -inf)), -1, keepdim)),
//             full_like(softmax(scores), 0), softmax(scores))
//
//     Every intermediate must have no user outside the pattern. The mask must
//     be a floating-point tensor of the scores' dtype that broadcasts to the
//     scores' shape (a bool mask added to scores is not an attention mask).
//     kiln.attention gives 0 for a row with no finite score; a pattern with a
//     plain softmax gives NaN there, so the rewrite turns NaN rows into zeros.
#include <algorithm>
#include <cmath>

#include "lowering/pass.h"
#include "lowering/rewrite.h"

namespace kiln::lowering {

namespace {

using ir::OpKind;
using ir::Value;

bool is_view_op(OpKind op) { return op == OpKind::kView || op == OpKind::kUnsafeView || op == OpKind::kReshape; }

std::vector<ir::Dim> batch_dims(const Value* v) {
  const auto& s = v->type.sizes;
  return std::vector<ir::Dim>(s.begin(), s.end() - 2);
}

bool same_matrix_dims(const Value* a, const Value* b) {
  const auto& x = a->type.sizes;
  const auto& y = b->type.sizes;
  return x.size() >= 2 && y.size() >= 2 && same_dim(x[x.size() - 2], y[y.size() - 2]) && same_dim(x.back(), y.back());
}

// A 3-d bmm operand made by viewing a batched tensor as [batch, rows, cols]:
// view(clone*(expand?(clone*(base)))). Returns base when the view keeps the
// matrix dims and the (expanded) batch dims equal `batch`.
Value* unflatten(const PatternContext& ctx, Value* v3, const std::vector<ir::Dim>& batch) {
  if (!v3->producer || !is_view_op(v3->producer->op) || !ctx.single_use(v3) || v3->type.sizes.size() != 3)
    return nullptr;
  Value* x = PatternContext::tensor_arg(*v3->producer, "self");
  auto skip_clones = [&] {
    while (x && ctx.producer_if(x, OpKind::kClone) && ctx.single_use(x))
      x = PatternContext::tensor_arg(*x->producer, "self");
  };
  skip_clones();
  if (!x || !same_matrix_dims(x, v3) || !same_sizes(batch_dims(x), batch)) return nullptr;
  if (ctx.producer_if(x, OpKind::kExpand) && ctx.single_use(x)) {
    Value* base = PatternContext::tensor_arg(*x->producer, "self");
    // Only batch dims may broadcast; the matrix dims stay.
    if (!base || !same_matrix_dims(base, x) || base->type.sizes.size() > x->type.sizes.size()) return nullptr;
    x = base;
    skip_clones();
  }
  return x;
}

// A batched matrix product a @ b whose result (with batch dims `batch`) is `result`.
struct Product {
  Value* a = nullptr;
  Value* b = nullptr;
};

// `result` as a matmul, a bmm, or the ATen dialect's view(bmm(view(a), view(b))).
std::optional<Product> match_product(const PatternContext& ctx, Value* result) {
  ir::Node* n = result->producer;
  if (!n || result->type.sizes.size() < 2) return std::nullopt;
  if (n->op == OpKind::kMatmul) {
    Value* a = PatternContext::tensor_arg(*n, "self");
    Value* b = PatternContext::tensor_arg(*n, "other");
    if (!a || !b || a->type.sizes.size() < 2 || b->type.sizes.size() < 2) return std::nullopt;
    return Product{a, b};
  }
  if (n->op == OpKind::kBmm) {
    Value* a = PatternContext::tensor_arg(*n, "self");
    Value* b = PatternContext::tensor_arg(*n, "mat2");
    if (!a || !b) return std::nullopt;
    return Product{a, b};
  }
  if (!is_view_op(n->op) || result->type.sizes.size() < 3) return std::nullopt;
  Value* flat = PatternContext::tensor_arg(*n, "self");
  ir::Node* bmm = ctx.producer_if(flat, OpKind::kBmm);
  if (!bmm || !ctx.single_use(flat) || !same_matrix_dims(flat, result)) return std::nullopt;
  const std::vector<ir::Dim> batch = batch_dims(result);
  Value* a = PatternContext::tensor_arg(*bmm, "self");
  Value* b = PatternContext::tensor_arg(*bmm, "mat2");
  a = a ? unflatten(ctx, a, batch) : nullptr;
  b = b ? unflatten(ctx, b, batch) : nullptr;
  if (!a || !b) return std::nullopt;
  return Product{a, b};
}

// Strips multiplications and divisions by numbers from `v`, multiplying them
// into `scale`. Each stripped value must be used once, except `v` itself when
// `v_owned` (the caller has checked its users).
Value* strip_scale(const PatternContext& ctx, Value* v, double& scale, bool v_owned = false) {
  for (bool owned = v_owned; v->producer && (owned || ctx.single_use(v)); owned = false) {
    const ir::Node& n = *v->producer;
    const bool mul = n.op == OpKind::kMulTensor || n.op == OpKind::kMulScalar;
    const bool div = n.op == OpKind::kDivTensor || n.op == OpKind::kDivScalar;
    if (!mul && !div) break;
    std::optional<std::pair<Value*, double>> tn;
    if (mul) tn = tensor_and_number(ctx, n);
    if (div) {
      Value* self = PatternContext::tensor_arg(n, "self");
      std::optional<double> c = ctx.number(n, "other");
      if (self && c && *c != 0) tn = std::pair{self, 1.0 / *c};
    }
    if (!tn || tn->first->type.dtype != v->type.dtype || !same_sizes(tn->first->type.sizes, v->type.sizes)) break;
    scale *= tn->second;
    v = tn->first;
  }
  return v;
}

// `v` is x with its last two dims swapped (transpose or permute), used once; returns x.
Value* untranspose(const PatternContext& ctx, Value* v) {
  if (!v->producer || !ctx.single_use(v)) return nullptr;
  const ir::Node& n = *v->producer;
  const auto rank = static_cast<int64_t>(v->type.sizes.size());
  auto wrap = [rank](int64_t d) { return d < 0 ? d + rank : d; };
  if (n.op == OpKind::kTranspose) {
    const auto d0 = int_value(n, "dim0"), d1 = int_value(n, "dim1");
    if (!d0 || !d1) return nullptr;
    const int64_t a = wrap(*d0), b = wrap(*d1);
    if (std::min(a, b) != rank - 2 || std::max(a, b) != rank - 1) return nullptr;
    return PatternContext::tensor_arg(n, "self");
  }
  if (n.op == OpKind::kPermute) {
    const auto dims = int_list(n, "dims");
    if (!dims || static_cast<int64_t>(dims->size()) != rank || rank < 2) return nullptr;
    for (int64_t i = 0; i < rank; ++i) {
      const int64_t want = i == rank - 2 ? rank - 1 : i == rank - 1 ? rank - 2 : i;
      if (wrap((*dims)[static_cast<size_t>(i)]) != want) return nullptr;
    }
    return PatternContext::tensor_arg(n, "self");
  }
  return nullptr;
}

struct Scores {
  Value* q = nullptr;
  Value* k = nullptr;
  double scale = 1;
};

// `s` is (q * c1) @ (k^T * c2) * c3 with any of the scalars absent; the
// caller has checked s's users.
std::optional<Scores> match_scores(const PatternContext& ctx, Value* s) {
  Scores r;
  Value* raw = strip_scale(ctx, s, r.scale, /*v_owned=*/true);
  if (raw != s && !ctx.single_use(raw)) return std::nullopt;
  std::optional<Product> p = match_product(ctx, raw);
  if (!p) return std::nullopt;
  r.q = strip_scale(ctx, p->a, r.scale);
  Value* kt = strip_scale(ctx, p->b, r.scale);
  Value* k = untranspose(ctx, kt);
  if (!k) return std::nullopt;
  r.k = strip_scale(ctx, k, r.scale);
  return r;
}

bool is_softmax_last_dim(const ir::Node& n) {
  Value* x = PatternContext::tensor_arg(n, "self");
  if (!x) return false;
  const auto dim = int_value(n, "dim");
  if (!dim || !is_last_dim(*dim, x->type.sizes.size())) return false;
  if (n.op == OpKind::kSoftmax) return absent(n, "dtype");
  if (n.op == OpKind::kSoftmaxInternal) return bool_value(n, "half_to_float", false) == false;
  return false;
}

// Only the nodes in `allowed` use `v`, each once.
bool used_only_by(const PatternContext& ctx, const Value* v, std::initializer_list<const ir::Node*> allowed) {
  const auto& users = ctx.users(v);
  if (ctx.uses(v) != static_cast<int>(allowed.size()) || users.size() != allowed.size()) return false;
  for (const ir::Node* a : allowed)
    if (std::count(users.begin(), users.end(), a) != 1) return false;
  return true;
}

// The node making `zeros` when it is full_like(sm, 0), or that as the
// decompose pass writes it, where(true, 0, sm); null otherwise.
ir::Node* zeros_like_node(const PatternContext& ctx, Value* zeros, Value* sm) {
  if (ir::Node* full = ctx.producer_if(zeros, OpKind::kFullLike))
    return PatternContext::tensor_arg(*full, "self") == sm && ctx.number(*full, "fill_value") == 0.0 ? full : nullptr;
  ir::Node* w = ctx.producer_if(zeros, OpKind::kWhere);
  if (!w || PatternContext::tensor_arg(*w, "other") != sm) return nullptr;
  const Value* c = PatternContext::tensor_arg(*w, "condition");
  const Tensor* always = c ? ctx.constant(c) : nullptr;
  const Value* z = PatternContext::tensor_arg(*w, "self");
  const Tensor* zero = z ? ctx.constant(z) : nullptr;
  const bool fill = always && always->dim() == 0 && always->dtype() == DType::Bool && always->item() != 0 && zero &&
                    zero->dim() == 0 && zero->item() == 0;
  return fill ? w : nullptr;
}

// `p` is softmax(scores) over the last dim, possibly behind eval-mode dropout
// and SDPA's guard for rows with no finite score. Returns scores.
Value* match_softmax(const PatternContext& ctx, Value* p) {
  if (ir::Node* d = ctx.producer_if(p, OpKind::kDropout); d && ctx.single_use(p)) {
    const bool eval = bool_value(*d, "train") == false || ctx.number(*d, "p") == 0.0;
    if (!eval) return nullptr;
    p = PatternContext::tensor_arg(*d, "input");
    if (!p) return nullptr;
  }
  if (!ctx.single_use(p) || !p->producer) return nullptr;
  ir::Node* n = p->producer;
  if (n->op == OpKind::kSoftmax || n->op == OpKind::kSoftmaxInternal) {
    Value* s = is_softmax_last_dim(*n) ? PatternContext::tensor_arg(*n, "self") : nullptr;
    return s && ctx.single_use(s) ? s : nullptr;
  }
  // where(no finite score in the row, full_like(sm, 0), sm)
  if (n->op != OpKind::kWhere) return nullptr;
  Value* cond = PatternContext::tensor_arg(*n, "condition");
  Value* zeros = PatternContext::tensor_arg(*n, "self");
  Value* sm = PatternContext::tensor_arg(*n, "other");
  ir::Node* full = zeros ? zeros_like_node(ctx, zeros, sm) : nullptr;
  if (!cond || !sm || !full || !sm->producer || !is_softmax_last_dim(*sm->producer)) return nullptr;
  if (!ctx.single_use(zeros) || !used_only_by(ctx, sm, {full, n})) return nullptr;
  Value* s = PatternContext::tensor_arg(*sm->producer, "self");
  // cond = logical_not(any(logical_not(eq(s, -inf)), dim=-1, keepdim=True))
  ir::Node* not_any = ctx.producer_if(cond, OpKind::kLogicalNot);
  Value* any_v = not_any && ctx.single_use(cond) ? PatternContext::tensor_arg(*not_any, "self") : nullptr;
  ir::Node* any = any_v ? ctx.producer_if(any_v, OpKind::kAnyDim) : nullptr;
  if (!any || !ctx.single_use(any_v) || bool_value(*any, "keepdim") != true) return nullptr;
  const auto any_dim = int_value(*any, "dim");
  Value* finite = PatternContext::tensor_arg(*any, "self");
  if (!any_dim || !finite || !is_last_dim(*any_dim, finite->type.sizes.size())) return nullptr;
  ir::Node* not_inf = ctx.producer_if(finite, OpKind::kLogicalNot);
  Value* is_inf = not_inf && ctx.single_use(finite) ? PatternContext::tensor_arg(*not_inf, "self") : nullptr;
  ir::Node* eq = is_inf ? ctx.producer_if(is_inf, OpKind::kEqScalar) : nullptr;
  if (!eq || !ctx.single_use(is_inf) || PatternContext::tensor_arg(*eq, "self") != s) return nullptr;
  const std::optional<double> inf = ctx.number(*eq, "other");
  if (!inf || !std::isinf(*inf) || *inf > 0 || !used_only_by(ctx, s, {sm->producer, eq})) return nullptr;
  return s;
}

struct Attention {
  Value* q = nullptr;
  Value* k = nullptr;
  Value* v = nullptr;
  Value* mask = nullptr;
  double scale = 1;
};

// `out` is softmax(scores [+ mask]) @ v.
std::optional<Attention> match_explicit(const PatternContext& ctx, Value* out) {
  std::optional<Product> pv = match_product(ctx, out);
  if (!pv) return std::nullopt;
  Value* s = match_softmax(ctx, pv->a);
  if (!s) return std::nullopt;
  Attention att;
  att.v = pv->b;
  std::optional<Scores> scores = match_scores(ctx, s);
  if (!scores && s->producer && plain_add(ctx, *s->producer)) {
    Value* a = PatternContext::tensor_arg(*s->producer, "self");
    Value* b = PatternContext::tensor_arg(*s->producer, "other");
    for (auto [x, mask] : {std::pair{a, b}, std::pair{b, a}}) {
      if (!x || !mask || !ctx.single_use(x)) continue;
      if (mask->type.dtype != s->type.dtype || x->type.dtype != s->type.dtype ||
          !same_sizes(x->type.sizes, s->type.sizes))
        continue;
      scores = match_scores(ctx, x);
      if (scores) {
        att.mask = mask;
        break;
      }
    }
  }
  if (!scores) return std::nullopt;
  att.q = scores->q;
  att.k = scores->k;
  att.scale = scores->scale;
  // q [..., L, E], k [..., S, E], v [..., S, Ev], one floating dtype.
  const DType dt = out->type.dtype;
  for (const Value* x : {att.q, att.k, att.v, s})
    if (x->type.dtype != dt || x->type.sizes.size() < 2) return std::nullopt;
  const auto& q = att.q->type.sizes;
  const auto& k = att.k->type.sizes;
  const auto& v = att.v->type.sizes;
  if (!is_floating(dt) || !same_dim(q.back(), k.back()) || !same_dim(k[k.size() - 2], v[v.size() - 2]))
    return std::nullopt;
  return att;
}

Expected<bool> fuse_explicit(PatternContext& ctx, ir::Node& n) {
  if (n.outputs.size() != 1) return false;
  if (n.op != OpKind::kMatmul && n.op != OpKind::kBmm && !is_view_op(n.op)) return false;
  Value* out = n.outputs[0];
  std::optional<Attention> att = match_explicit(ctx, out);
  if (!att) return false;
  std::vector<ir::NamedArg> args = {{"query", att->q}, {"key", att->k}, {"value", att->v}};
  if (att->mask) args.push_back({"attn_mask", att->mask});
  args.push_back({"scale", att->scale});
  args.push_back({"is_causal", false});
  ir::Node* fused = ctx.insert_before(&n, OpKind::kAttention, n.name, std::move(args), out->type);
  ctx.replace_uses(out, fused->outputs[0]);
  return true;
}

Expected<bool> fuse_sdpa(PatternContext& ctx, ir::Node& n) {
  if (n.op != OpKind::kScaledDotProductAttention || n.outputs.size() != 1) return false;
  if (!absent(n, "dropout_p") && ctx.number(n, "dropout_p") != 0.0) return false;
  if (!absent(n, "enable_gqa") && bool_value(n, "enable_gqa") != false) return false;
  std::vector<ir::NamedArg> args;
  for (const char* name : {"query", "key", "value", "attn_mask", "scale", "is_causal"})
    if (const ir::Arg* a = n.find(name); a && !std::holds_alternative<ir::NoneArg>(*a)) args.push_back({name, *a});
  ir::Node* fused = ctx.insert_before(&n, OpKind::kAttention, n.name, std::move(args), n.outputs[0]->type);
  fused->metadata = n.metadata;
  ctx.replace_uses(n.outputs[0], fused->outputs[0]);
  return true;
}

// Grouped-query heads spelled out (transformers' repeat_kv): a key or value
// of Hkv heads [B, Hkv, S, D], unsqueezed at dim 2, expanded to
// [B, Hkv, G, S, D] and reshaped to [B, Hkv*G, S, D]. Returns the un-repeated
// tensor and G.
std::optional<std::pair<Value*, int64_t>> unrepeat_kv(Value* x) {
  const ir::Node* r = x->producer;
  if (!r || !is_view_op(r->op) || x->type.sizes.size() != 4) return std::nullopt;
  Value* e = PatternContext::tensor_arg(*r, "self");
  if (!e || !e->producer || e->producer->op != OpKind::kExpand || e->type.sizes.size() != 5) return std::nullopt;
  Value* u = PatternContext::tensor_arg(*e->producer, "self");
  if (!u || !u->producer || u->producer->op != OpKind::kUnsqueeze) return std::nullopt;
  const std::optional<int64_t> dim = int_value(*u->producer, "dim");
  if (!dim || (*dim != 2 && *dim != -3)) return std::nullopt;
  Value* base = PatternContext::tensor_arg(*u->producer, "self");
  if (!base || base->type.sizes.size() != 4) return std::nullopt;
  const auto& b = base->type.sizes;
  const auto& ex = e->type.sizes;
  const auto& xs = x->type.sizes;
  for (const ir::Dim* d : {&b[1], &ex[2], &xs[1]})
    if (!d->is_static()) return std::nullopt;
  const int64_t G = ex[2].value;
  if (G < 1 || !same_dim(ex[0], b[0]) || !same_dim(ex[1], b[1]) || !same_dim(ex[3], b[2]) || !same_dim(ex[4], b[3]) ||
      !same_dim(xs[0], b[0]) || xs[1].value != b[1].value * G || !same_dim(xs[2], b[2]) || !same_dim(xs[3], b[3]))
    return std::nullopt;
  return std::pair{base, G};
}

// kiln.attention over repeated key/value heads -> kiln.attention over the
// key/value heads themselves with enable_gqa (query head h reads key/value
// head h / G, as the repetition did): the repeated copies are never made.
Expected<bool> fuse_grouped_heads(PatternContext& ctx, ir::Node& n) {
  if (n.op != OpKind::kAttention || n.outputs.size() != 1) return false;
  if (!absent(n, "enable_gqa") && bool_value(n, "enable_gqa") == true) return false;
  Value* key = PatternContext::tensor_arg(n, "key");
  Value* value = PatternContext::tensor_arg(n, "value");
  if (!key || !value) return false;
  const auto k = unrepeat_kv(key);
  const auto v = unrepeat_kv(value);
  if (!k || !v || k->second != v->second || k->second == 1) return false;
  if (!same_dim(k->first->type.sizes[1], v->first->type.sizes[1])) return false;
  std::vector<ir::NamedArg> args;
  for (const ir::NamedArg& a : n.args) {
    if (a.name == "key") {
      args.push_back({"key", k->first});
    } else if (a.name == "value") {
      args.push_back({"value", v->first});
    } else if (a.name != "enable_gqa") {
      args.push_back(a);
    }
  }
  args.push_back({"enable_gqa", true});
  ir::Node* fused = ctx.insert_before(&n, OpKind::kAttention, n.name, std::move(args), n.outputs[0]->type);
  fused->metadata = n.metadata;
  ctx.replace_uses(n.outputs[0], fused->outputs[0]);
  return true;
}

Expected<bool> fuse(PatternContext& ctx, ir::Node& n) {
  if (n.op == OpKind::kScaledDotProductAttention) return fuse_sdpa(ctx, n);
  if (n.op == OpKind::kAttention) return fuse_grouped_heads(ctx, n);
  return fuse_explicit(ctx, n);
}

}  // namespace

Status fuse_attention(ir::Module& m) { return rewrite_to_fixed_point(m, fuse); }

}  // namespace kiln::lowering
