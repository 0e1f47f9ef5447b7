// Arithmetic composites of torch, in core ops: count_nonzero, nansum,
// nanmean, max() and min() of every element (amax, amin), prelu, isclose,
// isreal, float_power (in float64), trapezoid and trapz, subtract, sgn, angle,
// sum_to_size, rrelu outside training, _safe_softmax, gradient along static
// dims (index_selects of tap tables, weighted).
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
  const auto dims = node_reduced_dims(n, x->type.sizes.size());
  const auto keepdim = bool_value(n, "keepdim");
  if (!dims || !keepdim) return false;
  Nodes b(ctx, n);
  ir::Value* nan = b.add(OpKind::kIsnan, {{"self", x}}, {DType::Bool, x->type.sizes});
  ir::Value* sum =
      b.add(OpKind::kSumDimIntList, {{"self", b.fill(x, nan, 0.0)}, {"dim", *dims}, {"keepdim", *keepdim}}, b.out());
  if (n.op == OpKind::kNansum) return b.done(sum);
  ir::Value* kept = b.add(OpKind::kLogicalNot, {{"self", nan}}, nan->type);
  ir::TensorType count = b.out();
  count.dtype = DType::Int64;
  ir::Value* c = b.add(OpKind::kSumDimIntList, {{"self", kept}, {"dim", *dims}, {"keepdim", *keepdim}}, count);
  return b.done(b.add(OpKind::kDivTensor, {{"self", sum}, {"other", c}}, b.out()));
}

// max() / min() of every element: amax / amin over every dim (NaN if any is).
Expected<bool> extreme_of_all(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || n.outputs[0]->type.dtype != x->type.dtype) return false;
  std::vector<int64_t> dims(x->type.sizes.size());
  std::iota(dims.begin(), dims.end(), int64_t{0});
  Nodes b(ctx, n);
  return b.done(b.add(n.op == OpKind::kMax ? OpKind::kAmax : OpKind::kAmin,
                      {{"self", x}, {"dim", dims}, {"keepdim", false}}, b.out()));
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
  return b.done(b.add(OpKind::kWhere,
                      {{"condition", b.compare(OpKind::kGtScalar, x, 0.0)}, {"self", x}, {"other", scaled}}, x->type));
}

// isclose(a, b) = a == b, or (equal_nan) both NaN, or |a - b| finite and <= atol + |rtol b|.
Expected<bool> isclose(PatternContext& ctx, ir::Node& n) {
  ir::Value* a = PatternContext::tensor_arg(n, "self");
  ir::Value* o = PatternContext::tensor_arg(n, "other");
  const auto rtol = number_arg(ctx, n, "rtol");
  const auto atol = number_arg(ctx, n, "atol");
  const auto equal_nan = bool_value(n, "equal_nan");
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
  ir::Value* allowed =
      b.binary(OpKind::kAddTensor, b.unary(OpKind::kAbs, b.binary(OpKind::kMulTensor, o, *rtol, dt)), *atol, dt);
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

// trapezoid(y, dx, dim) = (sum(y, dim) - (y[0] + y[-1]) / 2) dx.
Expected<bool> trapezoid(PatternContext& ctx, ir::Node& n) {
  ir::Value* y = PatternContext::tensor_arg(n, "y");
  const auto dx = number_arg(ctx, n, "dx");
  const auto dim = int_value(n, "dim", -1);
  if (!y || n.outputs.size() != 1 || !is_floating(y->type.dtype) || n.outputs[0]->type.dtype != y->type.dtype || !dx ||
      !dim)
    return false;
  const int64_t d = norm_dim(*dim, y->type.sizes.size());
  if (d < 0 || !y->type.sizes[static_cast<size_t>(d)].is_static() || y->type.sizes[static_cast<size_t>(d)].value < 1)
    return false;
  const int64_t len = y->type.sizes[static_cast<size_t>(d)].value;
  Nodes b(ctx, n);
  const DType dt = y->type.dtype;
  const ir::TensorType row = reduced(y->type, {d}, false);
  ir::Value* s =
      b.add(OpKind::kSumDimIntList, {{"self", y}, {"dim", std::vector<int64_t>{d}}, {"keepdim", false}}, row);
  ir::Value* first = b.add(OpKind::kSelectInt, {{"self", y}, {"dim", d}, {"index", int64_t{0}}}, row);
  ir::Value* last = b.add(OpKind::kSelectInt, {{"self", y}, {"dim", d}, {"index", len - 1}}, row);
  ir::Value* ends = b.binary(OpKind::kMulTensor, b.binary(OpKind::kAddTensor, first, last, dt), 0.5, dt);
  return b.done(b.binary(OpKind::kMulTensor, b.binary(OpKind::kSubTensor, s, ends, dt), *dx, dt));
}

// subtract.Tensor is sub.Tensor spelled out.
Expected<bool> subtract(PatternContext& ctx, ir::Node& n) {
  if (!PatternContext::tensor_arg(n, "self") || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  return b.done(b.add(OpKind::kSubTensor, n.args, b.out()));
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
  ir::Value* s =
      b.add(OpKind::kSumDimIntList, {{"self", x}, {"dim", dims}, {"keepdim", true}}, reduced(x->type, dims, true));
  return b.done(b.add(OpKind::kView, {{"self", s}, {"size", *size}}, b.out()));
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
    return b.add(OpKind::kSliceTensor, {{"self", v}, {"dim", axis}, {"start", start}, {"end", end}},
                 static_type(dt, ps));
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

// rrelu outside training is leaky_relu with the mean slope (lower + upper) / 2.
Expected<bool> rrelu(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  const auto lower = number_arg(ctx, n, "lower");
  const auto upper = number_arg(ctx, n, "upper");
  const auto training = bool_value(n, "training", false);
  if (!x || !lower || !upper || !training || *training) return false;
  Nodes b(ctx, n);
  return b.done(b.unary(OpKind::kLeakyRelu, x, {{"negative_slope", (*lower + *upper) / 2}}));
}

// gradient.scalarint(x, spacing, dim, edge_order) along dims of static size:
// per dim, sum over three taps of w_t[j] * x[i_t[j]] with tables computed
// here: (x[j+1] - x[j-1]) / 2h inside, and at the edges (x[1] - x[0]) / h
// (edge_order 1) or (-3/2 x[0] + 2 x[1] - 1/2 x[2]) / h (edge_order 2),
// mirrored at the end. One result per dim (every dim when dim is None).
Expected<bool> gradient(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto order = int_value(n, "edge_order", 1);
  const auto sizes = x ? static_sizes(x->type) : std::nullopt;
  if (!x || !sizes || sizes->empty() || !is_floating(x->type.dtype) || !order || (*order != 1 && *order != 2))
    return false;
  double h = 1.0;
  if (!absent(n, "spacing")) {
    const auto sp = ctx.number(n, "spacing");
    if (!sp) return false;
    h = *sp;
  }
  std::vector<int64_t> dims;
  if (!absent(n, "dim")) {
    const auto d = int_value(n, "dim");
    const int64_t nd = d ? norm_dim(*d, sizes->size()) : -1;
    if (nd < 0) return false;
    dims.push_back(nd);
  } else {
    for (size_t d = 0; d < sizes->size(); ++d) dims.push_back(static_cast<int64_t>(d));
  }
  if (n.outputs.size() != dims.size()) return false;
  for (size_t k = 0; k < dims.size(); ++k) {
    const int64_t len = (*sizes)[static_cast<size_t>(dims[k])];
    if (len < *order + 1 || n.outputs[k]->type.dtype != x->type.dtype) return false;
  }
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  std::vector<ir::Value*> results;
  for (int64_t d : dims) {
    const int64_t len = (*sizes)[static_cast<size_t>(d)];
    std::vector<std::vector<int64_t>> at(3, std::vector<int64_t>(static_cast<size_t>(len)));
    std::vector<std::vector<double>> w(3, std::vector<double>(static_cast<size_t>(len), 0.0));
    for (int64_t j = 0; j < len; ++j) {
      const auto u = static_cast<size_t>(j);
      if (j == 0) {
        at[0][u] = 0, at[1][u] = 1, at[2][u] = 2 < len ? 2 : 1;
        if (*order == 1)
          w[0][u] = -1 / h, w[1][u] = 1 / h;
        else
          w[0][u] = -1.5 / h, w[1][u] = 2 / h, w[2][u] = -0.5 / h;
      } else if (j == len - 1) {
        at[0][u] = len - 1, at[1][u] = len - 2, at[2][u] = len >= 3 ? len - 3 : len - 2;
        if (*order == 1)
          w[0][u] = 1 / h, w[1][u] = -1 / h;
        else
          w[0][u] = 1.5 / h, w[1][u] = -2 / h, w[2][u] = 0.5 / h;
      } else {
        at[0][u] = j + 1, at[1][u] = j - 1, at[2][u] = j;
        w[0][u] = 0.5 / h, w[1][u] = -0.5 / h;
      }
    }
    // A weight table [len, 1, ...] that broadcasts along d.
    Shape wshape{len};
    for (size_t t = static_cast<size_t>(d) + 1; t < sizes->size(); ++t) wshape.push_back(1);
    ir::Value* sum = nullptr;
    for (int t = 0; t < (*order == 2 ? 3 : 2); ++t) {
      Tensor wt = Tensor::zeros(DType::Float64, wshape);
      std::copy(w[t].begin(), w[t].end(), wt.data<double>());
      ir::Value* taps =
          b.add(OpKind::kIndexSelect, {{"self", x}, {"dim", d}, {"index", b.constant(index_table(at[t]))}}, x->type);
      ir::Value* term = b.binary(OpKind::kMulTensor, taps, b.constant(wt.to(dt)), dt);
      sum = sum ? b.binary(OpKind::kAddTensor, sum, term, dt) : term;
    }
    results.push_back(sum);
  }
  for (size_t k = 1; k < results.size(); ++k) ctx.replace_uses(n.outputs[k], results[k]);
  return b.done(results[0]);
}

constexpr Decomposition kArithmeticDecompositions[] = {
    {OpKind::kCountNonzero, &count_nonzero},
    {OpKind::kCountNonzeroDims, &count_nonzero},
    {OpKind::kNansum, &nan_reduction},
    {OpKind::kNanmean, &nan_reduction},
    {OpKind::kMax, &extreme_of_all},
    {OpKind::kMin, &extreme_of_all},
    {OpKind::kPrelu, &prelu},
    {OpKind::kIsclose, &isclose},
    {OpKind::kIsreal, &isreal},
    {OpKind::kFloatPowerTensorTensor, &float_power},
    {OpKind::kFloatPowerTensorScalar, &float_power},
    {OpKind::kTrapezoidDx, &trapezoid},
    {OpKind::kTrapzDx, &trapezoid},
    {OpKind::kTrapezoidX, &trapezoid_x},
    {OpKind::kTrapzX, &trapezoid_x},
    {OpKind::kSubtractTensor, &subtract},
    {OpKind::kSafeSoftmax, &safe_softmax},
    {OpKind::kSgn, &sign_like},
    {OpKind::kAngle, &sign_like},
    {OpKind::kSumToSize, &sum_to_size},
    {OpKind::kRrelu, &rrelu},
    {OpKind::kGradientScalarInt, &gradient},
};

}  // namespace

std::span<const Decomposition> arithmetic_decompositions() { return kArithmeticDecompositions; }

}  // namespace kiln::lowering
