// Composite ops the default (training) dialect of torch.export keeps, written
// in core ops the kernels and engines take: one small function per op, in a
// table. A node whose arguments a decomposition does not cover is left as it
// is (partitioning then names it).
//
//   square(x)                      -> x * x
//   pad(x, pad, "constant", v)     -> constant_pad_nd(x, pad, v)
//   logsumexp(x, dims, keepdim)    -> log(sum(exp(x - m), dims, keepdim)) + m,
//                                     m = amax(x, dims, keepdim=True), 0 where |m| is inf
//   linalg_vector_norm(x, ord, dims, keepdim)
//                                  -> sqrt(sum(x * x)) (ord 2), sum(|x|) (1),
//                                     amax(|x|) (inf), amin(|x|) (-inf),
//                                     sum(|x|^p)^(1/p) (other p != 0),
//                                     count of x != 0 (0); a dtype converts x first
//   linalg_norm(x, ord, dims) of a vector form
//                                  -> linalg_vector_norm(x, ord or 2, dims)
//   addmm(s, a, b, beta, alpha)    -> beta * s + alpha * mm(a, b), where beta != 1
//                                     or s is not a row of the output's width
//                                     (else the GEMM's bias)
//   matmul with a 1-D operand      -> sum(a * b) (both 1-D), or the vector
//                                     as a row [1, K] (or column [K, 1]),
//                                     the product, and that dim squeezed
//
// and, for floating tensors of one dtype (anything else is left as it is),
// the activations and arithmetic of torch.nn.functional and torch as their
// formulas in ATen: addcmul, addcdiv, lerp, logit, softplus, mish, celu and
// selu (as elu), relu6 (hardtanh), hardshrink, softshrink, threshold,
// log_sigmoid, sinc, xlogy, xlog1py, deg2rad, rad2deg, frac, positive, glu,
// isposinf, isneginf, isfinite, nan_to_num, floor_divide (any one dtype),
// divide (div), ldexp (x * exp2(e)), trace (sum of the diagonal),
// view_as, reshape_as, ravel of static sizes; outer, and dot, vdot, inner
// and mv of vectors (inner of higher ranks through matmul); movedim,
// fliplr, flipud, tile, broadcast_tensors; var, std, var_mean and std_mean
// over static dims.
#include "lowering/decompose.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "ir/op_schema.h"
#include "lowering/pass.h"

namespace kiln::lowering {

// The reduced dims of a rank-`rank` tensor, normalized and sorted (every dim
// when `dims` is absent or empty, as torch reduces them), or nullopt when one
// is out of range or repeated.
std::optional<std::vector<int64_t>> reduced_dims(const std::optional<std::vector<int64_t>>& dims, size_t rank) {
  std::vector<bool> seen(rank, false);
  std::vector<int64_t> out;
  if (!dims || dims->empty()) {
    for (size_t d = 0; d < rank; ++d) out.push_back(static_cast<int64_t>(d));
    return out;
  }
  for (int64_t d : *dims) {
    const int64_t r = std::max<int64_t>(static_cast<int64_t>(rank), 1);  // a 0-d tensor takes dim 0 and -1
    const int64_t nd = d < 0 ? d + r : d;
    if (nd < 0 || nd >= r || (rank > 0 && seen[static_cast<size_t>(nd)])) return std::nullopt;
    if (rank > 0) seen[static_cast<size_t>(nd)] = true;
    out.push_back(nd);
  }
  std::sort(out.begin(), out.end());
  return out;
}
std::optional<std::vector<int64_t>> node_reduced_dims(const ir::Node& n, size_t rank) {
  std::optional<std::vector<int64_t>> given;
  if (!absent(n, "dim")) {
    given = int_list(n, "dim");
    if (!given) return std::nullopt;
  }
  return reduced_dims(given, rank);
}

// `t` with `dims` reduced: kept as 1, or dropped.
ir::TensorType reduced(const ir::TensorType& t, const std::vector<int64_t>& dims, bool keepdim) {
  ir::TensorType r{t.dtype, {}};
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    const bool gone = std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) != dims.end();
    if (!gone)
      r.sizes.push_back(t.sizes[d]);
    else if (keepdim)
      r.sizes.push_back(ir::Dim::of(1));
  }
  return r;
}
// The sizes two operands broadcast to, or nullopt when they do not
// (sizes that are symbolic must be equal, or one of them static 1).
std::optional<std::vector<ir::Dim>> broadcast_sizes(const std::vector<ir::Dim>& a, const std::vector<ir::Dim>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<ir::Dim> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const ir::Dim* da = i < rank - a.size() ? nullptr : &a[i - (rank - a.size())];
    const ir::Dim* db = i < rank - b.size() ? nullptr : &b[i - (rank - b.size())];
    if (!da || (da->is_static() && da->value == 1)) {
      out[i] = db ? *db : *da;
    } else if (!db || (db->is_static() && db->value == 1) || same_dim(*da, *db)) {
      out[i] = *da;
    } else {
      return std::nullopt;
    }
  }
  return out;
}
// The floating tensor argument `arg` of a one-output node whose result has
// its dtype; null otherwise (the decomposition then leaves the node alone).
std::optional<std::vector<int64_t>> static_sizes(const ir::TensorType& t) {
  std::vector<int64_t> s;
  for (const ir::Dim& d : t.sizes) {
    if (!d.is_static()) return std::nullopt;
    s.push_back(d.value);
  }
  return s;
}

ir::TensorType static_type(DType dt, const std::vector<int64_t>& sizes) {
  ir::TensorType t{dt, {}};
  for (int64_t s : sizes) t.sizes.push_back(ir::Dim::of(s));
  return t;
}

int64_t norm_dim(int64_t d, size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  const int64_t nd = d < 0 ? d + r : d;
  return nd >= 0 && nd < r ? nd : -1;
}

Tensor index_table(const std::vector<int64_t>& v) {
  Tensor t = Tensor::zeros(DType::Int64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

bool floating_pair(const ir::Node& n, ir::Value* a, ir::Value* c) {
  return a && c && n.outputs.size() == 1 && is_floating(a->type.dtype) && c->type.dtype == a->type.dtype &&
         n.outputs[0]->type.dtype == a->type.dtype;
}

ir::Value* floating_operand(const ir::Node& n, std::string_view arg) {
  ir::Value* x = PatternContext::tensor_arg(n, arg);
  if (!x || n.outputs.size() != 1 || !is_floating(x->type.dtype) || n.outputs[0]->type.dtype != x->type.dtype)
    return nullptr;
  return x;
}
// A number argument with its default (for a default the schema does not
// declare: one that depends on the dtype, or an op of kiln's own).
std::optional<double> number_or(const PatternContext& ctx, const ir::Node& n, std::string_view arg, double def) {
  if (absent(n, arg)) return def;
  return ctx.number(n, arg);
}

std::optional<double> number_arg(const PatternContext& ctx, const ir::Node& n, std::string_view arg) {
  if (!absent(n, arg)) return ctx.number(n, arg);
  const ir::Arg* d = ir::argument_or_default(n, arg);
  if (!d) return std::nullopt;
  if (const auto* i = std::get_if<int64_t>(d)) return static_cast<double>(*i);
  if (const auto* f = std::get_if<double>(d)) return *f;
  if (const auto* b = std::get_if<bool>(d)) return *b ? 1.0 : 0.0;
  return std::nullopt;
}

namespace {

using ir::OpKind;

Expected<bool> square(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1) return false;
  ir::Node* mul = ctx.insert_before(&n, OpKind::kMulTensor, n.name, {{"self", x}, {"other", x}}, n.outputs[0]->type);
  ctx.replace_uses(n.outputs[0], mul->outputs[0]);
  return true;
}

Expected<bool> pad(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const auto p = int_list(n, "pad");
  if (!x || !p || n.outputs.size() != 1) return false;
  if (const ir::Arg* mode = n.find("mode")) {
    const auto* s = std::get_if<std::string>(mode);
    if (!s || *s != "constant") return false;  // reflect, replicate, circular: not decomposed here
  }
  std::vector<ir::NamedArg> args{{"self", x}, {"pad", *p}};
  if (const ir::Arg* v = n.find("value"); v && !std::holds_alternative<ir::NoneArg>(*v)) args.push_back({"value", *v});
  ir::Node* c = ctx.insert_before(&n, OpKind::kConstantPadNd, n.name, std::move(args), n.outputs[0]->type);
  ctx.replace_uses(n.outputs[0], c->outputs[0]);
  return true;
}

Expected<bool> logsumexp(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || !is_floating(x->type.dtype) || n.outputs[0]->type.dtype != x->type.dtype)
    return false;
  const auto keepdim = bool_value(n, "keepdim");
  const auto dims = reduced_dims(int_list(n, "dim", std::vector<int64_t>{}), x->type.sizes.size());
  if (!keepdim || !dims) return false;
  const ir::TensorType kept = reduced(x->type, *dims, true);
  const ir::TensorType mask_type{DType::Bool, kept.sizes};
  const std::string& b = n.name;
  ir::Node* m = ctx.insert_before(&n, OpKind::kAmax, b + "_max", {{"self", x}, {"dim", *dims}, {"keepdim", true}}, kept);
  ir::Node* a = ctx.insert_before(&n, OpKind::kAbs, b + "_max_abs", {{"self", m->outputs[0]}}, kept);
  ir::Node* inf = ctx.insert_before(&n, OpKind::kEqScalar, b + "_max_inf",
                                    {{"self", a->outputs[0]}, {"other", std::numeric_limits<double>::infinity()}},
                                    mask_type);
  // An infinite maximum shifts nothing (torch's rule): inf stays inf, -inf stays -inf.
  ir::Node* shift = ctx.insert_before(
      &n, OpKind::kMaskedFillScalar, b + "_shift",
      {{"self", m->outputs[0]}, {"mask", inf->outputs[0]}, {"value", 0.0}}, kept);
  ir::Node* d = ctx.insert_before(&n, OpKind::kSubTensor, b + "_centered",
                                  {{"self", x}, {"other", shift->outputs[0]}}, x->type);
  ir::Node* e = ctx.insert_before(&n, OpKind::kExp, b + "_exp", {{"self", d->outputs[0]}}, x->type);
  const ir::TensorType out = n.outputs[0]->type;
  ir::Node* s = ctx.insert_before(&n, OpKind::kSumDimIntList, b + "_sum",
                                  {{"self", e->outputs[0]}, {"dim", *dims}, {"keepdim", *keepdim}}, out);
  ir::Node* l = ctx.insert_before(&n, OpKind::kLog, b + "_log", {{"self", s->outputs[0]}}, out);
  ir::Value* back = shift->outputs[0];
  if (!*keepdim && !dims->empty()) {
    ir::Node* sq = ctx.insert_before(&n, OpKind::kSqueezeDims, b + "_shift_squeezed",
                                     {{"self", back}, {"dim", *dims}}, out);
    back = sq->outputs[0];
  }
  ir::Node* r = ctx.insert_before(&n, OpKind::kAddTensor, b, {{"self", l->outputs[0]}, {"other", back}}, out);
  ctx.replace_uses(n.outputs[0], r->outputs[0]);
  return true;
}

Expected<bool> vector_norm(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || !is_floating(x->type.dtype)) return false;
  const ir::TensorType out = n.outputs[0]->type;
  // dtype: the input converted to it first, as torch does.
  if (!absent(n, "dtype")) {
    const auto* d = std::get_if<DType>(n.find("dtype"));
    if (!d || *d != out.dtype || !is_floating(*d)) return false;
  } else if (out.dtype != x->type.dtype) {
    return false;
  }
  const std::optional<double> ord = n.find("ord") ? ctx.number(n, "ord") : std::optional<double>(2.0);
  const auto keepdim = bool_value(n, "keepdim");
  const auto dims = node_reduced_dims(n, x->type.sizes.size());
  if (!ord || std::isnan(*ord) || !keepdim || !dims) return false;
  const std::string& b = n.name;
  if (x->type.dtype != out.dtype) {
    ir::TensorType converted = x->type;
    converted.dtype = out.dtype;
    x = ctx.insert_before(&n, OpKind::kToCopy, b + "_converted", {{"self", x}, {"dtype", out.dtype}}, converted)
            ->outputs[0];
  }
  if (*ord == 0) {  // the count of nonzero elements (NaN among them)
    ir::TensorType mask = x->type;
    mask.dtype = DType::Bool;
    ir::Value* nz =
        ctx.insert_before(&n, OpKind::kNeScalar, b + "_nonzero", {{"self", x}, {"other", 0.0}}, mask)->outputs[0];
    ir::Value* count =
        ctx.insert_before(&n, OpKind::kSumDimIntList, b,
                          {{"self", nz}, {"dim", *dims}, {"keepdim", *keepdim}, {"dtype", out.dtype}}, out)
            ->outputs[0];
    ctx.replace_uses(n.outputs[0], count);
    return true;
  }
  auto reduce = [&](OpKind op, ir::Value* v, const std::string& name) {
    return ctx.insert_before(&n, op, name, {{"self", v}, {"dim", *dims}, {"keepdim", *keepdim}}, out)->outputs[0];
  };
  ir::Value* result = nullptr;
  if (*ord == 2) {
    ir::Value* sq = ctx.insert_before(&n, OpKind::kMulTensor, b + "_square", {{"self", x}, {"other", x}}, x->type)
                        ->outputs[0];
    result = ctx.insert_before(&n, OpKind::kSqrt, b, {{"self", reduce(OpKind::kSumDimIntList, sq, b + "_sum")}}, out)
                 ->outputs[0];
  } else {
    ir::Value* a = ctx.insert_before(&n, OpKind::kAbs, b + "_abs", {{"self", x}}, x->type)->outputs[0];
    if (*ord == 1) {
      result = reduce(OpKind::kSumDimIntList, a, b);
    } else if (std::isinf(*ord)) {
      result = reduce(*ord > 0 ? OpKind::kAmax : OpKind::kAmin, a, b);
    } else {
      ir::Value* p = ctx.insert_before(&n, OpKind::kPowTensorScalar, b + "_pow", {{"self", a}, {"exponent", *ord}},
                                       x->type)
                         ->outputs[0];
      result = ctx.insert_before(&n, OpKind::kPowTensorScalar, b,
                                 {{"self", reduce(OpKind::kSumDimIntList, p, b + "_sum")}, {"exponent", 1.0 / *ord}},
                                 out)
                   ->outputs[0];
    }
  }
  ctx.replace_uses(n.outputs[0], result);
  return true;
}

// ---- elementwise composites

// addcmul / addcdiv: self + value * (t1 OP t2).
Expected<bool> add_product(PatternContext& ctx, ir::Node& n, OpKind op) {
  ir::Value* x = floating_operand(n);
  ir::Value* t1 = floating_operand(n, "tensor1");
  ir::Value* t2 = floating_operand(n, "tensor2");
  const auto value = number_or(ctx, n, "value", 1.0);
  if (!x || !t1 || !t2 || !value || t1->type.dtype != x->type.dtype || t2->type.dtype != x->type.dtype) return false;
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* p = b.binary(op, t1, t2, dt);
  if (p && *value != 1.0) p = b.binary(OpKind::kMulTensor, p, *value, dt);
  return b.done(p ? b.binary(OpKind::kAddTensor, x, p, dt) : nullptr);
}
Expected<bool> addcmul(PatternContext& ctx, ir::Node& n) { return add_product(ctx, n, OpKind::kMulTensor); }
Expected<bool> addcdiv(PatternContext& ctx, ir::Node& n) { return add_product(ctx, n, OpKind::kDivTensor); }

// lerp, as ATen computes it: weight < 0.5 (in magnitude) ? self + weight * (end - self)
//                                                        : end - (end - self) * (1 - weight).
Expected<bool> lerp(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  ir::Value* end = floating_operand(n, "end");
  if (!x || !end || end->type.dtype != x->type.dtype) return false;
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* d = b.binary(OpKind::kSubTensor, end, x, dt);
  if (!d) return false;
  if (n.op == OpKind::kLerpScalar) {
    const auto w = ctx.number(n, "weight");
    if (!w) return false;
    if (std::fabs(*w) < 0.5)
      return b.done(b.binary(OpKind::kAddTensor, x, b.binary(OpKind::kMulTensor, d, *w, dt), dt));
    return b.done(b.binary(OpKind::kSubTensor, end, b.binary(OpKind::kMulTensor, d, 1.0 - *w, dt), dt));
  }
  ir::Value* w = floating_operand(n, "weight");
  if (!w || w->type.dtype != dt) return false;
  ir::Value* near = b.binary(OpKind::kAddTensor, x, b.binary(OpKind::kMulTensor, w, d, dt), dt);
  ir::Value* one_minus = b.unary(OpKind::kRsubScalar, w, {{"other", 1.0}});
  ir::Value* far = b.binary(OpKind::kSubTensor, end, b.binary(OpKind::kMulTensor, d, one_minus, dt), dt);
  ir::Value* small = b.compare(OpKind::kLtScalar, b.unary(OpKind::kAbs, w), 0.5);
  if (!near || !far) return false;
  return b.done(b.select(small, near, far));
}

// logit(x, eps) = log(z / (1 - z)), z = clamp(x, eps, 1 - eps) when eps is given.
Expected<bool> logit(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  if (!x) return false;
  Nodes b(ctx, n);
  if (!absent(n, "eps")) {
    const auto eps = ctx.number(n, "eps");
    if (!eps) return false;
    x = b.unary(OpKind::kClamp, x, {{"min", *eps}, {"max", 1.0 - *eps}});
  }
  ir::Value* q = b.binary(OpKind::kDivTensor, x, b.unary(OpKind::kRsubScalar, x, {{"other", 1.0}}), x->type.dtype);
  return b.done(b.unary(OpKind::kLog, q));
}

// softplus(x, beta, threshold) = x * beta > threshold ? x : log1p(exp(x * beta)) / beta.
Expected<bool> softplus(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  const auto beta = number_arg(ctx, n, "beta");
  const auto threshold = number_arg(ctx, n, "threshold");
  if (!x || !beta || !threshold) return false;
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* y = *beta == 1.0 ? x : b.binary(OpKind::kMulTensor, x, *beta, dt);
  ir::Value* soft = b.unary(OpKind::kLog1p, b.unary(OpKind::kExp, y));
  if (*beta != 1.0) soft = b.binary(OpKind::kDivTensor, soft, *beta, dt);
  return b.done(b.select(b.compare(OpKind::kGtScalar, y, *threshold), x, soft));
}

// mish(x) = x * tanh(softplus(x)).
Expected<bool> mish(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  if (!x) return false;
  Nodes b(ctx, n);
  ir::Value* t = b.unary(OpKind::kTanh, b.unary(OpKind::kSoftplus, x));
  return b.done(b.binary(OpKind::kMulTensor, x, t, x->type.dtype));
}

// celu(x, alpha) = elu(x, alpha, input_scale = 1 / alpha); selu = elu with SELU's constants.
Expected<bool> celu(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  const auto alpha = number_arg(ctx, n, "alpha");
  if (!x || !alpha || *alpha == 0.0) return false;
  Nodes b(ctx, n);
  return b.done(b.unary(OpKind::kElu, x, {{"alpha", *alpha}, {"scale", 1.0}, {"input_scale", 1.0 / *alpha}}));
}
Expected<bool> selu(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  if (!x) return false;
  Nodes b(ctx, n);
  return b.done(b.unary(OpKind::kElu, x,
                        {{"alpha", 1.6732632423543772848170429916717},
                         {"scale", 1.0507009873554804934193349852946},
                         {"input_scale", 1.0}}));
}

Expected<bool> relu6(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  if (!x) return false;
  Nodes b(ctx, n);
  return b.done(b.unary(OpKind::kHardtanh, x, {{"min_val", 0.0}, {"max_val", 6.0}}));
}

// hardshrink(x, l) = |x| <= l ? 0 : x.
Expected<bool> hardshrink(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  const auto l = number_arg(ctx, n, "lambd");
  if (!x || !l) return false;
  Nodes b(ctx, n);
  return b.done(b.fill(x, b.compare(OpKind::kLeScalar, b.unary(OpKind::kAbs, x), *l), 0.0));
}

// softshrink(x, l) = x > l ? x - l : (x < -l ? x + l : 0) (NaN gives 0, as ATen's kernel).
Expected<bool> softshrink(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  const auto l = number_arg(ctx, n, "lambd");
  if (!x || !l) return false;
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* below = b.unary(OpKind::kLogicalNot, b.compare(OpKind::kLtScalar, x, -*l));
  ir::Value* low = b.fill(b.binary(OpKind::kAddTensor, x, *l, dt), below, 0.0);
  return b.done(b.select(b.compare(OpKind::kGtScalar, x, *l), b.binary(OpKind::kSubTensor, x, *l, dt), low));
}

// threshold(x, t, v) = x <= t ? v : x.
Expected<bool> threshold(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  const auto t = ctx.number(n, "threshold");
  const auto v = ctx.number(n, "value");
  if (!x || !t || !v) return false;
  Nodes b(ctx, n);
  return b.done(b.fill(x, b.compare(OpKind::kLeScalar, x, *t), *v));
}

// log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|)).
Expected<bool> log_sigmoid(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  if (!x) return false;
  Nodes b(ctx, n);
  ir::Value* m = b.unary(OpKind::kClampMax, x, {{"max", 0.0}});
  ir::Value* l = b.unary(OpKind::kLog1p, b.unary(OpKind::kExp, b.unary(OpKind::kNeg, b.unary(OpKind::kAbs, x))));
  return b.done(b.binary(OpKind::kSubTensor, m, l, x->type.dtype));
}

// sinc(x) = x == 0 ? 1 : sin(pi x) / (pi x).
Expected<bool> sinc(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  if (!x) return false;
  Nodes b(ctx, n);
  const DType dt = x->type.dtype;
  ir::Value* px = b.binary(OpKind::kMulTensor, x, 3.14159265358979323846, dt);
  ir::Value* q = b.binary(OpKind::kDivTensor, b.unary(OpKind::kSin, px), px, dt);
  return b.done(b.fill(q, b.compare(OpKind::kEqScalar, x, 0.0), 1.0));
}

// xlogy(x, y) = y is NaN ? NaN : (x == 0 ? 0 : x * log(y)); xlog1py the same with log1p(y).
Expected<bool> x_times_log(PatternContext& ctx, ir::Node& n, OpKind log) {
  ir::Value* x = floating_operand(n);
  ir::Value* y = floating_operand(n, "other");
  if (!x || !y || y->type.dtype != x->type.dtype) return false;
  Nodes b(ctx, n);
  ir::Value* p = b.binary(OpKind::kMulTensor, x, b.unary(log, y), x->type.dtype);
  if (!p) return false;
  ir::Value* zero = b.fill(p, b.compare(OpKind::kEqScalar, x, 0.0), 0.0);
  ir::Value* nan = b.add(OpKind::kIsnan, {{"self", y}}, {DType::Bool, y->type.sizes});
  return b.done(b.fill(zero, nan, std::numeric_limits<double>::quiet_NaN()));
}
Expected<bool> xlogy(PatternContext& ctx, ir::Node& n) { return x_times_log(ctx, n, OpKind::kLog); }
Expected<bool> xlog1py(PatternContext& ctx, ir::Node& n) { return x_times_log(ctx, n, OpKind::kLog1p); }

// deg2rad / rad2deg: a product with a number.
Expected<bool> scaled(PatternContext& ctx, ir::Node& n, double factor) {
  ir::Value* x = floating_operand(n);
  if (!x) return false;
  Nodes b(ctx, n);
  return b.done(b.binary(OpKind::kMulTensor, x, factor, x->type.dtype));
}
Expected<bool> deg2rad(PatternContext& ctx, ir::Node& n) { return scaled(ctx, n, 3.14159265358979323846 / 180.0); }
Expected<bool> rad2deg(PatternContext& ctx, ir::Node& n) { return scaled(ctx, n, 180.0 / 3.14159265358979323846); }

// frac(x) = x - trunc(x).
Expected<bool> frac(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  if (!x) return false;
  Nodes b(ctx, n);
  return b.done(b.binary(OpKind::kSubTensor, x, b.unary(OpKind::kTrunc, x), x->type.dtype));
}

// positive(x) = x (of any dtype).
Expected<bool> positive(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || n.outputs[0]->type.dtype != x->type.dtype) return false;
  ctx.replace_uses(n.outputs[0], x);
  return true;
}

// glu(x, dim) = a * sigmoid(b), a and b the halves of x along dim.
Expected<bool> glu(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  const auto dim = int_value(n, "dim");
  if (!x || !dim) return false;
  const int64_t rank = static_cast<int64_t>(x->type.sizes.size());
  const int64_t d = *dim < 0 ? *dim + rank : *dim;
  if (d < 0 || d >= rank || !x->type.sizes[static_cast<size_t>(d)].is_static()) return false;
  const int64_t size = x->type.sizes[static_cast<size_t>(d)].value;
  if (size % 2 != 0) return false;
  ir::TensorType half = x->type;
  half.sizes[static_cast<size_t>(d)] = ir::Dim::of(size / 2);
  Nodes b(ctx, n);
  auto slice = [&](int64_t start) {
    return b.add(OpKind::kSliceTensor, {{"self", x}, {"dim", d}, {"start", start}, {"end", start + size / 2}}, half);
  };
  ir::Value* first = slice(0);
  ir::Value* gate = b.unary(OpKind::kSigmoid, slice(size / 2));
  return b.done(b.binary(OpKind::kMulTensor, first, gate, x->type.dtype));
}

// isposinf / isneginf: x == +-inf; isfinite: |x| < inf (NaN is not).
Expected<bool> infinity_test(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || !is_floating(x->type.dtype) || n.outputs[0]->type.dtype != DType::Bool)
    return false;
  Nodes b(ctx, n);
  const double inf = std::numeric_limits<double>::infinity();
  if (n.op == OpKind::kIsfinite) return b.done(b.compare(OpKind::kLtScalar, b.unary(OpKind::kAbs, x), inf));
  return b.done(b.compare(OpKind::kEqScalar, x, n.op == OpKind::kIsposinf ? inf : -inf));
}

// nan_to_num(x, nan, posinf, neginf): NaN, +inf and -inf replaced (by 0 and
// the dtype's largest and lowest finite values when not given).
Expected<bool> nan_to_num(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = floating_operand(n);
  if (!x) return false;
  double most = std::numeric_limits<double>::max();
  switch (x->type.dtype) {
    case DType::Float32: most = std::numeric_limits<float>::max(); break;
    case DType::Float16: most = 65504.0; break;
    case DType::BFloat16: most = 3.3895313892515355e38; break;
    default: break;
  }
  const auto nan = number_or(ctx, n, "nan", 0.0);
  const auto posinf = number_or(ctx, n, "posinf", most);
  const auto neginf = number_or(ctx, n, "neginf", -most);
  if (!nan || !posinf || !neginf) return false;
  Nodes b(ctx, n);
  const double inf = std::numeric_limits<double>::infinity();
  ir::Value* y = b.fill(x, b.add(OpKind::kIsnan, {{"self", x}}, {DType::Bool, x->type.sizes}), *nan);
  y = b.fill(y, b.compare(OpKind::kEqScalar, x, inf), *posinf);
  return b.done(b.fill(y, b.compare(OpKind::kEqScalar, x, -inf), *neginf));
}

// floor_divide(a, b) = div(a, b, rounding_mode="floor"), operands and result of one dtype.
Expected<bool> floor_divide(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const ir::Arg* other = n.find("other");
  if (!x || !other || n.outputs.size() != 1 || n.outputs[0]->type.dtype != x->type.dtype) return false;
  if (const auto* v = std::get_if<ir::Value*>(other); v && (*v)->type.dtype != x->type.dtype) return false;
  Nodes b(ctx, n);
  return b.done(b.add(OpKind::kDivTensorMode, {{"self", x}, {"other", *other}, {"rounding_mode", std::string("floor")}},
                      n.outputs[0]->type));
}

// divide.Tensor is div.Tensor spelled out.
Expected<bool> divide(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const ir::Arg* other = n.find("other");
  if (!x || !other || n.outputs.size() != 1) return false;
  Nodes b(ctx, n);
  return b.done(b.add(OpKind::kDivTensor, {{"self", x}, {"other", *other}}, n.outputs[0]->type));
}

// ldexp(x, e) = x * exp2(e), in the result's floating dtype.
Expected<bool> ldexp(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  ir::Value* e = PatternContext::tensor_arg(n, "other");
  if (!x || !e || n.outputs.size() != 1 || !is_floating(n.outputs[0]->type.dtype)) return false;
  const DType dt = n.outputs[0]->type.dtype;
  if (x->type.dtype != dt || (is_floating(e->type.dtype) && e->type.dtype != dt)) return false;
  Nodes b(ctx, n);
  ir::Value* scale = b.add(OpKind::kExp2, {{"self", e}}, {is_floating(e->type.dtype) ? dt : DType::Float32, e->type.sizes});
  if (scale->type.dtype != dt) return false;
  return b.done(b.binary(OpKind::kMulTensor, x, scale, dt));
}

// trace(x) = sum(diagonal(x)) of a matrix of static sizes.
Expected<bool> trace(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || x->type.sizes.size() != 2) return false;
  const ir::Dim &r = x->type.sizes[0], &c = x->type.sizes[1];
  if (!r.is_static() || !c.is_static()) return false;
  Nodes b(ctx, n);
  ir::Value* diag = b.add(OpKind::kDiagonal, {{"self", x}, {"offset", int64_t{0}}, {"dim1", int64_t{0}}, {"dim2", int64_t{1}}},
                          {x->type.dtype, {ir::Dim::of(std::min(r.value, c.value))}});
  return b.done(b.add(OpKind::kSum, {{"self", diag}}, n.outputs[0]->type));
}

// view_as / reshape_as: the other's static sizes; ravel: one dim of every element.
Expected<bool> reshape_like(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1) return false;
  std::vector<int64_t> sizes;
  for (const ir::Dim& d : n.outputs[0]->type.sizes) {
    if (!d.is_static()) return false;
    sizes.push_back(d.value);
  }
  Nodes b(ctx, n);
  const bool view = n.op == OpKind::kViewAs;
  return b.done(b.add(view ? OpKind::kView : OpKind::kReshape, {{"self", x}, {view ? "size" : "shape", sizes}},
                      n.outputs[0]->type));
}

// ---- products of vectors, moved and repeated dims

// inner(a, b) beyond vectors: a 0-d operand scales the other; else a [.., K]
// times b [.., K] over K: matmul(a, b reshaped [N, K] and transposed), shaped
// a's leading sizes then b's (static sizes).
Expected<bool> inner_product(PatternContext& ctx, ir::Node& n, ir::Value* a, ir::Value* b) {
  Nodes nodes(ctx, n);
  const DType dt = a->type.dtype;
  if (a->type.sizes.empty() || b->type.sizes.empty()) return nodes.done(nodes.binary(OpKind::kMulTensor, a, b, dt));
  std::vector<int64_t> bs;
  for (const ir::Dim& d : b->type.sizes) {
    if (!d.is_static()) return false;
    bs.push_back(d.value);
  }
  if (!same_dim(a->type.sizes.back(), b->type.sizes.back())) return false;
  const int64_t k = bs.back();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < bs.size(); ++i) rows *= bs[i];
  ir::Value* flat = nodes.add(OpKind::kReshape, {{"self", b}, {"shape", std::vector<int64_t>{rows, k}}},
                              {dt, {ir::Dim::of(rows), ir::Dim::of(k)}});
  ir::Value* t = nodes.add(OpKind::kPermute, {{"self", flat}, {"dims", std::vector<int64_t>{1, 0}}},
                           {dt, {ir::Dim::of(k), ir::Dim::of(rows)}});
  ir::TensorType mm{dt, a->type.sizes};
  mm.sizes.back() = ir::Dim::of(rows);
  ir::Value* p = nodes.add(OpKind::kMatmul, {{"self", a}, {"other", t}}, mm);
  std::vector<int64_t> shape;
  for (const ir::Dim& d : nodes.out().sizes) {
    if (!d.is_static()) return false;
    shape.push_back(d.value);
  }
  return nodes.done(nodes.add(OpKind::kReshape, {{"self", p}, {"shape", shape}}, nodes.out()));
}

// outer(a, b) = a[:, None] * b; dot, vdot and inner of 1-D tensors = sum(a * b);
// mv(A, x) = sum(A * x, dim 1).
Expected<bool> vector_product(PatternContext& ctx, ir::Node& n) {
  ir::Value* a = floating_operand(n);
  const char* other = n.op == OpKind::kOuter ? "vec2"
                      : n.op == OpKind::kDot ? "tensor"
                      : n.op == OpKind::kMv  ? "vec"
                                             : "other";
  ir::Value* b = floating_operand(n, other);
  if (n.op == OpKind::kInner && a && b && b->type.dtype == a->type.dtype &&
      (a->type.sizes.size() != 1 || b->type.sizes.size() != 1))
    return inner_product(ctx, n, a, b);
  if (!a || !b || b->type.dtype != a->type.dtype || b->type.sizes.size() != 1) return false;
  const size_t rank = n.op == OpKind::kMv ? 2 : 1;
  if (a->type.sizes.size() != rank) return false;
  Nodes nodes(ctx, n);
  const DType dt = a->type.dtype;
  if (n.op == OpKind::kOuter) {
    ir::Value* col =
        nodes.add(OpKind::kUnsqueeze, {{"self", a}, {"dim", int64_t{1}}}, {dt, {a->type.sizes[0], ir::Dim::of(1)}});
    return nodes.done(nodes.binary(OpKind::kMulTensor, col, b, dt));
  }
  ir::Value* p = nodes.binary(OpKind::kMulTensor, a, b, dt);
  if (!p) return false;
  if (n.op == OpKind::kMv)
    return nodes.done(nodes.add(OpKind::kSumDimIntList,
                                {{"self", p}, {"dim", std::vector<int64_t>{1}}, {"keepdim", false}}, nodes.out()));
  return nodes.done(nodes.add(OpKind::kSum, {{"self", p}}, nodes.out()));
}

// linalg_norm's vector forms as linalg_vector_norm (decomposed in turn): no
// order (a 2-norm of the elements over dim, every dim when None: Frobenius's
// norm for two dims), or a numeric order over one dim or of a 1-D tensor.
// Matrix orders over two dims are left as they are.
Expected<bool> linalg_norm(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1 || !is_floating(x->type.dtype)) return false;
  const size_t rank = x->type.sizes.size();
  const bool no_dim = absent(n, "dim");
  const std::optional<std::vector<int64_t>> dims =
      no_dim ? std::optional<std::vector<int64_t>>(std::vector<int64_t>{}) : int_list(n, "dim");
  if (!dims) return false;
  std::vector<ir::NamedArg> args{{"self", x}};
  if (!no_dim) args.push_back({"dim", *dims});
  if (!absent(n, "ord")) {
    const std::optional<double> ord = ctx.number(n, "ord");
    if (!ord || !(dims->size() == 1 || (no_dim && rank == 1))) return false;
    args.push_back({"ord", *ord});
  } else if (dims->size() > 2) {
    return false;
  }
  if (const ir::Arg* k = n.find("keepdim")) args.push_back({"keepdim", *k});
  if (const ir::Arg* d = n.find("dtype"); d && !absent(n, "dtype")) args.push_back({"dtype", *d});
  ir::Node* v = ctx.insert_before(&n, OpKind::kLinalgVectorNorm, n.name, std::move(args), n.outputs[0]->type);
  ctx.replace_uses(n.outputs[0], v->outputs[0]);
  return true;
}

// addmm(self, mat1, mat2, beta, alpha) = beta * self + alpha * (mat1 @ mat2)
// where the GEMM's bias epilogue cannot take it: beta other than 1, or self
// other than a row of the output's width (a matrix, a column, a single value
// broadcast). beta 0 ignores self, NaN included, as torch does.
Expected<bool> addmm(PatternContext& ctx, ir::Node& n) {
  ir::Value* self = floating_operand(n);
  ir::Value* a = floating_operand(n, "mat1");
  ir::Value* b = floating_operand(n, "mat2");
  if (!self || !a || !b || a->type.dtype != self->type.dtype || b->type.dtype != self->type.dtype) return false;
  const auto beta = number_or(ctx, n, "beta", 1.0);
  const auto alpha = number_or(ctx, n, "alpha", 1.0);
  if (!beta || !alpha) return false;
  const auto& bs = self->type.sizes;
  const auto& os = n.outputs[0]->type.sizes;
  if (os.size() != 2 || bs.size() > 2) return false;
  // The GEMM's bias: a row of the output's width ([n] or [1, n]), beta 1.
  const bool row = (bs.size() == 1 && same_dim(bs[0], os[1])) ||
                   (bs.size() == 2 && bs[0].is_static() && bs[0].value == 1 && same_dim(bs[1], os[1]));
  if (*beta == 1 && row) return false;
  // self must broadcast to the output (else the node is left, named).
  for (size_t k = 0; k < bs.size(); ++k) {
    const ir::Dim& d = bs[bs.size() - 1 - k];
    if (!(d.is_static() && d.value == 1) && !same_dim(d, os[os.size() - 1 - k])) return false;
  }
  Nodes nodes(ctx, n);
  const DType dt = self->type.dtype;
  ir::Value* p = nodes.add(OpKind::kMm, {{"self", a}, {"mat2", b}}, nodes.out());
  if (*alpha != 1) p = nodes.binary(OpKind::kMulTensor, p, *alpha, dt);
  if (*beta == 0) return nodes.done(p);
  ir::Value* s = *beta == 1 ? self : nodes.binary(OpKind::kMulTensor, self, *beta, dt);
  ir::Value* sum = nodes.binary(OpKind::kAddTensor, p, s, dt);
  return nodes.done(sum);
}

// matmul with a 1-D operand, as PyTorch defines it: a vector first is a row
// [1, K] (its dim squeezed from the product), a vector second a column [K, 1];
// two vectors are a dot product.
Expected<bool> matmul_of_vectors(PatternContext& ctx, ir::Node& n) {
  ir::Value* a = floating_operand(n);
  ir::Value* b = floating_operand(n, "other");
  if (!a || !b || b->type.dtype != a->type.dtype) return false;
  const size_t ra = a->type.sizes.size(), rb = b->type.sizes.size();
  if (ra == 0 || rb == 0 || (ra > 1 && rb > 1)) return false;
  Nodes nodes(ctx, n);
  const DType dt = a->type.dtype;
  if (ra == 1 && rb == 1) {
    ir::Value* p = nodes.binary(OpKind::kMulTensor, a, b, dt);
    return p ? nodes.done(nodes.add(OpKind::kSum, {{"self", p}}, nodes.out())) : false;
  }
  ir::TensorType product = nodes.out();
  if (ra == 1) {
    // [K] -> [1, K]; the product [..., 1, N], then dim -2 squeezed.
    ir::Value* row =
        nodes.add(OpKind::kUnsqueeze, {{"self", a}, {"dim", int64_t{0}}}, {dt, {ir::Dim::of(1), a->type.sizes[0]}});
    product.sizes.insert(product.sizes.end() - 1, ir::Dim::of(1));
    ir::Value* p = nodes.add(OpKind::kMatmul, {{"self", row}, {"other", b}}, product);
    return nodes.done(nodes.add(OpKind::kSqueezeDim,
                                {{"self", p}, {"dim", static_cast<int64_t>(product.sizes.size()) - 2}}, nodes.out()));
  }
  // [K] -> [K, 1]; the product [..., M, 1], then the last dim squeezed.
  ir::Value* col =
      nodes.add(OpKind::kUnsqueeze, {{"self", b}, {"dim", int64_t{1}}}, {dt, {b->type.sizes[0], ir::Dim::of(1)}});
  product.sizes.push_back(ir::Dim::of(1));
  ir::Value* p = nodes.add(OpKind::kMatmul, {{"self", a}, {"other", col}}, product);
  return nodes.done(nodes.add(OpKind::kSqueezeDim,
                              {{"self", p}, {"dim", static_cast<int64_t>(product.sizes.size()) - 1}}, nodes.out()));
}

// movedim: the permutation that puts each source dim at its destination, the
// other dims in order in the places left.
Expected<bool> movedim(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  if (!x || n.outputs.size() != 1) return false;
  std::optional<std::vector<int64_t>> src, dst;
  if (n.op == OpKind::kMovedimInt) {
    const auto s1 = int_value(n, "source"), d1 = int_value(n, "destination");
    if (!s1 || !d1) return false;
    src = std::vector<int64_t>{*s1};
    dst = std::vector<int64_t>{*d1};
  } else {
    src = int_list(n, "source");
    dst = int_list(n, "destination");
  }
  const int64_t rank = static_cast<int64_t>(x->type.sizes.size());
  if (!src || !dst || src->size() != dst->size()) return false;
  std::vector<int64_t> perm(static_cast<size_t>(rank), -1);
  std::vector<bool> used(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < src->size(); ++i) {
    const int64_t s = (*src)[i] < 0 ? (*src)[i] + rank : (*src)[i];
    const int64_t d = (*dst)[i] < 0 ? (*dst)[i] + rank : (*dst)[i];
    if (s < 0 || s >= rank || d < 0 || d >= rank || perm[static_cast<size_t>(d)] >= 0 || used[static_cast<size_t>(s)])
      return false;
    perm[static_cast<size_t>(d)] = s;
    used[static_cast<size_t>(s)] = true;
  }
  int64_t next = 0;
  for (int64_t& p : perm) {
    if (p >= 0) continue;
    while (used[static_cast<size_t>(next)]) ++next;
    p = next;
    used[static_cast<size_t>(next)] = true;
  }
  Nodes nodes(ctx, n);
  return nodes.done(nodes.add(OpKind::kPermute, {{"self", x}, {"dims", perm}}, nodes.out()));
}

// fliplr = flip(dims=[1]), flipud = flip(dims=[0]).
Expected<bool> flip_side(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const size_t need = n.op == OpKind::kFliplr ? 2 : 1;
  if (!x || n.outputs.size() != 1 || x->type.sizes.size() < need) return false;
  Nodes nodes(ctx, n);
  const std::vector<int64_t> dims{n.op == OpKind::kFliplr ? 1 : 0};
  return nodes.done(nodes.add(OpKind::kFlip, {{"self", x}, {"dims", dims}}, nodes.out()));
}

// tile(x, dims) = repeat(x, dims padded on the left with 1s to x's rank).
Expected<bool> tile(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  auto dims = int_list(n, "dims");
  if (!x || !dims || n.outputs.size() != 1) return false;
  while (dims->size() < x->type.sizes.size()) dims->insert(dims->begin(), 1);
  Nodes nodes(ctx, n);
  return nodes.done(nodes.add(OpKind::kRepeat, {{"self", x}, {"repeats", *dims}}, nodes.out()));
}

// broadcast_tensors: each tensor expanded to its result's (static) sizes.
Expected<bool> broadcast_tensors(PatternContext& ctx, ir::Node& n) {
  const auto* ins = std::get_if<std::vector<ir::Value*>>(n.find("tensors"));
  if (!ins || ins->size() != n.outputs.size()) return false;
  for (const ir::Value* o : n.outputs)
    for (const ir::Dim& d : o->type.sizes)
      if (!d.is_static()) return false;
  std::vector<ir::Value*> expanded;
  for (size_t i = 0; i < ins->size(); ++i) {
    const ir::Value* o = n.outputs[i];
    std::vector<int64_t> sizes;
    for (const ir::Dim& d : o->type.sizes) sizes.push_back(d.value);
    expanded.push_back(ctx.insert_before(&n, OpKind::kExpand, n.name + "_" + std::to_string(i),
                                         {{"self", (*ins)[i]}, {"size", sizes}}, o->type)
                           ->outputs[0]);
  }
  for (size_t i = 0; i < expanded.size(); ++i) ctx.replace_uses(n.outputs[i], expanded[i]);
  return true;
}

// var / std (and var_mean, std_mean) in the forms the reduction kernels do not
// take (var.correction and var_mean.correction are kernels), over static dims:
// sum((x - mean)^2) / max(N - correction, 0), std its square root;
// correction 1 by default (unbiased), 0 when unbiased is false.
Expected<bool> variance(PatternContext& ctx, ir::Node& n) {
  ir::Value* x = PatternContext::tensor_arg(n, "self");
  const bool with_mean = n.op == OpKind::kVarMeanDim || n.op == OpKind::kStdMeanDim ||
                         n.op == OpKind::kStdMeanCorrection || n.op == OpKind::kVarMeanDefault ||
                         n.op == OpKind::kStdMeanDefault;
  const bool is_std = n.op == OpKind::kStdDefault || n.op == OpKind::kStdDim || n.op == OpKind::kStdCorrection ||
                      n.op == OpKind::kStdMeanDim || n.op == OpKind::kStdMeanCorrection ||
                      n.op == OpKind::kStdMeanDefault;
  if (!x || !is_floating(x->type.dtype) || n.outputs.size() != (with_mean ? 2u : 1u)) return false;
  for (const ir::Value* o : n.outputs)
    if (o->type.dtype != x->type.dtype) return false;
  double correction = 1.0;
  if (n.find("correction") && !absent(n, "correction")) {
    const auto c = ctx.number(n, "correction");
    if (!c) return false;
    correction = *c;
  } else if (n.find("unbiased") && !absent(n, "unbiased")) {
    const auto u = bool_value(n, "unbiased");
    if (!u) return false;
    correction = *u ? 1.0 : 0.0;
  }
  const auto dims = node_reduced_dims(n, x->type.sizes.size());
  const auto keepdim = bool_value(n, "keepdim", false);
  if (!dims || !keepdim) return false;
  int64_t count = 1;
  for (int64_t d : *dims) {
    const ir::Dim& dim = x->type.sizes[static_cast<size_t>(d)];
    if (!dim.is_static()) return false;
    count *= dim.value;
  }
  Nodes nodes(ctx, n);
  const ir::TensorType kept = reduced(x->type, *dims, true);
  const ir::TensorType out = reduced(x->type, *dims, *keepdim);
  ir::Value* mean = nodes.add(OpKind::kMeanDim, {{"self", x}, {"dim", *dims}, {"keepdim", true}}, kept);
  ir::Value* d = nodes.binary(OpKind::kSubTensor, x, mean, x->type.dtype);
  ir::Value* sq = nodes.binary(OpKind::kMulTensor, d, d, x->type.dtype);
  ir::Value* sum = nodes.add(OpKind::kSumDimIntList, {{"self", sq}, {"dim", *dims}, {"keepdim", *keepdim}}, out);
  ir::Value* var = nodes.add(OpKind::kDivTensor, {{"self", sum}, {"other", std::max(0.0, count - correction)}}, out);
  ir::Value* result = is_std ? nodes.unary(OpKind::kSqrt, var) : var;
  if (with_mean) {
    ir::Value* m = mean;
    if (!*keepdim && !dims->empty()) m = nodes.add(OpKind::kSqueezeDims, {{"self", mean}, {"dim", *dims}}, out);
    ctx.replace_uses(n.outputs[1], m);
  }
  return nodes.done(result);
}

constexpr Decomposition kDecompositions[] = {
    {OpKind::kSquare, &square},
    {OpKind::kPad, &pad},
    {OpKind::kLogsumexp, &logsumexp},
    {OpKind::kLinalgVectorNorm, &vector_norm},
    {OpKind::kMatmul, &matmul_of_vectors},
    {OpKind::kLinalgNorm, &linalg_norm},
    {OpKind::kAddmm, &addmm},
    {OpKind::kAddcmul, &addcmul},
    {OpKind::kAddcdiv, &addcdiv},
    {OpKind::kLerpScalar, &lerp},
    {OpKind::kLerpTensor, &lerp},
    {OpKind::kLogit, &logit},
    {OpKind::kSoftplus, &softplus},
    {OpKind::kMish, &mish},
    {OpKind::kCelu, &celu},
    {OpKind::kSelu, &selu},
    {OpKind::kRelu6, &relu6},
    {OpKind::kHardshrink, &hardshrink},
    {OpKind::kSoftshrink, &softshrink},
    {OpKind::kThreshold, &threshold},
    {OpKind::kLogSigmoid, &log_sigmoid},
    {OpKind::kSinc, &sinc},
    {OpKind::kXlogyTensor, &xlogy},
    {OpKind::kSpecialXlog1py, &xlog1py},
    {OpKind::kDeg2rad, &deg2rad},
    {OpKind::kRad2deg, &rad2deg},
    {OpKind::kFrac, &frac},
    {OpKind::kPositive, &positive},
    {OpKind::kGlu, &glu},
    {OpKind::kIsposinf, &infinity_test},
    {OpKind::kIsneginf, &infinity_test},
    {OpKind::kIsfinite, &infinity_test},
    {OpKind::kNanToNum, &nan_to_num},
    {OpKind::kFloorDivide, &floor_divide},
    {OpKind::kDivideTensor, &divide},
    {OpKind::kLdexp, &ldexp},
    {OpKind::kTrace, &trace},
    {OpKind::kViewAs, &reshape_like},
    {OpKind::kReshapeAs, &reshape_like},
    {OpKind::kRavel, &reshape_like},
    {OpKind::kOuter, &vector_product},
    {OpKind::kDot, &vector_product},
    {OpKind::kVdot, &vector_product},
    {OpKind::kMv, &vector_product},
    {OpKind::kInner, &vector_product},
    {OpKind::kMovedimInt, &movedim},
    {OpKind::kMovedimIntlist, &movedim},
    {OpKind::kFliplr, &flip_side},
    {OpKind::kFlipud, &flip_side},
    {OpKind::kTile, &tile},
    {OpKind::kBroadcastTensors, &broadcast_tensors},
    {OpKind::kVarDefault, &variance},
    {OpKind::kVarDim, &variance},
    {OpKind::kStdDefault, &variance},
    {OpKind::kStdDim, &variance},
    {OpKind::kStdCorrection, &variance},
    {OpKind::kVarMeanDim, &variance},
    {OpKind::kStdMeanDim, &variance},
    {OpKind::kStdMeanCorrection, &variance},
    {OpKind::kVarMeanDefault, &variance},
    {OpKind::kStdMeanDefault, &variance},
};

// Every family's table, this file's first.
std::vector<std::span<const Decomposition>> tables() {
  return {kDecompositions,         loss_decompositions(),     resampling_decompositions(), pool_norm_decompositions(),
          shape_decompositions(),  indexing_decompositions(), arithmetic_decompositions(), linalg_decompositions(),
          einsum_decompositions(), tensor_decompositions()};
}

Expected<bool> decompose(PatternContext& ctx, ir::Node& n) {
  static const std::vector<std::span<const Decomposition>> all = tables();
  for (std::span<const Decomposition> table : all)
    for (const Decomposition& d : table)
      if (d.op == n.op) return d.rewrite(ctx, n);
  return false;
}

}  // namespace

const std::vector<ir::OpKind>& decomposed_ops() {
  static const std::vector<ir::OpKind> ops = [] {
    std::vector<ir::OpKind> v;
    for (std::span<const Decomposition> table : tables())
      for (const Decomposition& d : table) v.push_back(d.op);
    return v;
  }();
  return ops;
}

Status decompose_composites(ir::Module& m) { return rewrite_to_fixed_point(m, decompose); }

Status decompose_composites_keeping(ir::Module& m, const std::function<bool(ir::OpKind)>& kept) {
  return rewrite_to_fixed_point(m, [&](PatternContext& ctx, ir::Node& n) -> Expected<bool> {
    if (kept(n.op)) return false;
    return decompose(ctx, n);
  });
}

}  // namespace kiln::lowering
