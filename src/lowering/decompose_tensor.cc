// Composites of torch over tensor products, scatters into positions known at
// compile time, and the scalar overloads of ops kiln runs in their tensor
// form, written in core ops as ATen defines them, one small function each:
//
//   scalar overloads: where.ScalarOther / ScalarSelf / Scalar (the number as
//     a 0-d constant of the result's dtype), min.other and max.other
//     (minimum, maximum), fill.Tensor (the 0-d value expanded), fill.Scalar and zero
//     (full_like), pow.Scalar
//     (a 0-d base), empty_permuted (empty: kiln's tensors are contiguous),
//     masked_fill.Scalar / .Tensor (where with the value as a 0-d constant),
//     full_like (where(true, value, self): computed, never stored at self's
//     size); in the forms engines take: bitwise_not of bool, int32 and int64
//     tensors (where, or -1 - x), minimum / maximum and abs of int32 and
//     int64 tensors (a comparison and where)
//   products: tensordot (permutes, one mm), kron (interleaved broadcast
//     product), bilinear (one mm, then a product with input2 and a sum),
//     _weight_norm (v * g / |v| over every dim but `dim`), triangular_solve
//     (linalg_solve_triangular of A or A^T, and a copy of A)
//   positions known at compile time: block_diag (padded blocks, cat),
//     combinations (an index table), diagonal_scatter (index_copy into the
//     flattened tensor), pdist and _pdist_forward (row pairs by index tables)
//   data-dependent positions in static sizes: put (index_put on the flat
//     tensor, negative indices wrapped), masked_scatter (the source's entries
//     at the running count of the mask)
//   cumulative_trapezoid (.x and .dx: ATen's cumsum of pair sums),
//   multi_margin_loss (p 1 or 2, class weights)
//
// A node whose arguments a decomposition does not cover (symbolic sizes where
// it needs static ones, mixed dtypes) is left as it is, and partitioning
// names it.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "lowering/decompose.h"

namespace kiln::lowering {

namespace {

using ir::OpKind;

int64_t product(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{1}, std::multiplies<int64_t>());
}

// Argument `arg` of `n` as a tensor of `dt`: a tensor (cast when its dtype
// differs) or a number (a 0-d constant); null when it is neither.
ir::Value* as_tensor_of(Nodes& b, PatternContext& ctx, const ir::Node& n, std::string_view arg, DType dt) {
  if (ir::Value* v = PatternContext::tensor_arg(n, arg)) {
    if (v->type.dtype == dt) return v;
    return b.add(OpKind::kToCopy, {{"self", v}, {"dtype", dt}}, {dt, v->type.sizes});
  }
  const auto x = ctx.number(n, arg);
  if (!x) return nullptr;
  return b.constant(Tensor::scalar(dt, *x));
}

// The root's result when it has no elements: an empty tensor of its type.
ir::Value* empty_result(Nodes& b) {
  const auto sizes = static_sizes(b.out());
  if (!sizes || product(*sizes) != 0) return nullptr;
  return b.add(OpKind::kEmpty, {{"size", *sizes}, {"dtype", b.out().dtype}}, b.out());
}

// ---- scalar overloads

// where(condition, self, other) with either or both a number.
Expected<bool> where_scalar(PatternContext& ctx, ir::Node& n) {
  ir::Value* c = PatternContext::tensor_arg(n, "condition");
  if (!c || c->type.dtype != DType::Bool || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  const DType dt = b.out().dtype;
  ir::Value* x = as_tensor_of(b, ctx, n, "self", dt);
  ir::Value* y = as_tensor_of(b, ctx, n, "other", dt);
  if (!x || !y) return false;
  return b.done(b.select(c, x, y));
}

// min.other / max.other are minimum / maximum.
Expected<bool> min_max_other(PatternContext& ctx, ir::Node& n) {
  if (!PatternContext::tensor_arg(n, "self") || !PatternContext::tensor_arg(n, "other") || n.outputs.size() != 1)
    return false;
  Nodes b(ctx, n);
  return b.done(b.add(n.op == OpKind::kMinOther ? OpKind::kMinimum : OpKind::kMaximum, n.args, b.out()));
}

// fill.Tensor(self, value): the 0-d value in self's dtype at self's sizes.
Expected<bool> fill_tensor(PatternContext& ctx, ir::Node& n) {
  ir::Value* value = PatternContext::tensor_arg(n, "value");
  if (!value || !value->type.sizes.empty() || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  const auto sizes = static_sizes(b.out());
  if (!sizes) return false;
  ir::Value* v = as_tensor_of(b, ctx, n, "value", b.out().dtype);
  ir::Value* e = b.add(OpKind::kExpand, {{"self", v}, {"size", *sizes}}, b.out());
  return b.done(b.add(OpKind::kClone, {{"self", e}}, b.out()));
}

// fill.Scalar(self, value) is full_like(self, value); zero(self) full_like(self, 0).
Expected<bool> fill_scalar(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1) return false;
  ir::Arg value = 0.0;
  if (n.op == OpKind::kFillScalar) {
    const ir::Arg* v = n.find("value");
    if (!v || std::holds_alternative<ir::Value*>(*v)) return false;
    value = *v;
  }
  Nodes b(ctx, n);
  return b.done(b.add(OpKind::kFullLike, {{"self", x}, {"fill_value", value}}, b.out()));
}

// pow.Scalar(self: number, exponent) = pow(0-d self, exponent).
Expected<bool> pow_scalar(PatternContext& ctx, ir::Node& n) {
  if (n.outputs.size() != 1 || !is_floating(n.outputs[0]->type.dtype)) return false;
  Nodes b(ctx, n);
  const DType dt = b.out().dtype;
  ir::Value* base = as_tensor_of(b, ctx, n, "self", dt);
  ir::Value* e = as_tensor_of(b, ctx, n, "exponent", dt);
  if (!base || !e) return false;
  return b.done(b.add(OpKind::kPowTensorTensor, {{"self", base}, {"exponent", e}}, b.out()));
}

// empty_permuted(size, physical_layout): empty(size); the layout is a stride
// order, and kiln's tensors are contiguous.
Expected<bool> empty_permuted(PatternContext& ctx, ir::Node& n) {
  const ir::Arg* size = n.find("size");
  if (!size || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  return b.done(b.add(OpKind::kEmpty, {{"size", *size}, {"dtype", b.out().dtype}}, b.out()));
}

// A 0-d constant of `dt` holding number argument `arg` (an int kept exact for
// int64), or null when `arg` is not a number known at compile time.
ir::Value* number_constant(Nodes& b, const PatternContext& ctx, const ir::Node& n, std::string_view arg, DType dt) {
  const ir::Arg* a = n.find(arg);
  if (const auto* flag = a ? std::get_if<bool>(a) : nullptr) return b.constant(Tensor::scalar(dt, *flag ? 1.0 : 0.0));
  if (const auto* i = a ? std::get_if<int64_t>(a) : nullptr; i && dt == DType::Int64) {
    Tensor t = Tensor::zeros(DType::Int64, {});
    *t.data<int64_t>() = *i;
    return b.constant(t);
  }
  const auto x = ctx.number(n, arg);
  return x ? b.constant(Tensor::scalar(dt, *x)) : nullptr;
}

// masked_fill.Scalar / .Tensor(self, mask, value) = where(mask, value in
// self's dtype, self).
Expected<bool> masked_fill(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* mask = PatternContext::tensor_arg(n, "mask");
  if (!x || !mask || mask->type.dtype != DType::Bool || n.outputs.size() != 1 ||
      n.outputs[0]->type.dtype != x->type.dtype || !same_sizes(x->type.sizes, n.outputs[0]->type.sizes))
    return false;
  const auto wide = broadcast_sizes(mask->type.sizes, x->type.sizes);
  if (!wide || !same_sizes(*wide, x->type.sizes)) return false;
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* v = nullptr;
  if (n.op == OpKind::kMaskedFillScalar) {
    v = number_constant(b, ctx, n, "value", dt);
  } else if (ir::Value* t = PatternContext::tensor_arg(n, "value"); t && t->type.sizes.empty()) {
    v = as_tensor_of(b, ctx, n, "value", dt);
  }
  if (!v) return false;
  return b.done(b.select(mask, v, x));
}

// full_like(self, value, dtype) = where(true, value, self) in the result's
// dtype: every entry is the value, at self's sizes (symbolic ones too),
// computed where self is rather than stored as a constant of its size.
Expected<bool> full_like(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || !same_sizes(x->type.sizes, n.outputs[0]->type.sizes)) return false;
  Nodes b(ctx, n);
  const DType dt = b.out().dtype;
  ir::Value* v = number_constant(b, ctx, n, "fill_value", dt);
  if (!v) return false;
  // where's operands have the result's dtype; self's values are never read.
  ir::Value* y = x->type.dtype == dt ? x : b.add(OpKind::kToCopy, {{"self", x}, {"dtype", dt}}, {dt, x->type.sizes});
  return b.done(b.select(b.constant(Tensor::scalar(DType::Bool, 1.0)), v, y));
}

bool int32_or_64(DType dt) { return dt == DType::Int32 || dt == DType::Int64; }

// bitwise_not of a bool tensor = where(x, false, true); of an int32 or int64
// tensor = -1 - x (two's complement).
Expected<bool> bitwise_not(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || n.outputs[0]->type.dtype != x->type.dtype) return false;
  const DType dt = x->type.dtype;
  Nodes b(ctx, n);
  if (dt == DType::Bool)
    return b.done(b.select(x, b.constant(Tensor::scalar(dt, 0.0)), b.constant(Tensor::scalar(dt, 1.0))));
  if (!int32_or_64(dt)) return false;
  return b.done(b.binary(OpKind::kSubTensor, b.constant(Tensor::scalar(dt, -1.0)), x, dt));
}

// minimum / maximum of int32 or int64 tensors of one dtype = where(a <= b, a, b)
// / where(a >= b, a, b) (no NaN to propagate).
Expected<bool> integer_min_max(PatternContext& ctx, ir::Node& n) {
  ir::Value* a = PatternContext::tensor_arg(n, "self");
  ir::Value* c = PatternContext::tensor_arg(n, "other");
  if (!a || !c || n.outputs.size() != 1 || !int32_or_64(a->type.dtype) || c->type.dtype != a->type.dtype ||
      n.outputs[0]->type.dtype != a->type.dtype)
    return false;
  Nodes b(ctx, n);
  ir::Value* keep_a = b.binary(n.op == OpKind::kMinimum ? OpKind::kLeTensor : OpKind::kGeTensor, a, c, DType::Bool);
  if (!keep_a || !same_sizes(keep_a->type.sizes, b.out().sizes)) return false;
  return b.done(b.select(keep_a, a, c));
}

// abs of an int32 or int64 tensor = where(x < 0, x * -1, x) (the most
// negative value stays itself, as in ATen).
Expected<bool> integer_abs(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || !int32_or_64(x->type.dtype) || n.outputs[0]->type.dtype != x->type.dtype)
    return false;
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* negative = b.binary(OpKind::kLtScalar, x, int64_t{0}, DType::Bool);
  return b.done(b.select(negative, b.binary(OpKind::kMulTensor, x, int64_t{-1}, dt), x));
}

// ---- products

// tensordot(a, b, dims_self, dims_other): a's free dims by b's free dims,
// summed over the paired dims, as one mm (a dim of size n paired with one of
// size 1, which torch broadcasts, summed first).
Expected<bool> tensordot(PatternContext& ctx, ir::Node& n) {
  ir::Value* a = PatternContext::tensor_arg(n, "self");
  ir::Value* c = PatternContext::tensor_arg(n, "other");
  const auto da = int_list(n, "dims_self");
  const auto dc = int_list(n, "dims_other");
  const auto sa = a ? static_sizes(a->type) : std::nullopt;
  const auto sc = c ? static_sizes(c->type) : std::nullopt;
  if (!floating_pair(n, a, c) || !da || !dc || da->size() != dc->size() || !sa || !sc) return false;
  std::vector<int64_t> ca, cc;  // the contracted dims, paired
  std::vector<int64_t> sum_a, sum_c;  // dims of size n paired with a size 1 (torch broadcasts): summed first
  for (size_t i = 0; i < da->size(); ++i) {
    const int64_t x = norm_dim((*da)[i], sa->size()), y = norm_dim((*dc)[i], sc->size());
    if (x < 0 || y < 0) return false;
    const int64_t nx = (*sa)[static_cast<size_t>(x)], ny = (*sc)[static_cast<size_t>(y)];
    if (nx != ny && nx != 1 && ny != 1) return false;
    if (nx != ny) (nx == 1 ? sum_c : sum_a).push_back(nx == 1 ? y : x);
    ca.push_back(x);
    cc.push_back(y);
  }
  auto free_dims = [](size_t rank, const std::vector<int64_t>& used) {
    std::vector<int64_t> f;
    for (int64_t d = 0; d < static_cast<int64_t>(rank); ++d)
      if (std::find(used.begin(), used.end(), d) == used.end()) f.push_back(d);
    return f;
  };
  const std::vector<int64_t> fa = free_dims(sa->size(), ca), fc = free_dims(sc->size(), cc);
  if (fa.size() + ca.size() != sa->size() || fc.size() + cc.size() != sc->size()) return false;  // a repeated dim
  std::vector<int64_t> out_sizes;
  int64_t rows = 1, cols = 1, inner = 1;
  for (int64_t d : fa) rows *= (*sa)[static_cast<size_t>(d)], out_sizes.push_back((*sa)[static_cast<size_t>(d)]);
  for (int64_t d : fc) cols *= (*sc)[static_cast<size_t>(d)], out_sizes.push_back((*sc)[static_cast<size_t>(d)]);
  const DType dt = a->type.dtype;
  if (!same_sizes(static_type(dt, out_sizes).sizes, n.outputs[0]->type.sizes)) return false;
  Nodes b(ctx, n);
  auto summed = [&](ir::Value* v, std::vector<int64_t>* sizes, const std::vector<int64_t>& dims) {
    if (dims.empty()) return v;
    for (int64_t d : dims) (*sizes)[static_cast<size_t>(d)] = 1;
    return b.add(OpKind::kSumDimIntList, {{"self", v}, {"dim", dims}, {"keepdim", true}}, static_type(dt, *sizes));
  };
  std::vector<int64_t> za = *sa, zc = *sc;
  a = summed(a, &za, sum_a);
  c = summed(c, &zc, sum_c);
  for (int64_t d : ca) inner *= za[static_cast<size_t>(d)];
  auto arranged = [&](ir::Value* v, const std::vector<int64_t>& sizes, std::vector<int64_t> perm, int64_t r, int64_t k) {
    std::vector<int64_t> ps;
    for (int64_t d : perm) ps.push_back(sizes[static_cast<size_t>(d)]);
    ir::Value* p = b.add(OpKind::kPermute, {{"self", v}, {"dims", perm}}, static_type(dt, ps));
    return b.reshape(p, {r, k});
  };
  std::vector<int64_t> pa = fa, pc = cc;
  pa.insert(pa.end(), ca.begin(), ca.end());
  pc.insert(pc.end(), fc.begin(), fc.end());
  ir::Value* m = b.add(OpKind::kMm, {{"self", arranged(a, za, pa, rows, inner)}, {"mat2", arranged(c, zc, pc, inner, cols)}},
                       static_type(dt, {rows, cols}));
  return b.done(b.reshape(m, out_sizes));
}

// kron(a, b): ranks padded with leading 1s; a viewed [a0, 1, a1, 1, ..],
// b [1, b0, 1, b1, ..], multiplied and merged pairwise.
Expected<bool> kron(PatternContext& ctx, ir::Node& n) {
  ir::Value* a = PatternContext::tensor_arg(n, "self");
  ir::Value* c = PatternContext::tensor_arg(n, "other");
  auto sa = a ? static_sizes(a->type) : std::nullopt;
  auto sc = c ? static_sizes(c->type) : std::nullopt;
  if (!a || !c || !sa || !sc || a->type.dtype != c->type.dtype || n.outputs.size() != 1 ||
      n.outputs[0]->type.dtype != a->type.dtype)
    return false;
  const size_t r = std::max(sa->size(), sc->size());
  sa->insert(sa->begin(), r - sa->size(), 1);
  sc->insert(sc->begin(), r - sc->size(), 1);
  std::vector<int64_t> va, vc, merged;
  for (size_t i = 0; i < r; ++i) {
    va.insert(va.end(), {(*sa)[i], 1});
    vc.insert(vc.end(), {1, (*sc)[i]});
    merged.push_back((*sa)[i] * (*sc)[i]);
  }
  Nodes b(ctx, n);
  ir::Value* p = b.binary(OpKind::kMulTensor, b.reshape(a, va), b.reshape(c, vc), a->type.dtype);
  if (!p || !same_sizes(static_type(a->type.dtype, merged).sizes, b.out().sizes)) return false;
  return b.done(b.reshape(p, merged));
}

// bilinear(x1 [.., I], x2 [.., J], W [O, I, J], bias [O]):
// out[.., o] = sum_ij x1_i W_oij x2_j + bias_o, as x1 @ W' [I, O*J], times x2, summed over J.
Expected<bool> bilinear(PatternContext& ctx, ir::Node& n) {
  ir::Value* x1 = PatternContext::tensor_arg(n, "input1");
  ir::Value* x2 = PatternContext::tensor_arg(n, "input2");
  ir::Value* w = PatternContext::tensor_arg(n, "weight");
  ir::Value* bias = PatternContext::tensor_arg(n, "bias");
  const auto s1 = x1 ? static_sizes(x1->type) : std::nullopt;
  const auto s2 = x2 ? static_sizes(x2->type) : std::nullopt;
  const auto sw = w ? static_sizes(w->type) : std::nullopt;
  if (!floating_pair(n, x1, x2) || !w || w->type.dtype != x1->type.dtype || !s1 || !s2 || !sw || sw->size() != 3 ||
      s1->empty() || s1->size() != s2->size() || (bias && bias->type.dtype != x1->type.dtype))
    return false;
  const int64_t O = (*sw)[0], I = (*sw)[1], J = (*sw)[2];
  if (s1->back() != I || s2->back() != J || !std::equal(s1->begin(), s1->end() - 1, s2->begin())) return false;
  const std::vector<int64_t> lead(s1->begin(), s1->end() - 1);
  const int64_t B = product(lead);
  const DType dt = x1->type.dtype;
  Nodes b(ctx, n);
  ir::Value* wt = b.add(OpKind::kPermute, {{"self", w}, {"dims", std::vector<int64_t>{1, 0, 2}}}, static_type(dt, {I, O, J}));
  ir::Value* m = b.add(OpKind::kMm, {{"self", b.reshape(x1, {B, I})}, {"mat2", b.reshape(wt, {I, O * J})}},
                       static_type(dt, {B, O * J}));
  ir::Value* p = b.binary(OpKind::kMulTensor, b.reshape(m, {B, O, J}), b.reshape(x2, {B, 1, J}), dt);
  ir::Value* s = b.add(OpKind::kSumDimIntList, {{"self", p}, {"dim", std::vector<int64_t>{2}}, {"keepdim", false}},
                       static_type(dt, {B, O}));
  if (bias) s = b.binary(OpKind::kAddTensor, s, bias, dt);
  std::vector<int64_t> out = lead;
  out.push_back(O);
  if (!s || !same_sizes(static_type(dt, out).sizes, b.out().sizes)) return false;
  return b.done(b.reshape(s, out));
}

// _weight_norm(v, g, dim) = v * (g / norm_except_dim(v, 2, dim)): the 2-norm
// over every dim but `dim` (over all of them for dim -1).
Expected<bool> weight_norm(PatternContext& ctx, ir::Node& n) {
  ir::Value* v = PatternContext::tensor_arg(n, "v");
  ir::Value* g = PatternContext::tensor_arg(n, "g");
  const auto dim = int_value(n, "dim");
  if (!floating_pair(n, v, g) || !dim || v->type.sizes.empty()) return false;
  const int64_t rank = static_cast<int64_t>(v->type.sizes.size());
  if (*dim < -1 || *dim >= rank) return false;
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d)
    if (d != *dim) dims.push_back(d);
  Nodes b(ctx, n);
  const DType dt = v->type.dtype;
  ir::Value* norm = b.p_norm(v, 2.0, dims, *dim != -1);
  ir::Value* scale = b.binary(OpKind::kDivTensor, g, norm, dt);
  return b.done(scale ? b.binary(OpKind::kMulTensor, v, scale, dt) : nullptr);
}

// ---- positions known at compile time

// block_diag(tensors): each a matrix (a 0-d tensor is 1x1, a vector a row),
// padded to the full width at its column and stacked.
Expected<bool> block_diag(PatternContext& ctx, ir::Node& n) {
  const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("tensors"));
  if (!ins || ins->empty() || n.outputs.size() != 1) return false;
  const DType dt = n.outputs[0]->type.dtype;
  std::vector<std::pair<int64_t, int64_t>> shapes;
  int64_t cols = 0;
  for (ir::Value* v : *ins) {
    const auto s = static_sizes(v->type);
    if (!s || s->size() > 2 || v->type.dtype != dt) return false;
    shapes.emplace_back(s->size() == 2 ? (*s)[0] : 1, s->empty() ? 1 : s->back());
    cols += shapes.back().second;
  }
  Nodes b(ctx, n);
  std::vector<ir::Value*> rows;
  int64_t at = 0;
  for (size_t i = 0; i < ins->size(); ++i) {
    const auto [r, c] = shapes[i];
    ir::Value* m = b.reshape((*ins)[i], {r, c});
    rows.push_back(b.add(OpKind::kConstantPadNd, {{"self", m}, {"pad", std::vector<int64_t>{at, cols - at - c}}, {"value", 0.0}},
                         static_type(dt, {r, cols})));
    at += c;
  }
  return b.done(b.add(OpKind::kCat, {{"tensors", rows}, {"dim", int64_t{0}}}, b.out()));
}

// combinations(self, r, with_replacement): the index tuples of a vector in
// itertools' order, gathered as one index_select.
Expected<bool> combinations(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto r = int_value(n, "r", 2);
  const auto repl = bool_value(n, "with_replacement", false);
  const auto sx = x ? static_sizes(x->type) : std::nullopt;
  if (!sx || sx->size() != 1 || !r || *r < 1 || !repl || n.outputs.size() != 1) return false;
  const int64_t len = (*sx)[0];
  // Increasing tuples (non-decreasing with replacement) in lexicographic order.
  const int64_t k = *r;
  std::vector<int64_t> table, tuple(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) tuple[static_cast<size_t>(i)] = *repl ? 0 : i;
  const bool any = *repl ? len > 0 : k <= len;
  while (any) {
    if (table.size() > (int64_t{1} << 24)) return false;  // a table too big to be worth a constant
    table.insert(table.end(), tuple.begin(), tuple.end());
    int64_t i = k - 1;  // the rightmost entry that can still grow
    while (i >= 0 && tuple[static_cast<size_t>(i)] == (*repl ? len - 1 : len - k + i)) --i;
    if (i < 0) break;
    ++tuple[static_cast<size_t>(i)];
    for (int64_t j = i + 1; j < k; ++j)
      tuple[static_cast<size_t>(j)] = tuple[static_cast<size_t>(*repl ? i : j - 1)] + (*repl ? 0 : 1);
  }
  const int64_t count = static_cast<int64_t>(table.size()) / *r;
  Nodes b(ctx, n);
  if (count == 0) return b.done(empty_result(b));
  // Export may give the count an unbacked size (u0): its value is this table's.
  const auto& want = n.outputs[0]->type.sizes;
  if (want.size() != 2 || (want[0].is_static() && want[0].value != count) ||
      (want[1].is_static() && want[1].value != *r))
    return false;
  ir::Value* g = b.add(OpKind::kIndexSelect, {{"self", x}, {"dim", int64_t{0}}, {"index", b.constant(index_table(table))}},
                       static_type(x->type.dtype, {count * *r}));
  return b.done(b.reshape(g, {count, *r}));
}

// triangular_solve(self=B, A, upper, transpose, unitriangular): the legacy
// form of linalg_solve_triangular(A or A^T, B, left) (transposing A flips
// which triangle it holds); the second result is a copy of A, broadcast to
// the batch of the first as PyTorch returns it.
Expected<bool> triangular_solve(PatternContext& ctx, ir::Node& n) {
  ir::Value* rhs = PatternContext::tensor_arg(n, "self");
  ir::Value* a = PatternContext::tensor_arg(n, "A");
  const auto upper = bool_value(n, "upper");
  const auto transpose = bool_value(n, "transpose");
  const auto unit = bool_value(n, "unitriangular");
  if (!rhs || !a || !upper || !transpose || !unit || n.outputs.size() != 2 || a->type.sizes.size() < 2) return false;
  Nodes b(ctx, n);
  ir::Value* coefficient = a;
  if (*transpose) {
    ir::TensorType t = a->type;
    std::swap(t.sizes[t.sizes.size() - 1], t.sizes[t.sizes.size() - 2]);
    const int64_t rank = static_cast<int64_t>(t.sizes.size());
    coefficient = b.add(OpKind::kTranspose, {{"self", a}, {"dim0", rank - 2}, {"dim1", rank - 1}}, t);
  }
  ir::Value* solution = b.add(
      OpKind::kLinalgSolveTriangular,
      {{"self", coefficient}, {"B", rhs}, {"upper", *upper != *transpose}, {"left", true}, {"unitriangular", *unit}},
      n.outputs[0]->type);
  ir::Value* copy = a;
  if (!same_sizes(a->type.sizes, n.outputs[1]->type.sizes)) {
    const auto sizes = static_sizes(n.outputs[1]->type);
    if (!sizes) return false;
    copy = b.add(OpKind::kExpand, {{"self", a}, {"size", *sizes}}, n.outputs[1]->type);
  }
  ctx.replace_uses(n.outputs[1], b.add(OpKind::kClone, {{"self", copy}}, n.outputs[1]->type));
  return b.done(solution);
}

// The row-major linear offsets of `sizes`' diagonal (offset, d1, d2) in the
// order of torch.diagonal's result (the other dims, then the diagonal).
std::vector<int64_t> diagonal_offsets(const std::vector<int64_t>& sizes, int64_t offset, int64_t d1, int64_t d2) {
  const size_t rank = sizes.size();
  std::vector<int64_t> strides(rank, 1);
  for (size_t i = rank - 1; i > 0; --i) strides[i - 1] = strides[i] * sizes[i];
  const int64_t a = sizes[static_cast<size_t>(d1)], c = sizes[static_cast<size_t>(d2)];
  const int64_t len = std::max<int64_t>(0, offset >= 0 ? std::min(a, c - offset) : std::min(a + offset, c));
  std::vector<int64_t> others;
  for (size_t i = 0; i < rank; ++i)
    if (static_cast<int64_t>(i) != d1 && static_cast<int64_t>(i) != d2) others.push_back(static_cast<int64_t>(i));
  std::vector<int64_t> out, idx(others.size(), 0);
  const int64_t outer = std::accumulate(others.begin(), others.end(), int64_t{1},
                                        [&](int64_t p, int64_t d) { return p * sizes[static_cast<size_t>(d)]; });
  for (int64_t o = 0; o < outer; ++o) {
    int64_t base = 0;
    for (size_t i = 0; i < others.size(); ++i) base += idx[i] * strides[static_cast<size_t>(others[i])];
    for (int64_t k = 0; k < len; ++k) {
      const int64_t i1 = offset >= 0 ? k : k - offset, i2 = offset >= 0 ? k + offset : k;
      out.push_back(base + i1 * strides[static_cast<size_t>(d1)] + i2 * strides[static_cast<size_t>(d2)]);
    }
    for (size_t i = others.size(); i > 0; --i) {  // next index of the other dims
      if (++idx[i - 1] < sizes[static_cast<size_t>(others[i - 1])]) break;
      idx[i - 1] = 0;
    }
  }
  return out;
}

// diagonal_scatter(self, src, offset, dim1, dim2): src written over self's
// diagonal, as index_copy into the flattened tensor at the diagonal's offsets.
Expected<bool> diagonal_scatter(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* src = PatternContext::tensor_arg(n, "src");
  const auto sx = x ? static_sizes(x->type) : std::nullopt;
  const auto ss = src ? static_sizes(src->type) : std::nullopt;
  const auto offset = int_value(n, "offset"), dim1 = int_value(n, "dim1"), dim2 = int_value(n, "dim2");
  if (!sx || !ss || sx->size() < 2 || src->type.dtype != x->type.dtype || !offset || !dim1 || !dim2 || n.outputs.size() != 1)
    return false;
  const int64_t d1 = norm_dim(*dim1, sx->size()), d2 = norm_dim(*dim2, sx->size());
  if (d1 < 0 || d2 < 0 || d1 == d2) return false;
  const std::vector<int64_t> at = diagonal_offsets(*sx, *offset, d1, d2);
  if (static_cast<int64_t>(at.size()) != product(*ss)) return false;
  Nodes b(ctx, n);
  if (at.empty()) return b.done(b.add(OpKind::kClone, {{"self", x}}, x->type));
  ir::Value* flat = b.reshape(x, {product(*sx)});
  ir::Value* put = b.add(OpKind::kIndexCopy, {{"self", flat}, {"dim", int64_t{0}}, {"index", b.constant(index_table(at))},
                                              {"source", b.reshape(src, {product(*ss)})}},
                         flat->type);
  return b.done(b.reshape(put, *sx));
}

// pdist(x [N, M], p): the p-norm of x[i] - x[j] for every i < j, in row order.
Expected<bool> pdist(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n, n.find("input") ? "input" : "self");
  const auto p = number_arg(ctx, n, "p");
  const auto sx = x ? static_sizes(x->type) : std::nullopt;
  if (!x || !p || *p < 0 || !sx || sx->size() != 2) return false;
  const int64_t rows = (*sx)[0], m = (*sx)[1];
  if (rows < 2) {
    Nodes e(ctx, n);
    return e.done(empty_result(e));
  }
  std::vector<int64_t> first, second;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = i + 1; j < rows; ++j) first.push_back(i), second.push_back(j);
  const int64_t pairs = static_cast<int64_t>(first.size());
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  auto pick = [&](const std::vector<int64_t>& idx) {
    return b.add(OpKind::kIndexSelect, {{"self", x}, {"dim", int64_t{0}}, {"index", b.constant(index_table(idx))}},
                 static_type(dt, {pairs, m}));
  };
  ir::Value* d = b.binary(OpKind::kSubTensor, pick(first), pick(second), dt);
  const std::vector<int64_t> last{1};
  return b.done(b.p_norm(d, *p, last, false));
}

// ---- data-dependent positions, static sizes

// put(self, index, source, accumulate): source written (or added) at the flat
// positions `index` of self, negative ones counted from the end.
Expected<bool> put(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* idx = PatternContext::tensor_arg(n, "index");
  ir::Value* src = PatternContext::tensor_arg(n, "source");
  const auto accumulate = bool_value(n, "accumulate");
  const auto sx = x ? static_sizes(x->type) : std::nullopt;
  const auto si = idx ? static_sizes(idx->type) : std::nullopt;
  const auto ss = src ? static_sizes(src->type) : std::nullopt;
  if (!sx || !si || !ss || idx->type.dtype != DType::Int64 || src->type.dtype != x->type.dtype || !accumulate ||
      product(*si) != product(*ss) || n.outputs.size() != 1)
    return false;
  const int64_t total = product(*sx), count = product(*si);
  Nodes b(ctx, n);
  ir::Value* i = b.reshape(idx, {count});
  ir::Value* wrapped = b.add(OpKind::kAddTensor, {{"self", i}, {"other", total}}, i->type);
  i = b.add(OpKind::kWhere, {{"condition", b.compare(OpKind::kLtScalar, i, 0.0)}, {"self", wrapped}, {"other", i}}, i->type);
  ir::Value* flat = b.reshape(x, {total});
  ir::Value* out = b.add(OpKind::kIndexPut,
                         {{"self", flat}, {"indices", std::vector<std::optional<ir::Value*>>{i}},
                          {"values", b.reshape(src, {count})}, {"accumulate", *accumulate}},
                         flat->type);
  return b.done(b.reshape(out, *sx));
}

// masked_scatter(self, mask, source): where the (broadcast) mask holds, the
// source's entries in order: source[cumsum(mask) - 1].
Expected<bool> masked_scatter(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* mask = PatternContext::tensor_arg(n, "mask");
  ir::Value* src = PatternContext::tensor_arg(n, "source");
  const auto sx = x ? static_sizes(x->type) : std::nullopt;
  const auto ss = src ? static_sizes(src->type) : std::nullopt;
  if (!sx || !ss || !mask || mask->type.dtype != DType::Bool || src->type.dtype != x->type.dtype || product(*ss) == 0 ||
      n.outputs.size() != 1 || !broadcast_sizes(mask->type.sizes, x->type.sizes))
    return false;
  const int64_t total = product(*sx);
  Nodes b(ctx, n);
  ir::Value* m = b.add(OpKind::kExpand, {{"self", mask}, {"size", *sx}}, static_type(DType::Bool, *sx));
  m = b.reshape(m, {total});
  ir::Value* counts = b.add(OpKind::kToCopy, {{"self", m}, {"dtype", DType::Int64}}, static_type(DType::Int64, {total}));
  counts = b.add(OpKind::kCumsum, {{"self", counts}, {"dim", int64_t{0}}}, counts->type);
  ir::Value* pos =
      b.unary(OpKind::kClampMin, b.binary(OpKind::kSubTensor, counts, int64_t{1}, DType::Int64), {{"min", int64_t{0}}});
  ir::Value* vals = b.add(OpKind::kIndexSelect, {{"self", b.reshape(src, {product(*ss)})}, {"dim", int64_t{0}}, {"index", pos}},
                          static_type(x->type.dtype, {total}));
  ir::Value* out = b.add(OpKind::kWhere, {{"condition", m}, {"self", vals}, {"other", b.reshape(x, {total})}},
                         static_type(x->type.dtype, {total}));
  return b.done(b.reshape(out, *sx));
}

// ---- the rest

// cumulative_trapezoid(y, x | dx, dim): ATen's cumsum of the pair sums,
// ((y[1:] + y[:-1]) * diff(x)).cumsum(dim) / 2, or (dx / 2 * (y[1:] + y[:-1])).cumsum(dim).
Expected<bool> cumulative_trapezoid(PatternContext& ctx, ir::Node& n) {
  ir::Value* y = floating_operand(n, "y");
  const auto dim = int_value(n, "dim");
  const auto ys = y ? static_sizes(y->type) : std::nullopt;
  if (!y || !dim || !ys) return false;
  const int64_t d = norm_dim(*dim, ys->size());
  if (d < 0 || (*ys)[static_cast<size_t>(d)] < 2) return false;
  const int64_t len = (*ys)[static_cast<size_t>(d)];
  const DType dt = y->type.dtype;
  Nodes b(ctx, n);
  ir::Value* pairs = b.binary(OpKind::kAddTensor, b.slice(y, d, 1, len), b.slice(y, d, 0, len - 1), dt);
  ir::Value* area;
  if (n.op == OpKind::kCumulativeTrapezoidDx) {
    const auto dx = number_or(ctx, n, "dx", 1.0);
    if (!dx) return false;
    area = b.binary(OpKind::kMulTensor, pairs, *dx / 2, dt);
  } else {
    ir::Value* x = PatternContext::tensor_arg(n, "x");
    const auto xs = x ? static_sizes(x->type) : std::nullopt;
    if (!xs || x->type.dtype != dt) return false;
    ir::Value* xv = x;
    if (xs->size() == 1) {
      if ((*xs)[0] != len) return false;
      std::vector<int64_t> shape(ys->size(), 1);
      shape[static_cast<size_t>(d)] = len;
      xv = b.reshape(x, shape);
    } else if (xs->size() != ys->size() || (*xs)[static_cast<size_t>(d)] != len) {
      return false;
    }
    ir::Value* dx = b.binary(OpKind::kSubTensor, b.slice(xv, d, 1, len), b.slice(xv, d, 0, len - 1), dt);
    area = dx ? b.binary(OpKind::kMulTensor, pairs, dx, dt) : nullptr;
  }
  if (!area || !same_sizes(area->type.sizes, b.out().sizes)) return false;
  ir::Value* s = b.add(OpKind::kCumsum, {{"self", area}, {"dim", d}}, area->type);
  return b.done(n.op == OpKind::kCumulativeTrapezoidDx ? s : b.binary(OpKind::kDivTensor, s, 2.0, dt));
}

// multi_margin_loss(x [N, C], [C] or a number, target, p, margin, weight, reduction):
// sum over j != y of max(0, margin - x[y] + x[j])^p (times weight[y]) / C.
Expected<bool> multi_margin_loss(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  ir::Value* t = PatternContext::tensor_arg(n, "target");
  ir::Value* w = PatternContext::tensor_arg(n, "weight");
  const auto p = number_arg(ctx, n, "p");
  const auto margin = number_arg(ctx, n, "margin");
  const auto reduction = int_value(n, "reduction");
  const auto sx = x ? static_sizes(x->type) : std::nullopt;
  const auto st = t ? static_sizes(t->type) : std::nullopt;
  if (!x || !sx || sx->size() > 2 || !st || t->type.dtype != DType::Int64 || !p || (*p != 1 && *p != 2) ||
      !margin || !reduction || (w && w->type.dtype != x->type.dtype))
    return false;
  const int64_t rows = sx->size() == 2 ? (*sx)[0] : 1, classes = sx->empty() ? 1 : sx->back();
  if (product(*st) != rows) return false;
  const DType dt = x->type.dtype;
  Nodes b(ctx, n);
  ir::Value* xm = b.reshape(x, {rows, classes});
  ir::Value* y = b.reshape(t, {rows, 1});
  ir::Value* xy = b.add(OpKind::kGather, {{"self", xm}, {"dim", int64_t{1}}, {"index", y}}, static_type(dt, {rows, 1}));
  ir::Value* z = b.binary(OpKind::kAddTensor, b.binary(OpKind::kRsubScalar, xy, *margin, dt), xm, dt);
  z = b.unary(OpKind::kClampMin, z, {{"min", 0.0}});
  if (*p == 2) z = b.binary(OpKind::kMulTensor, z, z, dt);
  if (w) {
    ir::Value* wy = b.add(OpKind::kIndexSelect, {{"self", w}, {"dim", int64_t{0}}, {"index", b.reshape(t, {rows})}},
                          static_type(dt, {rows}));
    z = b.binary(OpKind::kMulTensor, z, b.reshape(wy, {rows, 1}), dt);
  }
  std::vector<int64_t> cls(static_cast<size_t>(classes));
  std::iota(cls.begin(), cls.end(), 0);
  ir::Value* own = b.add(OpKind::kEqTensor, {{"self", b.reshape(b.constant(index_table(cls)), {1, classes})}, {"other", y}},
                         static_type(DType::Bool, {rows, classes}));
  z = b.fill(z, own, 0.0);
  ir::Value* s = b.add(OpKind::kSumDimIntList, {{"self", z}, {"dim", std::vector<int64_t>{1}}, {"keepdim", false}},
                       static_type(dt, {rows}));
  s = b.binary(OpKind::kDivTensor, s, static_cast<double>(classes), dt);
  if (*reduction == 0) {
    const auto so = static_sizes(b.out());
    if (!so || product(*so) != rows) return false;
    return b.done(b.reshape(s, *so));
  }
  if (*reduction != 1 && *reduction != 2) return false;
  return b.done(b.add(*reduction == 1 ? OpKind::kMean : OpKind::kSum, {{"self", s}}, b.out()));
}

// The indices of _unsafe_masked_index*, clamped into self's dims: where the
// mask is false an index may point anywhere, and nothing must read there.
std::optional<std::vector<std::optional<ir::Value*>>> clamped_indices(Nodes& b, const ir::Node& n,
                                                                        const std::vector<int64_t>& sizes) {
  const ir::Arg* arg = n.find("indices");
  // A list without None is read as a plain list of tensors.
  std::vector<std::optional<ir::Value*>> given;
  if (const auto* l = arg ? std::get_if<std::vector<std::optional<ir::Value*>>>(arg) : nullptr) given = *l;
  if (const auto* l = arg ? std::get_if<std::vector<ir::Value*>>(arg) : nullptr) given.assign(l->begin(), l->end());
  const auto* list = &given;
  if (given.empty() || given.size() > sizes.size()) return std::nullopt;
  std::vector<std::optional<ir::Value*>> out;
  for (size_t d = 0; d < list->size(); ++d) {
    const std::optional<ir::Value*>& i = (*list)[d];
    if (!i || !*i) {
      out.push_back(std::nullopt);
      continue;
    }
    if ((*i)->type.dtype != DType::Int64 && (*i)->type.dtype != DType::Int32) return std::nullopt;
    const int64_t size = sizes[d];
    out.push_back(b.add(OpKind::kClamp, {{"self", *i}, {"min", -size}, {"max", size - 1}}, (*i)->type));
  }
  return out;
}

// _unsafe_masked_index(self, mask, indices, fill) = where(mask, self[clamped indices], fill).
Expected<bool> unsafe_masked_index(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* mask = PatternContext::tensor_arg(n, "mask");
  const auto fill = ctx.number(n, "fill");
  const auto sx = x ? static_sizes(x->type) : std::nullopt;
  if (!sx || !mask || mask->type.dtype != DType::Bool || !fill || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  if (!same_sizes(mask->type.sizes, b.out().sizes)) return false;
  auto indices = clamped_indices(b, n, *sx);
  if (!indices) return false;
  ir::Value* gathered = b.add(OpKind::kIndexTensor, {{"self", x}, {"indices", *indices}}, b.out());
  return b.done(b.fill(gathered, b.compare(OpKind::kEqScalar, mask, 0.0), *fill));
}

// _unsafe_masked_index_put_accumulate(self, mask, indices, values) =
// index_put(self, clamped indices, where(mask, values, 0), accumulate=True).
Expected<bool> unsafe_masked_index_put_accumulate(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* mask = PatternContext::tensor_arg(n, "mask");
  ir::Value* values = PatternContext::tensor_arg(n, "values");
  const auto sx = x ? static_sizes(x->type) : std::nullopt;
  if (!sx || !mask || !values || mask->type.dtype != DType::Bool || values->type.dtype != x->type.dtype ||
      n.outputs.size() != 1 || !same_sizes(mask->type.sizes, values->type.sizes))
    return false;
  Nodes b(ctx, n);
  auto indices = clamped_indices(b, n, *sx);
  if (!indices) return false;
  ir::Value* kept = b.fill(values, b.compare(OpKind::kEqScalar, mask, 0.0), 0.0);
  return b.done(b.add(OpKind::kIndexPut,
                      {{"self", x}, {"indices", *indices}, {"values", kept}, {"accumulate", true}}, b.out()));
}

// _chunk_cat(tensors, dim, num_chunks): each tensor zero-padded along dim to
// num_chunks equal chunks and viewed [pre..., num_chunks, chunk * post...];
// all of them side by side along dim + 1.
Expected<bool> chunk_cat(PatternContext& ctx, ir::Node& n) {
  const ir::Arg* arg = n.find("tensors");
  const auto* list = arg ? std::get_if<std::vector<ir::Value*>>(arg) : nullptr;
  const auto dim_arg = int_value(n, "dim");
  const auto chunks = int_value(n, "num_chunks");
  if (!list || list->empty() || !dim_arg || !chunks || *chunks <= 0 || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  const auto first = static_sizes((*list)[0]->type);
  if (!first || first->empty()) return false;
  const int64_t rank = static_cast<int64_t>(first->size());
  const int64_t dim = *dim_arg < 0 ? *dim_arg + rank : *dim_arg;
  if (dim < 0 || dim >= rank) return false;
  std::vector<ir::Value*> parts;
  int64_t width = 0;
  for (ir::Value* t : *list) {
    const auto st = static_sizes(t->type);
    if (!st || static_cast<int64_t>(st->size()) != rank || t->type.dtype != b.out().dtype) return false;
    const int64_t size = (*st)[static_cast<size_t>(dim)], chunk = (size + *chunks - 1) / *chunks;
    ir::Value* v = t;
    if (chunk * *chunks != size) {
      std::vector<int64_t> pad(static_cast<size_t>(2 * (rank - dim)), 0);
      pad[pad.size() - 1] = chunk * *chunks - size;
      std::vector<int64_t> padded = *st;
      padded[static_cast<size_t>(dim)] = chunk * *chunks;
      v = b.add(OpKind::kConstantPadNd, {{"self", v}, {"pad", pad}, {"value", 0.0}},
                static_type(t->type.dtype, padded));
    }
    int64_t post = 1;
    for (int64_t d = dim + 1; d < rank; ++d) post *= (*st)[static_cast<size_t>(d)];
    std::vector<int64_t> shape(st->begin(), st->begin() + dim);
    shape.push_back(*chunks);
    shape.push_back(chunk * post);
    width += chunk * post;
    parts.push_back(b.reshape(v, shape));
  }
  const auto so = static_sizes(b.out());
  if (!so || so->size() != static_cast<size_t>(dim + 2) || so->back() != width) return false;
  return b.done(b.add(OpKind::kCat, {{"tensors", parts}, {"dim", dim + 1}}, b.out()));
}

// _softmax_backward_data(grad_output, output, dim, input_dtype) =
// output * (grad_output - sum(grad_output * output, dim, keepdim)).
Expected<bool> softmax_backward_data(PatternContext& ctx, ir::Node& n) {
  ir::Value* g = PatternContext::tensor_arg(n, "grad_output");
  ir::Value* y = PatternContext::tensor_arg(n, "output");
  const auto dim = int_value(n, "dim");
  if (!g || !y || !dim || n.outputs.size() != 1 || g->type.dtype != y->type.dtype ||
      g->type.dtype != n.outputs[0]->type.dtype || !same_sizes(g->type.sizes, y->type.sizes) ||
      !is_floating(g->type.dtype))
    return false;
  Nodes b(ctx, n);
  const DType dt = g->type.dtype;
  ir::Value* gy = b.binary(OpKind::kMulTensor, g, y, dt);
  ir::TensorType kept = g->type;
  if (!kept.sizes.empty()) {
    const int64_t d = *dim < 0 ? *dim + static_cast<int64_t>(kept.sizes.size()) : *dim;
    if (d < 0 || d >= static_cast<int64_t>(kept.sizes.size())) return false;
    kept.sizes[static_cast<size_t>(d)] = ir::Dim::of(1);
  }
  ir::Value* s = b.add(OpKind::kSumDimIntList,
                       {{"self", gy}, {"dim", std::vector<int64_t>{*dim}}, {"keepdim", true}}, kept);
  ir::Value* diff = b.binary(OpKind::kSubTensor, g, s, dt);
  return b.done(b.binary(OpKind::kMulTensor, y, diff, dt));
}

// _trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim): each
// input with size-1 dims inserted at its expand dims (in increasing order),
// the three multiplied (broadcasting) and summed over sumdim.
Expected<bool> trilinear(PatternContext& ctx, ir::Node& n) {
  ir::Value* in[3] = {PatternContext::tensor_arg(n, "i1"), PatternContext::tensor_arg(n, "i2"),
                      PatternContext::tensor_arg(n, "i3")};
  const char* expand_names[3] = {"expand1", "expand2", "expand3"};
  const auto sumdim = int_list(n, "sumdim");
  if (!sumdim || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  const DType dt = b.out().dtype;
  ir::Value* product = nullptr;
  for (int k = 0; k < 3; ++k) {
    auto dims = int_list(n, expand_names[k]);
    if (!in[k] || !dims || in[k]->type.dtype != dt || !static_sizes(in[k]->type)) return false;
    std::sort(dims->begin(), dims->end());
    ir::Value* v = b.unsqueezed(in[k], *dims);
    product = product ? b.binary(OpKind::kMulTensor, product, v, dt) : v;
    if (!product) return false;
  }
  if (sumdim->empty()) return b.done(product);
  return b.done(b.add(OpKind::kSumDimIntList, {{"self", product}, {"dim", *sumdim}, {"keepdim", false}}, b.out()));
}

constexpr Decomposition kTensorDecompositions[] = {
    {OpKind::kTrilinear, &trilinear},
    {OpKind::kUnsafeMaskedIndex, &unsafe_masked_index},
    {OpKind::kUnsafeMaskedIndexPutAccumulate, &unsafe_masked_index_put_accumulate},
    {OpKind::kChunkCat, &chunk_cat},
    {OpKind::kSoftmaxBackwardData, &softmax_backward_data},
    {OpKind::kWhereScalarOther, &where_scalar},
    {OpKind::kWhereScalarSelf, &where_scalar},
    {OpKind::kWhereScalar, &where_scalar},
    {OpKind::kMinOther, &min_max_other},
    {OpKind::kMaxOther, &min_max_other},
    {OpKind::kFillTensor, &fill_tensor},
    {OpKind::kPowScalar, &pow_scalar},
    {OpKind::kEmptyPermuted, &empty_permuted},
    {OpKind::kMaskedFillScalar, &masked_fill},
    {OpKind::kMaskedFillTensor, &masked_fill},
    {OpKind::kFullLike, &full_like},
    {OpKind::kFillScalar, &fill_scalar},
    {OpKind::kZero, &fill_scalar},
    {OpKind::kBitwiseNot, &bitwise_not},
    {OpKind::kMinimum, &integer_min_max},
    {OpKind::kMaximum, &integer_min_max},
    {OpKind::kAbs, &integer_abs},
    {OpKind::kTensordot, &tensordot},
    {OpKind::kKron, &kron},
    {OpKind::kBilinear, &bilinear},
    {OpKind::kWeightNorm, &weight_norm},
    {OpKind::kBlockDiag, &block_diag},
    {OpKind::kCombinations, &combinations},
    {OpKind::kTriangularSolve, &triangular_solve},
    {OpKind::kDiagonalScatter, &diagonal_scatter},
    {OpKind::kPdist, &pdist},
    {OpKind::kPdistForward, &pdist},
    {OpKind::kPut, &put},
    {OpKind::kMaskedScatter, &masked_scatter},
    {OpKind::kCumulativeTrapezoidX, &cumulative_trapezoid},
    {OpKind::kCumulativeTrapezoidDx, &cumulative_trapezoid},
    {OpKind::kMultiMarginLoss, &multi_margin_loss},
};

}  // namespace

std::span<const Decomposition> tensor_decompositions() { return kTensorDecompositions; }

}  // namespace kiln::lowering
