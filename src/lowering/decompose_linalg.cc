// Linear-algebra composites of torch, in core ops: linalg_vecdot, addr,
// addmv, addbmm (scaled sums of products), baddbmm, cross, linalg_cross,
// renorm, linalg_multi_dot (mm left to right), linalg_matrix_power of n >= 0
// (repeated squaring), linalg_vander (a running product), the Frobenius
// linalg_matrix_norm (a vector 2-norm over its dims).
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
  return b.done(
      b.add(OpKind::kSumDimIntList, {{"self", p}, {"dim", std::vector<int64_t>{d}}, {"keepdim", false}}, b.out()));
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
  const auto beta = number_arg(ctx, n, "beta");
  const auto alpha = number_arg(ctx, n, "alpha");
  if (!self || n.outputs.size() != 1 || !is_floating(self->type.dtype) ||
      n.outputs[0]->type.dtype != self->type.dtype || !beta || !alpha || !static_sizes(n.outputs[0]->type))
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
    const auto given = int_value(n, "dim");
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
  ir::Value* factor = b.binary(OpKind::kMulTensor,
                               b.unary(OpKind::kReciprocal, b.binary(OpKind::kAddTensor, nv, 1e-7, dt)), *maxnorm, dt);
  factor = b.add(OpKind::kWhere,
                 {{"condition", b.compare(OpKind::kGtScalar, nv, *maxnorm)},
                  {"self", factor},
                  {"other", b.add(OpKind::kFullLike, {{"self", nv}, {"fill_value", 1.0}}, nv->type)}},
                 nv->type);
  return b.done(b.binary(OpKind::kMulTensor, x, factor, dt));
}

// linalg_multi_dot(tensors): mm left to right, a 1-D first operand as a row
// and a 1-D last one as a column, their unit dims dropped from the result.
Expected<bool> multi_dot(PatternContext& ctx, ir::Node& n) {
  const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("tensors"));
  const auto out = n.outputs.size() == 1 ? static_sizes(n.outputs[0]->type) : std::nullopt;
  if (!ins || ins->size() < 2 || !out) return false;
  const DType dt = n.outputs[0]->type.dtype;
  for (size_t i = 0; i < ins->size(); ++i) {
    const size_t r = (*ins)[i]->type.sizes.size();
    const bool end = i == 0 || i + 1 == ins->size();
    if ((*ins)[i]->type.dtype != dt || !is_floating(dt) || !(r == 2 || (end && r == 1))) return false;
  }
  Nodes b(ctx, n);
  ir::Value* acc = (*ins)[0]->type.sizes.size() == 1 ? b.unsqueezed((*ins)[0], {0}) : (*ins)[0];
  for (size_t i = 1; i < ins->size(); ++i) {
    ir::Value* m = (*ins)[i]->type.sizes.size() == 1 ? b.unsqueezed((*ins)[i], {1}) : (*ins)[i];
    acc = b.add(OpKind::kMm, {{"self", acc}, {"mat2", m}}, {dt, {acc->type.sizes[0], m->type.sizes[1]}});
  }
  if (same_sizes(acc->type.sizes, b.out().sizes)) return b.done(acc);
  return b.done(b.add(OpKind::kReshape, {{"self", acc}, {"shape", *out}}, b.out()));
}

// linalg_matrix_power(A, n) for n >= 0: the identity (n = 0), else products
// by repeated squaring.
Expected<bool> matrix_power(PatternContext& ctx, ir::Node& n) {
  ir::Value* a = PatternContext::tensor_arg(n, "self");
  const auto k = int_value(n, "n");
  const auto sizes = a ? static_sizes(a->type) : std::nullopt;
  if (!a || !k || *k < 0 || !sizes || sizes->size() < 2 || n.outputs.size() != 1 || !is_floating(a->type.dtype) ||
      n.outputs[0]->type.dtype != a->type.dtype)
    return false;
  const int64_t m = sizes->back();
  if ((*sizes)[sizes->size() - 2] != m) return false;
  Nodes b(ctx, n);
  if (*k == 0) {
    Tensor diag = Tensor::zeros(DType::Bool, {m, m});
    for (int64_t i = 0; i < m; ++i) diag.data<bool>()[i * m + i] = true;
    const DType dt = a->type.dtype;
    ir::Value* eye = b.add(OpKind::kWhere,
                           {{"condition", b.constant(diag)},
                            {"self", b.constant(Tensor::scalar(dt, 1.0))},
                            {"other", b.constant(Tensor::scalar(dt, 0.0))}},
                           static_type(dt, {m, m}));
    return b.done(b.add(OpKind::kExpand, {{"self", eye}, {"size", *sizes}}, b.out()));
  }
  auto mul = [&](ir::Value* x, ir::Value* y) { return b.add(OpKind::kMatmul, {{"self", x}, {"other", y}}, a->type); };
  ir::Value* result = nullptr;
  ir::Value* base = a;
  for (int64_t e = *k; e > 0; e >>= 1) {
    if (e & 1) result = result ? mul(result, base) : base;
    if (e > 1) base = mul(base, base);
  }
  if (result == a) return b.done(b.add(OpKind::kClone, {{"self", a}}, b.out()));
  return b.done(result);
}

// linalg_vander(x, N): [.., n] -> [.., n, N], column j holding x^j: ones,
// then the running product of x (floating and int64 tensors).
Expected<bool> vander(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "x");
  auto sizes = x ? static_sizes(x->type) : std::nullopt;
  const auto out = n.outputs.size() == 1 ? static_sizes(n.outputs[0]->type) : std::nullopt;
  if (sizes && sizes->empty()) sizes = std::vector<int64_t>{1};  // a 0-d x is one entry
  if (!x || !sizes || !out || out->size() != sizes->size() + 1) return false;
  const DType dt = x->type.dtype;
  if (n.outputs[0]->type.dtype != dt || !(is_floating(dt) || dt == DType::Int64)) return false;
  const int64_t cols = out->back();
  if (cols < 2) return false;
  Nodes b(ctx, n);
  if (x->type.sizes.empty()) x = b.reshape(x, {1});
  std::vector<int64_t> col = *sizes;
  col.push_back(1);
  std::vector<int64_t> rest = *sizes;
  rest.push_back(cols - 1);
  const int64_t last = static_cast<int64_t>(sizes->size());
  ir::Value* ones = b.add(OpKind::kFull, {{"size", col}, {"fill_value", 1.0}, {"dtype", dt}}, static_type(dt, col));
  ir::Value* e = b.add(OpKind::kExpand, {{"self", b.unsqueezed(x, {last})}, {"size", rest}}, static_type(dt, rest));
  ir::Value* powers = b.add(OpKind::kCumprod, {{"self", e}, {"dim", last}}, static_type(dt, rest));
  return b.done(b.add(OpKind::kCat, {{"tensors", std::vector<ir::Value*>{ones, powers}}, {"dim", last}}, b.out()));
}

// linalg_matrix_norm(A, "fro", dims, keepdim) = the 2-norm of the entries over dims.
Expected<bool> matrix_norm_fro(PatternContext& ctx, ir::Node& n) {
  ir::Value* a = PatternContext::tensor_arg(n, "self");
  const auto* ord = std::get_if<std::string>(n.find("ord"));
  const auto dims = int_list(n, "dim", std::vector<int64_t>{-2, -1});
  const auto keepdim = bool_value(n, "keepdim", false);
  if (!a || (ord && *ord != "fro") || !dims || dims->size() != 2 || !keepdim || !absent(n, "dtype") ||
      n.outputs.size() != 1 || !is_floating(a->type.dtype) || n.outputs[0]->type.dtype != a->type.dtype)
    return false;
  const auto rd = reduced_dims(*dims, a->type.sizes.size());
  if (!rd || rd->size() != 2) return false;
  Nodes b(ctx, n);
  return b.done(b.p_norm(a, 2.0, *rd, *keepdim));
}

constexpr Decomposition kLinalgDecompositions[] = {
    {OpKind::kLinalgVecdot, &vecdot},      {OpKind::kAddr, &add_product},
    {OpKind::kAddmv, &add_product},        {OpKind::kAddbmm, &add_product},
    {OpKind::kBaddbmm, &baddbmm},          {OpKind::kCross, &cross},
    {OpKind::kLinalgCross, &cross},        {OpKind::kRenorm, &renorm},
    {OpKind::kLinalgMultiDot, &multi_dot}, {OpKind::kLinalgMatrixPower, &matrix_power},
    {OpKind::kLinalgVander, &vander},      {OpKind::kLinalgMatrixNormStrOrd, &matrix_norm_fro},
};

}  // namespace

std::span<const Decomposition> linalg_decompositions() { return kLinalgDecompositions; }

}  // namespace kiln::lowering
